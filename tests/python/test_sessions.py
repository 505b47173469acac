"""KV-cache sessions: each step against the stateless oracle over a client-side copy
of the cache (docs/sessions.md "What a step computes")."""

import concurrent.futures

import grpc
import numpy as np
import pytest
import torch

import attnserve
from attnserve.v1 import attention_pb2 as pb
from attnserve.v1 import sessions_pb2 as spb
from attnserve.v1 import sessions_pb2_grpc as spb_grpc
from reference import attention, random, weight_stats
from test_parity import T5SelfAttention, assert_close, t5_states

HKV, HQ, D = 2, 4, 8


def step_reference(q, keys, values, **kw):
    """A step as the stateless Attend: BLHD, batch 1, bottom-right causal."""
    out, w = attention(q[None], keys[None], values[None], layout="BLHD",
                       alignment="bottom_right", **kw)
    return out[0], w[0]


def test_decode_loop_matches_stateless_attention(client):
    with client.create_session("py-decode", num_kv_heads=HKV, head_dim=D,
                               num_layers=2) as s:
        assert s.created
        caches = [[random((5, HKV, D), seed=1), random((5, HKV, D), seed=2)],
                  [random((5, HKV, D), seed=3), random((5, HKV, D), seed=4)]]
        for layer, (k, v) in enumerate(caches):
            info = s.append(layer, k, v, position=0)
        assert info.layer_tokens == (5, 5)
        for t in range(4):
            for layer in range(2):
                q = random((1, HQ, D), seed=100 + 10 * t + layer)
                k = random((1, HKV, D), seed=200 + 10 * t + layer)
                v = random((1, HKV, D), seed=300 + 10 * t + layer)
                caches[layer][0] = np.concatenate([caches[layer][0], k])
                caches[layer][1] = np.concatenate([caches[layer][1], v])
                out = s.attend(layer, q, k, v, position=5 + t)
                assert out.shape == (1, HQ, D)
                assert_close(out, step_reference(q, *caches[layer], is_causal=True)[0], 1e-5)
        assert s.info().layer_tokens == (9, 9)


def test_chunked_prefill_with_lnew_queries_and_mask_options(client):
    keys, values = random((300, HKV, D), seed=5), random((300, HKV, D), seed=6)
    with client.create_session("py-prefill", num_kv_heads=HKV, head_dim=D) as s:
        info = s.append(0, keys, values, chunk_tokens=128, position=0)  # AppendKvStream
        assert info.layer_tokens == (300,)
        q = random((3, HQ, D), seed=7)
        slopes = [0.1, 0.2, 0.3, 0.4]
        out, w = s.attend(0, q, window_left=16, alibi_slopes=slopes, scale=0.2,
                          return_weights=True)
        want_out, want_w = step_reference(q, keys, values, is_causal=True,
                                          window=(16, None), alibi_slopes=slopes, scale=0.2)
        assert_close(out, want_out, 1e-5)
        assert_close(w, want_w, 1e-5)
        everything = s.attend(0, q, causal=False)
        assert_close(everything, step_reference(q, keys, values)[0], 1e-5)


def test_weight_stats_of_steps_in_the_decode_kernel(client):
    # 1000 cached tokens and a batch of two sessions through a stream: each
    # step's entropy and largest weight per query head, with no weights sent.
    keys, values = random((1000, HKV, D), seed=70), random((1000, HKV, D), seed=71)
    with client.create_session("py-stats-a", num_kv_heads=HKV, head_dim=D) as a, \
            client.create_session("py-stats-b", num_kv_heads=HKV, head_dim=D) as b:
        a.append(0, keys, values)
        b.append(0, keys[:40], values[:40])
        qa, qb = random((1, HQ, D), seed=72), random((2, HQ, D), seed=73)
        opts = dict(sinks=[0.5, -1.0, 2.0, 0.25], alibi_slopes=[0.01, 0.02, 0.03, 0.04])
        with client.session_stream() as stream:
            (out_a, stats_a), (out_b, stats_b) = stream.attend_sessions(
                0, [(a, qa), (b, qb)], return_weight_stats=True, **opts)
        for q, n, out, stats in ((qa, 1000, out_a, stats_a), (qb, 40, out_b, stats_b)):
            want_out, want_w = step_reference(q, keys[:n], values[:n], is_causal=True,
                                              **opts)
            assert_close(out, want_out, 1e-5)
            want_entropy, want_max = weight_stats(want_w)  # [Hq, Lnew]
            assert stats.entropy.shape == (HQ, len(q))
            assert_close(stats.entropy, want_entropy, 1e-4)
            assert_close(stats.max_weight, want_max, 1e-6)
        # A unary step with weights too: the statistics of the weights it returns.
        out, w, stats = a.attend(0, qa, return_weights=True, return_weight_stats=True)
        want_entropy, want_max = weight_stats(w)
        assert_close(stats.entropy, want_entropy, 1e-4)
        assert_close(stats.max_weight, want_max, 1e-6)


