"""Client.shared_memory and attend(shared_memory=..., out=...) against a real
attnserve started with --shared_memory: results bit-identical to the bytes
path, the output written into the region, the lease's end, and the errors."""

import asyncio
import os
import threading

import numpy as np
import pytest
import torch

import attnserve

PREFIX = "attnserve_"


@pytest.fixture(scope="module")
def shm_server():
    from conftest import ServerProcess
    s = ServerProcess("--workers=2", "--threads_per_worker=1", "--shared_memory",
                      "--shared_memory_max_bytes=67108864", "--metrics_listen=127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture
def client(shm_server):
    with attnserve.Client(shm_server.target, timeout=60) as c:
        yield c


def tensors(shape_q, shape_kv, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape_q).astype(dtype),
            rng.standard_normal(shape_kv).astype(dtype),
            rng.standard_normal(shape_kv).astype(dtype))


def leftovers():
    """This process's segments (other test processes may run beside it)."""
    mine = f"{PREFIX}py_{os.getpid()}_"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(mine)
                  or n.startswith(PREFIX + "t_"))


def registered(client):
    return [r.name for r in client.shared_memory_status().regions]


# -- parity with the bytes path -----------------------------------------------------

@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
def test_f32_bit_identical_to_bytes(client, layout):
    shape_q, shape_kv = ((2, 4, 33, 64), (2, 2, 47, 64)) if layout == "BHLD" else \
        ((2, 33, 4, 64), (2, 47, 2, 64))
    q, k, v = tensors(shape_q, shape_kv)
    kw = dict(is_causal=True, alignment="bottom_right", key_lengths=[40, 47], layout=layout,
              return_weights=True)
    out, w = client.attend(q, k, v, **kw)
    with client.shared_memory("t_f32", 4 << 20) as region:
        out_s, w_s = client.attend(q, k, v, shared_memory=region, **kw)
        assert registered(client) == ["t_f32"]
        assert client.shared_memory_status("t_f32").regions[0].calls == 1
    assert out_s.dtype == np.float32 and out_s.shape == out.shape
    assert np.array_equal(out_s, out) and np.array_equal(w_s, w)
    assert out_s.flags.writeable and out_s.flags.owndata  # the caller's own copy


def test_bf16_torch_and_numpy_bit_identical(client):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, 64, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    ref = client.attend(q, k, v, is_causal=True)
    ref_f32out = client.attend(q, k, v, output_dtype="float32")
    with client.shared_memory("t_bf16", 1 << 20) as region:
        out = client.attend(q, k, v, is_causal=True, shared_memory=region)
        assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
        out32 = client.attend(q, k, v, output_dtype="float32", shared_memory=region)
        assert out32.dtype == torch.float32 and torch.equal(out32, ref_f32out)
        # NumPy callers: bf16 bits through the region, results as float32.
        qn, kn, vn = (t.view(torch.int16).numpy().view(np.uint16) for t in (q, k, v))
        qt, kt, vt = (region.put(t) for t in (q, k, v))
        assert qt.dtype.name == "bfloat16" and np.array_equal(qt.numpy(), qn)
        n = client.attend(qt, kt, vt, is_causal=True)
        assert isinstance(n, torch.Tensor) and torch.equal(n, ref)  # put() kept the kind
        assert np.array_equal(kt.numpy(), kn) and np.array_equal(vt.numpy(), vn)


def test_f16_and_gqa(client):
    q, k, v = tensors((1, 8, 16, 64), (1, 2, 16, 64), np.float16)
    ref = client.attend(q, k, v)
    with client.shared_memory(None, 1 << 20) as region:
        assert region.name.startswith("py_") and region.key == PREFIX + region.name
        out = client.attend(q, k, v, shared_memory=region)
    assert out.dtype == np.float16 and np.array_equal(out, ref)