def test_a_prefill_past_the_message_limit_is_streamed_by_itself(start_server):
    # 4000 tokens of 2 x 64 f32 keys and values: 4 MiB, past a server that takes
    # messages of at most 1.0625 MiB; append without chunk_tokens streams it.
    srv = start_server(f"--max_message_bytes={(1 << 20) + (64 << 10)}")
    keys, values = random((4000, 2, 64), seed=8), random((4000, 2, 64), seed=9)
    with attnserve.Client(srv.target, timeout=30) as c:
        with c.create_session("py-big", num_kv_heads=2, head_dim=64) as s:
            assert s.append(0, keys, values, position=0).layer_tokens == (4000,)
            q = random((1, 4, 64), seed=10)
            assert_close(s.attend(0, q), step_reference(q, keys, values,
                                                        is_causal=True)[0], 1e-5)


def stateless(client, q, keys, values, **kw):
    """The stateless Attend of a step's queries over the same tokens: BLHD, batch 1,
    bottom-right causal; (output, weights) as a step returns them."""
    out, w = client.attend(q[None], keys[None], values[None], layout="BLHD",
                           is_causal=True, alignment="bottom_right", return_weights=True,
                           **kw)
    return torch.from_numpy(out[0]).double(), torch.from_numpy(w[0]).double()


def test_softcap_and_sinks_steps_equal_the_stateless_attend(client):
    keys, values = random((12, HKV, D), seed=60), random((12, HKV, D), seed=61)
    opts = dict(softcap=1.5, sinks=np.array([0.5, -1.0, 2.0, 0.25], np.float32), scale=0.6)
    with client.create_session("py-softcap-sinks", num_kv_heads=HKV, head_dim=D) as s, \
            client.create_session("py-softcap-sinks-b", num_kv_heads=HKV, head_dim=D) as b:
        s.append(0, keys[:9], values[:9])
        b.append(0, keys[:5], values[:5])
        # Three new tokens appended and attended in one step.
        q = random((3, HQ, D), seed=62)
        out, w = s.attend(0, q, keys[9:], values[9:], return_weights=True, **opts)
        want_out, want_w = stateless(client, q, keys, values, **opts)
        assert_close(out, want_out, 1e-5)
        assert_close(w, want_w, 1e-5)
        ref_out, ref_w = step_reference(q, keys, values, is_causal=True, **opts)
        assert_close(out, ref_out, 1e-5)
        assert_close(w, ref_w, 1e-5)
        assert np.all(w.sum(-1) < 1)  # the sinks' share
        # With a window and ALiBi too, over a batch of two sessions (sinks are per
        # query head, the same for every session of the step).
        more = dict(opts, window_left=4, alibi_slopes=[0.1, 0.2, 0.3, 0.4])
        qa, qb = random((2, HQ, D), seed=63), random((1, HQ, D), seed=64)
        out_a, out_b = client.attend_sessions(0, [(s, qa), (b, qb)], **more)
        stateless_kw = dict(opts, window=(4, None), alibi_slopes=more["alibi_slopes"])
        assert_close(out_a, stateless(client, qa, keys, values, **stateless_kw)[0], 1e-5)
        assert_close(out_b, stateless(client, qb, keys[:5], values[:5], **stateless_kw)[0],
                     1e-5)
        # A step stream carries them as well; torch sinks (a model's parameter).
        torch_opts = dict(opts, sinks=torch.nn.Parameter(torch.from_numpy(opts["sinks"])))
        with client.session_stream() as steps:
            (streamed,) = steps.attend_sessions(0, [(s, qa)], **torch_opts)
        assert np.array_equal(streamed, s.attend(0, qa, **opts))
        assert s.info().layer_tokens == (12,)


def test_softcap_and_sinks_refused_before_the_append(client):
    with client.create_session("py-softcap-errors", num_kv_heads=HKV, head_dim=D) as s:
        s.append(0, random((4, HKV, D), seed=65), random((4, HKV, D), seed=66))
        q = random((1, HQ, D), seed=67)
        k, v = random((1, HKV, D), seed=68), random((1, HKV, D), seed=69)
        for kw, message in [
                (dict(softcap=0), "softcap: must be finite and > 0, got 0"),
                (dict(softcap=float("nan")), "softcap: must be finite and > 0, got nan"),
                (dict(sinks=[0.0] * 3), "sinks: expected 4 entries (one per query head), "
                                        "got 3"),
                (dict(sinks=[0, 0, float("-inf"), 0]), "sinks[2]: must be finite, got -inf")]:
            with pytest.raises(attnserve.InvalidArgument) as caught:
                s.attend(0, q, k, v, **kw)
            assert caught.value.message == message
        assert s.info().layer_tokens == (4,)  # nothing was appended
        with client.session_stream() as steps:
            with pytest.raises(attnserve.InvalidArgument) as caught:
                steps.attend_sessions(0, [(s, q, k, v)], softcap=-1)
            assert caught.value.message == "softcap: must be finite and > 0, got -1"
            steps.attend_sessions(0, [(s, q, k, v)], softcap=1.0)  # the stream goes on
        assert s.info().layer_tokens == (5,)


def steps_of(x):
    """[1, H, L, D] (T5's states) -> [L, H, D] (a session's tokens)."""
    return x[0].transpose(0, 1)


def test_t5_decoder_steps_over_a_cache(client):
    # T5's decoder self-attention with its cache on the server: each step's new
    # queries are the layer's last positions (bottom-right), as T5 models offset
    # the query positions by the cache's length.
    heads, dim, prefix = 4, 16, 300
    t5 = T5SelfAttention(num_heads=heads, is_decoder=True, seed=7)
    rb = t5.relative_bias()
    q_all, k_all, v_all = t5_states(1, heads, prefix + 6, prefix + 6, d=dim, seed=8)
    queries, keys, values = steps_of(q_all), steps_of(k_all), steps_of(v_all)

    def t5_step(past, n, tokens=None):
        """T5's (output [n, H, D], weights [H, n, tokens]) of queries past .. past + n - 1
        over the first `tokens` keys (default past + n)."""
        tokens = past + n if tokens is None else tokens
        with torch.no_grad():
            out, w = t5(q_all[:, :, past:past + n], k_all[:, :, :tokens],
                        v_all[:, :, :tokens], past_length=past)
        return out[0].transpose(0, 1), w[0]

    with client.create_session("py-t5", num_kv_heads=heads, head_dim=dim) as s:
        s.append(0, keys[:prefix], values[:prefix], chunk_tokens=128)
        t = prefix
        for n in (3, 1, 1, 1):  # 3 tokens at once (a verification step), then decoding
            out, w = s.attend(0, queries[t:t + n], keys[t:t + n], values[t:t + n], scale=1.0,
                              relative_bias=rb, return_weights=True)
            want_out, want_w = t5_step(t, n)
            assert isinstance(out, torch.Tensor) and out.shape == (n, heads, dim)
            assert_close(out, want_out, 1e-5)
            assert_close(w, want_w, 1e-5)
            t += n
        assert s.info().layer_tokens == (prefix + 6,)
        # Two sessions of different lengths in one step, no append: each query is its
        # own session's last position.
        with s.fork("py-t5-beam") as beam:
            beam.truncate(prefix + 2)
            out_s, out_b = client.attend_sessions(
                0, [(s, queries[t - 1:t]), (beam, queries[prefix + 1:prefix + 2])],
                scale=1.0, relative_bias=rb)
            assert_close(out_s, t5_step(t - 1, 1)[0], 1e-5)
            assert_close(out_b, t5_step(prefix + 1, 1)[0], 1e-5)
        # A step stream carries it the same; the wire message is taken as well.
        message = pb.RelativeBias(
            table=t5.relative_attention_bias.weight.detach().T.reshape(-1).tolist(),
            num_buckets=32, max_distance=128)
        with client.session_stream() as steps:
            (streamed,) = steps.attend_sessions(0, [(s, queries[t - 2:t])], scale=1.0,
                                                relative_bias=message)
        assert torch.equal(streamed, s.attend(0, queries[t - 2:t], scale=1.0,
                                              relative_bias=rb))
        assert_close(streamed, t5_step(t - 2, 2)[0], 1e-5)