def test_put_and_out_write_into_the_region(client):
    q, k, v = tensors((1, 4, 128, 64), (1, 4, 256, 64))
    ref = client.attend(q, k, v, is_causal=True)
    with client.shared_memory("t_out", 2 << 20) as region:
        qt, kt, vt = region.put(q), region.put(k), region.put(v)
        assert [t.offset % 64 for t in (qt, kt, vt)] == [0, 0, 0]
        assert qt.offset + qt.byte_size <= kt.offset
        out = region.empty(ref.shape, "float32")
        res = client.attend(qt, kt, vt, is_causal=True, out=out)
        # A view of the region, holding the output the server wrote there.
        assert np.shares_memory(res, out.numpy())
        assert np.array_equal(res, ref) and np.array_equal(out.copy(), ref)
        raw = np.frombuffer(region._map, np.float32, ref.size, out.offset)
        assert np.array_equal(raw.reshape(ref.shape), ref)
        # Keys and values stay in place for the next call: only q changes.
        q2 = np.ascontiguousarray(q[:, :, ::-1])
        qt2 = region.put(q2)
        res2 = client.attend(qt2, kt, vt, is_causal=True, out=out)
        ref2 = client.attend(q2, k, v, is_causal=True)
        assert np.array_equal(res2, ref2) and np.shares_memory(res2, res)
        assert region.put(q).offset > out.offset  # out's span is still taken
        # Mixed: the query in the region, key and value as bytes; the output copied.
        mixed = client.attend(qt, k, v, is_causal=True)
        assert np.array_equal(mixed, ref) and not np.shares_memory(mixed, res)
        out_torch = region.empty(ref.shape)
        assert out_torch.torch().data_ptr() == out_torch.numpy().ctypes.data
        kept = out.numpy()
    # After close a view still reads the mapping (memory-safe), but no one owns it.
    assert kept.shape == ref.shape and np.array_equal(kept, ref2)


def test_scratch_spans_are_reused(client):
    q, k, v = tensors((1, 2, 64, 64), (1, 2, 64, 64))
    needed = 4 * q.nbytes  # q, k, v and the output
    with client.shared_memory("t_reuse", needed) as region:
        for _ in range(5):  # fits only if every call gives its spans back
            client.attend(q, k, v, shared_memory=region)
        assert region._starts == []


def test_torch_input_strided(client):
    x = torch.randn(1, 16, 4, 32)  # BLHD memory, read as BHLD: not contiguous
    q = x.transpose(1, 2)
    k = torch.randn(1, 4, 16, 32)
    v = torch.randn(1, 4, 16, 32)
    ref = client.attend(q, k, v)
    with client.shared_memory("t_strided", 1 << 20) as region:
        assert torch.equal(client.attend(q, k, v, shared_memory=region), ref)


def test_concurrent_calls_share_a_region(client):
    work = [tensors((1, 2, 32, 64), (1, 2, 48, 64), seed=s) for s in range(8)]
    refs = [client.attend(*t, is_causal=True) for t in work]
    results = [None] * len(work)
    with client.shared_memory("t_conc", 1 << 20) as region:
        def run(i):
            results[i] = client.attend(*work[i], is_causal=True, shared_memory=region)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(np.array_equal(r, ref) for r, ref in zip(results, refs))


def test_attend_many_takes_shared_tensors(client):
    qs = [tensors((1, 2, 16, 32), (1, 2, 16, 32), seed=s)[0] for s in range(3)]
    _, k, v = tensors((1, 2, 16, 32), (1, 2, 40, 32))
    refs = [client.attend(q, k, v) for q in qs]
    with client.shared_memory("t_many", 1 << 20) as region:
        kt, vt = region.put(k), region.put(v)  # sent as references; outputs as bytes
        outs = list(client.attend_many([(q, kt, vt) for q in qs]))
        assert client.shared_memory_status("t_many").regions[0].calls == 3
    assert all(np.array_equal(o, r) for o, r in zip(outs, refs))


# -- the lease ------------------------------------------------------------------------