def test_relative_bias_refused_before_the_append(client):
    with client.create_session("py-relbias-errors", num_kv_heads=HKV, head_dim=D) as s:
        s.append(0, random((4, HKV, D), seed=70), random((4, HKV, D), seed=71))
        q = random((1, HQ, D), seed=72)
        k, v = random((1, HKV, D), seed=73), random((1, HKV, D), seed=74)
        nan_at_5 = np.where(np.arange(32) == 5, np.nan, 0.0).reshape(HQ, 8)
        for rb, message in [
                (attnserve.RelativeBias(np.zeros((HQ, 3)), 3, 10, bidirectional=True),
                 "relative_bias.num_buckets: 3 is outside [4, 1024] (bidirectional)"),
                (attnserve.RelativeBias(np.zeros((HQ, 1)), 1, 10),
                 "relative_bias.num_buckets: 1 is outside [2, 1024]"),
                (attnserve.RelativeBias(np.zeros((HQ, 8)), 8, 2, bidirectional=True),
                 "relative_bias.max_distance: 2 is outside (2, 4096] (it must pass the 2 "
                 "exact buckets)"),
                (attnserve.RelativeBias(np.zeros(31), 8, 20, bidirectional=True),
                 "relative_bias.table: expected Hq × num_buckets = 4 × 8 = 32 entries, "
                 "got 31"),
                (attnserve.RelativeBias(nan_at_5, 8, 20), "relative_bias.table[5]: must be "
                                                          "finite, got nan")]:
            with pytest.raises(attnserve.InvalidArgument) as caught:
                s.attend(0, q, k, v, relative_bias=rb)
            assert caught.value.message == message
        assert s.info().layer_tokens == (4,)  # nothing was appended
        with client.session_stream() as steps:
            with pytest.raises(attnserve.InvalidArgument) as caught:
                steps.attend_sessions(0, [(s, q, k, v)], relative_bias=attnserve.RelativeBias(
                    np.zeros((HQ, 7)), 8, 20))
            assert caught.value.message == (
                "relative_bias.table: shape [4, 7] is not [Hq, num_buckets = 8]")
            with pytest.raises(attnserve.InvalidArgument) as caught:  # the server's
                steps.attend_sessions(0, [(s, q, k, v)], relative_bias=attnserve.RelativeBias(
                    np.zeros(13), 3, 20))
            assert caught.value.message == ("relative_bias.table: expected Hq × num_buckets "
                                            "= 4 × 3 = 12 entries, got 13")
            # The stream goes on.
            steps.attend_sessions(0, [(s, q, k, v)], relative_bias=attnserve.RelativeBias(
                np.ones((HQ, 3)), 3, 20))
        assert s.info().layer_tokens == (5,)


def test_batch_of_sessions_fork_and_truncate(client):
    a = client.create_session("py-batch-a", num_kv_heads=HKV, head_dim=D)
    b = client.create_session("py-batch-b", num_kv_heads=HKV, head_dim=D)
    ka, va = random((4, HKV, D), seed=8), random((4, HKV, D), seed=9)
    kb, vb = random((7, HKV, D), seed=10), random((7, HKV, D), seed=11)
    a.append(0, ka, va)
    b.append(0, kb, vb)
    qa, qb = random((1, HQ, D), seed=12), random((1, HQ, D), seed=13)
    out_a, out_b = client.attend_sessions(0, [(a, qa), (b, qb)])
    assert_close(out_a, step_reference(qa, ka, va, is_causal=True)[0], 1e-5)
    assert_close(out_b, step_reference(qb, kb, vb, is_causal=True)[0], 1e-5)

    child = a.fork("py-batch-a-child")
    assert child.created_info.parent_id == "py-batch-a"
    knew, vnew = random((1, HKV, D), seed=14), random((1, HKV, D), seed=15)
    out_child = child.attend(0, qa, knew, vnew)
    assert_close(out_child, step_reference(qa, np.concatenate([ka, knew]),
                                           np.concatenate([va, vnew]), is_causal=True)[0],
                 1e-5)
    assert a.info().layer_tokens == (4,)  # copy-on-write: the parent is unchanged
    assert child.truncate(2).layer_tokens == (2,)
    assert_close(child.attend(0, qa), step_reference(qa, ka[:2], va[:2], is_causal=True)[0],
                 1e-5)
    for s in (a, b, child):
        s.close()


@pytest.mark.parametrize("storage,atol", [("bfloat16", 2e-2), ("float16", 3e-3)])
def test_storage_dtypes_and_torch(client, storage, atol):
    dtype = getattr(torch, storage)
    keys = torch.from_numpy(random((9, HKV, D), seed=16))
    values = torch.from_numpy(random((9, HKV, D), seed=17))
    q = torch.from_numpy(random((2, HQ, D), seed=18))
    with client.create_session(f"py-{storage}", num_kv_heads=HKV, head_dim=D,
                               storage_dtype=storage) as s:
        assert s.created_info.shape.storage_dtype == storage
        s.append(0, keys, values)
        out = s.attend(0, q)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
        # The server rounds keys, values and queries to the storage dtype.
        want = step_reference(q.to(dtype), keys.to(dtype), values.to(dtype),
                              is_causal=True)[0]
        assert_close(out, want, atol)


def quantized(rows):
    """Rows [..., dim] as an int8 cache holds them: symmetric int8 with a
    scale of max |x| / 127 per row (docs/sessions.md)."""
    rows = np.asarray(rows, np.float32)
    scale = np.abs(rows).max(axis=-1, keepdims=True) / np.float32(127)
    q = np.clip(np.rint(rows * np.where(scale > 0, np.float32(1) / scale, 0)), -127, 127)
    return (q * scale).astype(np.float32)


@pytest.mark.parametrize("name,spec", [("str", "int8"), ("np", np.int8), ("torch", torch.int8)])
def test_int8_storage_attends_over_the_quantized_rows(client, name, spec):
    keys, values = random((40, HKV, D), seed=19), random((40, HKV, D), seed=20)
    q = random((3, HQ, D), seed=21)
    with client.create_session(f"py-int8-{name}", num_kv_heads=HKV, head_dim=D,
                               storage_dtype=spec) as s:
        assert s.created_info.shape.storage_dtype == "int8"
        s.append(0, keys, values)
        # 40 tokens in the server's blocks: each token and kv head holds D + D
        # bytes and two f32 scales.
        assert s.info().kv_bytes % (HKV * (2 * D + 8)) == 0
        out = s.attend(0, q)
        # Computed in f32 over what the cache holds...
        want = step_reference(q, quantized(keys), quantized(values), is_causal=True)[0]
        assert_close(out, want, 1e-5)
        # ...which is close to the unquantized attention.
        exact = np.asarray(step_reference(q, keys, values, is_causal=True)[0])
        assert np.abs(out - exact).max() < 0.02
        with pytest.raises(attnserve.InvalidArgument, match="not finite"):
            s.append(0, np.full((1, HKV, D), np.inf, np.float32),
                     np.zeros((1, HKV, D), np.float32))


def test_int8_is_only_a_storage_dtype(client):
    with pytest.raises(attnserve.InvalidArgument, match="expected float32, bfloat16, "
                       "float16 or int8"):
        client.create_session("py-int4", num_kv_heads=HKV, head_dim=D, storage_dtype="int4")