def test_lease_ends_with_the_block_and_nothing_is_left(client, shm_server):
    with client.shared_memory("t_lease", 1 << 16) as region:
        assert registered(client) == ["t_lease"]
        assert shm_server.metric("attnserve_shared_memory_regions") == 1
        # The object was unlinked once the server had mapped it.
        assert not os.path.exists("/dev/shm/" + region.key)
    assert region.closed
    assert registered(client) == []
    assert shm_server.metric("attnserve_shared_memory_regions") == 0
    region.close()  # idempotent
    assert leftovers() == []


def test_lease_ends_when_the_body_raises(client):
    with pytest.raises(ZeroDivisionError):
        with client.shared_memory("t_raise", 1 << 16):
            assert registered(client) == ["t_raise"]
            1 / 0
    assert registered(client) == []
    assert leftovers() == []


def test_lease_ends_with_the_client(shm_server):
    c = attnserve.Client(shm_server.target, timeout=60)
    region = c.shared_memory("t_gone", 1 << 16)
    with attnserve.Client(shm_server.target, timeout=60) as other:
        assert registered(other) == ["t_gone"]
        c.close()  # the connection carrying the lease goes: the server drops it
        for _ in range(200):
            if not registered(other):
                break
            threading.Event().wait(0.01)
        assert registered(other) == []
    with pytest.raises(attnserve.FailedPrecondition, match="registration of shared memory"):
        region.put(np.zeros(4, np.float32))
    region._discard()


def test_region_closed_before_a_call(client):
    q, k, v = tensors((1, 1, 4, 8), (1, 1, 4, 8))
    with client.shared_memory("t_closed", 1 << 16) as region:
        qt = region.put(q)
    with pytest.raises(attnserve.FailedPrecondition, match='region "t_closed" is closed'):
        client.attend(q, k, v, shared_memory=region)
    with pytest.raises(attnserve.FailedPrecondition,
                       match='query: shared memory region "t_closed" is closed'):
        client.attend(qt, k, v)
    with pytest.raises(attnserve.FailedPrecondition, match="is closed"):
        region.put(q)
    with client.shared_memory("t_freed", 1 << 16) as region:
        kt = region.put(k)
        kt.free()
        with pytest.raises(attnserve.FailedPrecondition, match="key: .* was freed"):
            client.attend(q, kt, v)


# -- errors ---------------------------------------------------------------------------

def test_server_without_the_flag(server):
    with attnserve.Client(server.target, timeout=60) as c:
        with pytest.raises(attnserve.FailedPrecondition,
                           match=r"shared memory is off on this server \(start it with "
                                 r"--shared_memory\)"):
            c.shared_memory("t_off", 1 << 16)
    assert leftovers() == []


def test_key_outside_the_prefix(client):
    with pytest.raises(attnserve.InvalidArgument,
                       match="does not start with the server's prefix \"attnserve_\""):
        client.shared_memory("t_key", 1 << 16, key="elsewhere_t_key")
    assert not os.path.exists("/dev/shm/elsewhere_t_key")
    with pytest.raises(attnserve.InvalidArgument, match='key: "a/b" is not a shared-memory'):
        client.shared_memory("t_key", 1 << 16, key="a/b")
    with pytest.raises(attnserve.InvalidArgument, match='name: "a b" is not 1 to 64'):
        client.shared_memory("a b", 1 << 16)
    with pytest.raises(attnserve.InvalidArgument, match="byte_size: must be >= 1"):
        client.shared_memory("t_key", 0)


def test_server_limits_and_duplicates(client):
    with pytest.raises(attnserve.ResourceExhausted, match="--shared_memory_max_bytes"):
        client.shared_memory("t_big", 128 << 20)
    with client.shared_memory("t_dup", 1 << 16):
        with pytest.raises(attnserve.AlreadyExists):  # the object exists (local O_EXCL)
            client.shared_memory("t_dup", 1 << 16)
        with pytest.raises(attnserve.AlreadyExists, match='region "t_dup" is already'):
            client.shared_memory("t_dup", 1 << 16, key=PREFIX + "t_dup_2")
    assert leftovers() == []