def test_session_errors_carry_the_servers_message(client):
    s = client.create_session("py-errors", num_kv_heads=HKV, head_dim=D)
    again = client.create_session("py-errors", num_kv_heads=HKV, head_dim=D)
    assert s.created and not again.created  # a retry of create is safe
    s.append(0, random((8, HKV, D)), random((8, HKV, D)))
    with pytest.raises(attnserve.InvalidArgument) as caught:
        s.append(0, random((1, HKV, D)), random((1, HKV, D)), position=10)
    assert caught.value.message == (
        "position: 10 leaves a gap after the 8 tokens layer 0 holds (positions must be "
        "contiguous: expected 8)")
    with pytest.raises(attnserve.InvalidArgument) as caught:
        s.attend(0, random((HQ, D)))
    assert caught.value.message == ("sessions[0].query.shape: expected [Lnew, Hq, head_dim] "
                                    "with Lnew >= 1, got [4, 8]")
    s.close()
    with pytest.raises(attnserve.NotFound) as caught:
        s.attend(0, random((1, HQ, D)))
    assert caught.value.message.startswith('sessions[0].session_id: session "py-errors" was '
                                           "closed at ")
    assert caught.value.message.endswith("create it again and re-send its keys and values")


class _Recorder(spb_grpc.SessionServiceServicer):
    def __init__(self):
        self.metadata = []

    def GetSession(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        return spb.SessionInfo(session_id=request.session_id)


def test_session_calls_carry_the_routing_header_and_token():
    # Load balancers keep a session on its replica by attnserve-session
    # (docs/operations.md "Routing sessions"); a stand-in server records it.
    recorder = _Recorder()
    srv = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
    spb_grpc.add_SessionServiceServicer_to_server(recorder, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        with attnserve.Client(f"127.0.0.1:{port}", token="t0k", timeout=10) as c:
            c._open_data_channels(pb.ServerInfo(max_request_bytes=1 << 20,
                                                max_response_bytes=1 << 20))
            c.session("py-route").info()
            c.session("py-route", route_key="batch-7").info()
    finally:
        srv.stop(None)
    assert [m["attnserve-session"] for m in recorder.metadata] == ["py-route", "batch-7"]
    assert all(m["authorization"] == "Bearer t0k" for m in recorder.metadata)


def _stream_steps(steps, s, caches, t0, n):
    """n decode steps of both layers through `steps` (anything with
    attend_sessions), each checked against the reference; caches follow."""
    for t in range(t0, t0 + n):
        for layer in range(2):
            q = random((1, HQ, D), seed=400 + 10 * t + layer)
            k = random((1, HKV, D), seed=500 + 10 * t + layer)
            v = random((1, HKV, D), seed=600 + 10 * t + layer)
            caches[layer][0] = np.concatenate([caches[layer][0], k])
            caches[layer][1] = np.concatenate([caches[layer][1], v])
            position = caches[layer][0].shape[0] - 1
            (out,) = steps.attend_sessions(layer, [(s, q, k, v, position)])
            assert_close(out, step_reference(q, *caches[layer], is_causal=True)[0], 1e-5)


def _two_layer_session(client, sid):
    s = client.create_session(sid, num_kv_heads=HKV, head_dim=D, num_layers=2)
    caches = [[random((3, HKV, D), seed=11), random((3, HKV, D), seed=12)],
              [random((3, HKV, D), seed=13), random((3, HKV, D), seed=14)]]
    for layer, (k, v) in enumerate(caches):
        s.append(layer, k, v, position=0)
    return s, caches


def test_a_step_stream_steps_as_unary_calls_and_goes_on_after_errors(start_server):
    server = start_server("--metrics_listen=127.0.0.1:0")
    client = attnserve.Client(server.target, timeout=60)
    streamed = 'attnserve_requests_total{code="OK",method="AttendSessionsStream"}'
    s, caches = _two_layer_session(client, "py-stream")
    with client.session_stream() as steps:
        _stream_steps(steps, s, caches, 0, 3)
        # Refused steps: the stream goes on, the session is unchanged.
        with pytest.raises(attnserve.NotFound, match='sessions\\[0\\].session_id: session "nobody"'):
            steps.attend_sessions(0, [("nobody", random((1, HQ, D)))])
        with pytest.raises(attnserve.InvalidArgument, match="position: 2 overlaps"):
            steps.attend_sessions(0, [(s, random((1, HQ, D)), random((1, HKV, D)),
                                       random((1, HKV, D)), 2)])
        _stream_steps(steps, s, caches, 3, 2)  # and on with the same stream
        _stream_steps(client, s, caches, 5, 1)  # unary calls meanwhile
        _stream_steps(steps, s, caches, 6, 1)
    assert s.info().layer_tokens == (10, 10)
    assert server.metric(streamed) == 12  # 6 steps of 2 layers on the stream
    with pytest.raises(ValueError, match="closed"):
        steps.attend_sessions(0, [(s, random((1, HQ, D)))])
    steps.close()  # closing twice is fine
    s.close()
    client.close()


def test_an_async_step_stream(server):
    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            s = await c.create_session("py-astream", num_kv_heads=HKV, head_dim=D)
            keys = random((4, HKV, D), seed=21)
            values = random((4, HKV, D), seed=22)
            await s.append(0, keys, values)
            async with await c.session_stream() as steps:
                for t in range(3):
                    q = random((1, HQ, D), seed=30 + t)
                    k, v = random((1, HKV, D), seed=40 + t), random((1, HKV, D), seed=50 + t)
                    keys, values = np.concatenate([keys, k]), np.concatenate([values, v])
                    (out,) = await steps.attend_sessions(0, [(s, q, k, v)])
                    assert_close(out, step_reference(q, keys, values, is_causal=True)[0], 1e-5)
                with pytest.raises(attnserve.InvalidArgument, match="query.shape"):
                    await steps.attend_sessions(0, [(s, random((1, 3, D)))])
                (out,) = await steps.attend_sessions(0, [(s, q)])
                assert_close(out, step_reference(q, keys, values, is_causal=True)[0], 1e-5)
            assert (await s.info()).layer_tokens == (7,)
            await s.close()
    import asyncio
    asyncio.run(main())


def test_sink_and_window_session_streams_at_flat_memory(client, start_server):
    """A sink + window session (StreamingLLM) over 700 tokens in the server's blocks
    of 128: every step is the stateless Attend over the whole stream with window_left
    = W - 1 and sink_tokens (docs/sessions.md "Sink + window sessions"), its memory
    stays at a few blocks, truncate undoes the last append only, and it moves into a
    server of another block size."""
    W, S, n = 150, 4, 700
    keys, values = random((n, HKV, D), seed=80), random((n, HKV, D), seed=81)
    mask = dict(is_causal=True, window=(W - 1, None), sink_tokens=S)

    def want(q, t):
        return step_reference(q, keys[:t], values[:t], **mask)

    with client.create_session("py-stream", num_kv_heads=HKV, head_dim=D, num_layers=1,
                               window_tokens=W, sink_tokens=S, max_tokens=1 << 40) as s:
        shape = s.info().shape
        assert (shape.window_tokens, shape.sink_tokens, shape.max_tokens) == (W, S, 1 << 40)
        q = random((200, HQ, D), seed=82)  # a prefill chunk, then decode steps
        assert_close(s.attend(0, q, keys[:200], values[:200], position=0), want(q, 200)[0],
                     1e-5)
        held = []
        for t in range(200, n):
            q = random((1, HQ, D), seed=1000 + t)
            if t % 97 == 0:
                out, w = s.attend(0, q, keys[t:t + 1], values[t:t + 1], position=t,
                                  return_weights=True)
                ref_out, ref_w = want(q, t + 1)
                assert_close(w, ref_w, 1e-5)  # zeros at the dropped tokens
                assert not np.any(w[:, :, S:t + 1 - W])
                # The stateless Attend with the same mask agrees.
                stateless_out = client.attend(
                    q[None], keys[None, :t + 1], values[None, :t + 1], layout="BLHD",
                    alignment="bottom_right", window=(W - 1, None), sink_tokens=S,
                    is_causal=True)[0]
                assert_close(stateless_out, ref_out, 1e-5)
            else:
                out = s.attend(0, q, keys[t:t + 1], values[t:t + 1], position=t)
                ref_out = want(q, t + 1)[0]
            assert_close(out, ref_out, 1e-5)
            held.append(s.info().kv_bytes)
        # The sinks' block and the window's over at most 3 blocks of 128 tokens of
        # HKV × (D + D) f32: flat from the first 300 tokens on.
        block = 128 * HKV * 2 * D * 4
        assert max(held) <= 4 * block and held[-1] == held[150]
        assert s.info().layer_tokens == (n,)
        with pytest.raises(attnserve.InvalidArgument, match="it can go back to 699 at most"):
            s.truncate(n - 2)
        assert s.truncate(n - 1).layer_tokens == (n - 1,)
        blocks7 = start_server("--workers=1", "--kv_block_tokens=7")
        with attnserve.Client(blocks7.target, timeout=60) as other:
            [moved] = other.import_sessions(client.export_sessions(["py-stream"]))
            assert moved.layer_tokens == (n - 1,) and moved.shape.window_tokens == W
            q = random((1, HQ, D), seed=90)
            there = other.session("py-stream").attend(0, q, keys[n - 1:], values[n - 1:],
                                                      position=n - 1)
        here = s.attend(0, q, keys[n - 1:], values[n - 1:], position=n - 1)
        assert_close(here, want(q, n)[0], 1e-5)
        assert_close(there, want(q, n)[0], 1e-5)


@pytest.mark.parametrize("storage", ["float32", "bfloat16", "int8"])
def test_sessions_exported_from_one_server_continue_on_another(client, start_server, storage):
    """export_sessions / import_sessions: the moved session answers its next steps
    with the very bits the original would have on a server configured alike (to
    rounding with another block size); remove=True moves it (the origin answers
    Unavailable, retry), a corrupted snapshot is refused as DataLoss."""
    other = start_server("--workers=2", "--threads_per_worker=1")
    blocks7 = start_server("--workers=2", "--threads_per_worker=1", "--kv_block_tokens=7")
    name = f"py-move-{storage}"
    with attnserve.Client(other.target, timeout=60) as dest, \
            attnserve.Client(blocks7.target, timeout=60) as dest7:
        s = client.create_session(name, num_kv_heads=HKV, head_dim=D, num_layers=2,
                                  storage_dtype=storage)
        for layer in range(2):
            s.append(layer, random((19, HKV, D), seed=layer), random((19, HKV, D), seed=9 + layer))
        data = client.export_sessions([name])
        [info] = dest.import_sessions(data)
        assert info.session_id == name and info.layer_tokens == (19, 19)
        dest7.import_sessions(data)
        q, k, v = random((1, HQ, D), seed=5), random((1, HKV, D), seed=6), random((1, HKV, D), seed=7)
        there = dest.session(name).attend(1, q, k, v, position=19)
        there7 = dest7.session(name).attend(1, q, k, v, position=19)
        here = s.attend(1, q, k, v, position=19)
        assert np.array_equal(there, here)
        # Other key tiles, so other sums (int8: other runs of rounded weights).
        np.testing.assert_allclose(there7, here, rtol=0,
                                   atol=1e-4 if storage == "int8" else 1e-5)
        # A move: the origin ends it, and calls on it there are to be retried elsewhere.
        dest.session(name).close()
        moved = client.export_sessions([name], remove=True)
        with pytest.raises(attnserve.Unavailable, match="handed to another server"):
            s.info()
        bad = bytearray(moved)
        bad[len(bad) // 2] ^= 1
        with pytest.raises(attnserve.DataLoss, match="checksum"):
            dest.import_sessions(bytes(bad))
        with pytest.raises(attnserve.DataLoss, match="truncated"):
            dest.import_sessions(moved[:-3])
        [again] = dest.import_sessions(moved)
        assert again.layer_tokens == (19, 20)
        with pytest.raises(attnserve.AlreadyExists):
            dest.import_sessions(moved)
        with pytest.raises(attnserve.NotFound):
            client.export_sessions(["py-no-such-session"])


def test_the_streaming_example_holds_flat_memory(server):
    """examples/streaming_session.py at a tiny size: kv_bytes the same at every print
    (every 256 tokens: the same place in a block of 128) once the window has left the
    sinks' block."""
    import importlib.util
    from conftest import SOURCE_DIR
    path = SOURCE_DIR / "examples" / "streaming_session.py"
    spec = importlib.util.spec_from_file_location("streaming_session", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rows = example.main([f"--target={server.target}", "--tokens=1280", "--window=200",
                         "--sinks=4", "--kv-heads=2", "--heads=4", "--head-dim=16",
                         "--every=256"])
    assert [t for t, _, _ in rows] == [256, 512, 768, 1024, 1280]
    assert len({b for _, b, _ in rows[1:]}) == 1