def test_region_too_small(client):
    q, k, v = tensors((1, 2, 64, 64), (1, 2, 64, 64))
    with client.shared_memory("t_small", 3 * q.nbytes) as region:  # no room for the output
        with pytest.raises(attnserve.ResourceExhausted,
                           match=r'output: shared memory region "t_small" \(98304 bytes, '
                                 r"98304 in use\) has no room for 32768 bytes"):
            client.attend(q, k, v, shared_memory=region)
        assert region._starts == []  # the inputs' spans were given back
        with pytest.raises(attnserve.ResourceExhausted, match="no room"):
            region.put(np.zeros(200000, np.float32))


def test_wrong_dtypes_and_shapes(client):
    q, k, v = tensors((1, 2, 8, 16), (1, 2, 8, 16))
    with client.shared_memory("t_types", 1 << 20) as region:
        with pytest.raises(attnserve.InvalidArgument,
                           match=r"query.dtype: float64 is not supported"):
            client.attend(q.astype(np.float64), k, v, shared_memory=region)
        with pytest.raises(attnserve.InvalidArgument, match=r"tensor.dtype: int32"):
            region.put(np.zeros(4, np.int32))
        kt = region.put(k.astype(np.float16))
        with pytest.raises(attnserve.InvalidArgument,
                           match="key.dtype: FLOAT16 differs from query.dtype FLOAT32"):
            client.attend(q, kt, v, shared_memory=region)
        with pytest.raises(attnserve.InvalidArgument, match="value: shape"):
            client.attend(q, k, v[:, :, :5], shared_memory=region)
        with pytest.raises(attnserve.InvalidArgument,
                           match=r"out: shape \[1, 2, 8, 8\] of f32 does not match the "
                                 r"output's \[1, 2, 8, 16\] of f32"):
            client.attend(q, k, v, shared_memory=region, out=region.empty((1, 2, 8, 8)))
        with pytest.raises(attnserve.InvalidArgument, match="of bf16 does not match"):
            client.attend(q, k, v, shared_memory=region,
                          out=region.empty((1, 2, 8, 16), "bfloat16"))
        with pytest.raises(TypeError, match="out: expected a SharedTensor"):
            client.attend(q, k, v, shared_memory=region, out=np.zeros((1, 2, 8, 16)))
        with pytest.raises(TypeError, match="shared_memory: expected a region"):
            client.attend(q, k, v, shared_memory="t_types")
        # The server's own check: an output span overlapping an input.
        qt = region.put(q)
        overlap = attnserve.SharedTensor(region, qt.offset, qt.byte_size, qt.dtype,
                                         qt.shape, "numpy")
        with pytest.raises(attnserve.InvalidArgument,
                           match=r'output_shared_memory: bytes \[\d+, \d+\) of region '
                                 r'"t_types" overlap those of query'):
            client.attend(qt, k, v, out=overlap)


# -- AsyncClient ----------------------------------------------------------------------

def test_async_client(shm_server):
    q, k, v = tensors((1, 4, 32, 64), (1, 4, 32, 64))

    async def main():
        async with attnserve.AsyncClient(shm_server.target, timeout=60) as c:
            ref = await c.attend(q, k, v, is_causal=True)
            async with c.shared_memory("t_async", 1 << 20) as region:
                assert [r.name for r in (await c.shared_memory_status()).regions] == \
                    ["t_async"]
                outs = await asyncio.gather(*(c.attend(q, k, v, is_causal=True,
                                                       shared_memory=region)
                                              for _ in range(4)))
                out = region.empty(ref.shape)
                view = await c.attend(region.put(q), region.put(k), region.put(v),
                                      is_causal=True, out=out)
            assert (await c.shared_memory_status()).regions == ()
            region2 = await c.shared_memory("t_async2", 1 << 16)
            await region2.close()
            with pytest.raises(attnserve.FailedPrecondition, match="is closed"):
                await c.attend(q, k, v, shared_memory=region2)
            return ref, outs, view

    ref, outs, view = asyncio.run(main())
    assert all(np.array_equal(o, ref) for o in outs) and np.array_equal(view, ref)
    assert leftovers() == []
