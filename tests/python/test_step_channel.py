"""Client.step_channel against real attnserve processes with --shared_memory and
--step_channels: steps bit-identical to unary calls, refused steps that leave the
channel going, the server's limits and refusals, the channel's end, KVCache over it."""

import os
import platform
import signal
import threading
import time

import numpy as np
import pytest
import torch

import attnserve
from attnserve.v1 import sessions_pb2 as spb
from channel_steps import (HKV, HQ, D, LAYERS, OK_STEPS,
                           check_kvcache_generates_as_over_unary_calls, step_inputs,
                           steps_until_closed, twin_sessions, wait_for)
from conftest import ServerProcess
from reference import random

PREFIX = "attnserve_"


@pytest.fixture(scope="module")
def channel_server():
    s = ServerProcess("--workers=2", "--threads_per_worker=1", "--shared_memory",
                      "--step_channels=4", "--metrics_listen=127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture
def client(channel_server):
    with attnserve.Client(channel_server.target, timeout=60) as c:
        yield c


def leftovers():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(PREFIX + "py_"))


# -- steps --------------------------------------------------------------------------

def test_steps_are_bit_identical_to_unary_calls(client, channel_server):
    before = channel_server.metric(OK_STEPS)
    through, unary = twin_sessions(client, "sc-parity")
    with client.step_channel() as channel:
        assert channel.request_capacity > 0 and channel.response_capacity > 0
        assert channel_server.metric("attnserve_step_channels") == 1
        for t in range(40):
            for layer in range(LAYERS):
                q, k, v = step_inputs(t, layer)
                (got,) = channel.attend_sessions(layer, [(through, q, k, v, 5 + t)])
                (want,) = client.attend_sessions(layer, [(unary, q, k, v, 5 + t)])
                assert got.dtype == np.float32 and got.shape == (1, HQ, D)
                assert np.array_equal(got, want), (t, layer)
        # Weights, several queries without appending, the options of a step
        # (relative position keys among them).
        q = random((3, HQ, D), seed=7)
        keys = attnserve.RelativeKeys(random((HQ, 50, D), seed=11), zero_row=2,
                                      query_bias=random((HQ, D), seed=12))
        kw = dict(window_left=8, alibi_slopes=[0.1, 0.2, 0.3, 0.4], scale=0.3,
                  return_weights=True, relative_keys=keys)
        (got,) = channel.attend_sessions(1, [(through, q)], **kw)
        (want,) = client.attend_sessions(1, [(unary, q)], **kw)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        # A batch of two sessions in one step; torch in, torch out.
        tq = torch.from_numpy(random((1, HQ, D), seed=8))
        got = channel.attend_sessions(0, [(through, tq), (unary.session_id, tq)])
        assert all(isinstance(g, torch.Tensor) for g in got)
        assert torch.equal(got[0], got[1])
    assert through.info().layer_tokens == unary.info().layer_tokens == (45, 45)
    assert channel_server.metric(OK_STEPS) - before == 40 * LAYERS + 2
    assert wait_for(lambda: channel_server.metric("attnserve_step_channels") == 0)
    assert client.shared_memory_status().regions == ()
    assert leftovers() == []
    with pytest.raises(ValueError, match="step channel is closed"):
        channel.attend_sessions(0, [(through, q)])
    channel.close()  # closing twice is fine
    through.close()
    unary.close()


def test_softcap_and_sinks_steps_are_bit_identical_to_unary_calls(client):
    through, unary = twin_sessions(client, "sc-softcap")
    kw = dict(softcap=2.0, sinks=[0.5, -1.0, 1.5, 0.0], return_weights=True)
    with client.step_channel() as channel:
        for t in range(3):
            q, k, v = step_inputs(t, 0)
            (got,) = channel.attend_sessions(0, [(through, q, k, v, 5 + t)], **kw)
            (want,) = client.attend_sessions(0, [(unary, q, k, v, 5 + t)], **kw)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert np.all(got[1].sum(-1) < 1)  # the sinks took their share
        with pytest.raises(attnserve.InvalidArgument) as caught:
            channel.attend_sessions(0, [(through, q)], sinks=[0.0])
        assert caught.value.message == "sinks: expected 4 entries (one per query head), got 1"
        (out,) = channel.attend_sessions(0, [(through, q)], softcap=2.0)  # it goes on
        assert np.array_equal(out, client.attend_sessions(0, [(unary, q)], softcap=2.0)[0])
    through.close()
    unary.close()


def test_relative_bias_steps_are_bit_identical_to_unary_calls(client):
    # T5's decoder bias (unidirectional, bottom-right) rides in the channel's
    # AttendSessionsRequest as in the unary call's.
    through, unary = twin_sessions(client, "sc-relbias")
    rb = attnserve.RelativeBias(torch.randn(HQ, 8, generator=torch.Generator().manual_seed(3)),
                                8, 6)
    kw = dict(scale=1.0, relative_bias=rb, return_weights=True)
    with client.step_channel() as channel:
        for t in range(12):  # distances past max_distance: the last bucket
            q, k, v = step_inputs(t, 1)
            (got,) = channel.attend_sessions(1, [(through, q, k, v, 5 + t)], **kw)
            (want,) = client.attend_sessions(1, [(unary, q, k, v, 5 + t)], **kw)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        # It changes the answer (the bias is applied, not dropped on the way).
        (plain,) = channel.attend_sessions(1, [(through, q)], scale=1.0)
        (biased,) = channel.attend_sessions(1, [(through, q)], scale=1.0, relative_bias=rb)
        assert not np.allclose(plain, biased, atol=1e-3)
        with pytest.raises(attnserve.InvalidArgument) as caught:
            channel.attend_sessions(1, [(through, q)], relative_bias=attnserve.RelativeBias(
                [0.0] * 8, 8, 6))
        assert caught.value.message == ("relative_bias.table: expected Hq × num_buckets = "
                                        "4 × 8 = 32 entries, got 8")
        (out,) = channel.attend_sessions(1, [(through, q)], **kw)  # it goes on
        assert np.array_equal(out[0], client.attend_sessions(1, [(unary, q)], **kw)[0][0])
    assert through.info().layer_tokens == unary.info().layer_tokens == (5, 17)
    through.close()
    unary.close()


def test_steps_that_sleep_on_the_futex_are_woken(client):
    # spin=0: every step sleeps on response_seq's futex at once. The server must
    # wake it; a missed wake would show as steps of the 10 ms futex slice.
    through, unary = twin_sessions(client, "sc-sleep")
    times = []
    with client.step_channel(spin=0) as channel:
        for t in range(100):
            q, k, v = step_inputs(t, 0)
            start = time.perf_counter()
            (got,) = channel.attend_sessions(0, [(through, q, k, v)])
            times.append(time.perf_counter() - start)
            assert np.array_equal(got, client.attend_sessions(0, [(unary, q, k, v)])[0])
    assert sorted(times)[len(times) // 2] < 0.005, sorted(times)
    through.close()
    unary.close()


def test_refused_steps_raise_and_the_channel_goes_on(client):
    s, twin = twin_sessions(client, "sc-errors", prefill=3)
    with client.step_channel(size=64 << 10) as channel:
        with pytest.raises(attnserve.NotFound,
                           match='sessions\\[0\\].session_id: session "nobody"'):
            channel.attend_sessions(0, [("nobody", random((1, HQ, D)))])
        q, k, v = step_inputs(0, 0)
        with pytest.raises(attnserve.InvalidArgument, match="position: 2 overlaps"):
            channel.attend_sessions(0, [(s, q, k, v, 2)])
        (got,) = channel.attend_sessions(0, [(s, q, k, v, 3)])
        (want,) = client.attend_sessions(0, [(twin, q, k, v, 3)])
        assert np.array_equal(got, want)

        # Bytes that are no AttendSessionsRequest: the server's INVALID_ARGUMENT.
        answer = spb.AttendSessionsResponse.FromString(
            channel.step_bytes(b"\xff\xff\xff\xff garbage \x00\x01"))
        assert answer.error_code == 3 and answer.error_message, answer
        # More than the request slot holds: refused before anything is written.
        with pytest.raises(attnserve.InvalidArgument, match="request slot"):
            channel.step_bytes(b"\0" * (channel.request_capacity + 1))

        q, k, v = step_inputs(1, 0)
        (got,) = channel.attend_sessions(0, [(s, q, k, v, 4)])
        (want,) = client.attend_sessions(0, [(twin, q, k, v, 4)])
        assert np.array_equal(got, want)
    assert s.info().layer_tokens == (5, 3)
    s.close()
    twin.close()


def test_steps_from_several_threads_take_turns(client):
    sessions = twin_sessions(client, "sc-threads", prefill=4)
    refs, results = {}, {}
    with client.step_channel() as channel:
        def run(i):
            for t in range(30):
                q = random((1, HQ, D), seed=100 * i + t)
                results[i, t] = channel.attend_sessions(i, [(sessions[i], q)])[0]
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    for i in range(2):
        for t in range(30):
            refs[i, t] = sessions[i].attend(i, random((1, HQ, D), seed=100 * i + t))
    assert all(np.array_equal(results[key], refs[key]) for key in refs)
    for s in sessions:
        s.close()


# -- the channel's limits and end ----------------------------------------------------

def test_a_server_without_step_channels_refuses(start_server):
    srv = start_server("--shared_memory", "--step_channels=0")
    with attnserve.Client(srv.target, timeout=60) as c:
        with pytest.raises(attnserve.FailedPrecondition, match="--step_channels"):
            c.step_channel()
        assert c.shared_memory_status().regions == ()  # the channel's region went too
    plain = start_server()
    with attnserve.Client(plain.target, timeout=60) as c:
        with pytest.raises(attnserve.FailedPrecondition, match="--shared_memory"):
            c.step_channel()
    assert leftovers() == []


def test_a_region_too_small_for_a_ring(client):
    with pytest.raises(attnserve.InvalidArgument, match="16384"):
        client.step_channel(size=8 << 10)
    assert client.shared_memory_status().regions == ()
    with client.step_channel(size=16 << 10) as channel:  # the least: slots of ~8 KiB
        assert 0 < channel.request_capacity < 8 << 10


def test_past_the_servers_limit_then_freed_by_close(start_server):
    srv = start_server("--shared_memory", "--step_channels=1")
    with attnserve.Client(srv.target, timeout=60) as c:
        s = c.create_session("sc-limit", num_kv_heads=HKV, head_dim=D)
        s.append(0, random((2, HKV, D)), random((2, HKV, D)))
        q = random((1, HQ, D), seed=3)
        want = s.attend(0, q)
        first = c.step_channel()
        assert np.array_equal(first.attend_sessions(0, [(s, q)])[0], want)
        with pytest.raises(attnserve.ResourceExhausted):
            c.step_channel()
        assert [r.name for r in c.shared_memory_status().regions] == [first.region.name]
        first.close()
        with c.step_channel() as second:  # the server freed the first one
            assert np.array_equal(second.attend_sessions(0, [(s, q)])[0], want)
    assert leftovers() == []


def test_a_draining_server_ends_the_channel(start_server):
    srv = start_server("--shared_memory", "--step_channels=2", "--shutdown_grace=30s")
    with attnserve.Client(srv.target, timeout=60, retries=0) as c:
        s = c.create_session("sc-drain", num_kv_heads=HKV, head_dim=D)
        s.append(0, random((2, HKV, D)), random((2, HKV, D)))
        channel = c.step_channel()
        channel.attend_sessions(0, [(s, random((1, HQ, D)))])
        srv.signal(signal.SIGTERM)
        assert steps_until_closed(channel, s), "no step was refused before it closed"
        channel.close()
    assert leftovers() == []


def test_refused_on_machines_other_than_x86_64(client, monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with pytest.raises(attnserve.Unimplemented, match="x86-64 only.*aarch64"):
        client.step_channel()
    assert client.shared_memory_status().regions == ()  # nothing was created


# -- KVCache ----------------------------------------------------------------------------

def test_kvcache_over_a_step_channel_generates_as_over_unary_calls(client):
    check_kvcache_generates_as_over_unary_calls(client, client.step_channel)


def test_async_steps_are_bit_identical_to_unary_calls_and_close_frees_at_once(
        start_server):
    import asyncio
    srv = start_server("--shared_memory", "--step_channels=1")

    async def main():
        async with attnserve.AsyncClient(srv.target, timeout=60) as c:
            sessions = []
            for i in range(2):
                s = await c.create_session(f"async-{i}", num_kv_heads=HKV, head_dim=D,
                                           num_layers=LAYERS)
                for layer in range(LAYERS):
                    await s.append(layer, random((5, HKV, D), seed=layer),
                                   random((5, HKV, D), seed=9 + layer), position=0)
                sessions.append(s)
            ticks = 0

            async def ticker():  # the loop runs while a step waits
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            tick = asyncio.ensure_future(ticker())
            async with await c.step_channel() as steps:
                assert steps.request_capacity > 0
                for t in range(20):
                    for layer in range(LAYERS):
                        q, k, v = step_inputs(t, layer)
                        (got,) = await steps.attend_sessions(layer, [(sessions[0], q, k, v)])
                        (want,) = await c.attend_sessions(layer, [(sessions[1], q, k, v)])
                        assert np.array_equal(got, want), (t, layer)
                # A refused step raises; the channel goes on.
                with pytest.raises(attnserve.NotFound):
                    await steps.attend_sessions(0, [(c.session("nobody"), q)])
                (again,) = await steps.attend_sessions(0, [(sessions[0], q)])
                assert again.shape == (1, HQ, D)
            tick.cancel()
            assert ticks > 0
            # Closed: the server's only channel is free again at once.
            async with await c.step_channel() as second:
                (out,) = await second.attend_sessions(0, [(sessions[0], q)])
                assert np.array_equal(out, again)
            with pytest.raises(ValueError, match="step channel is closed"):
                await second.attend_sessions(0, [(sessions[0], q)])
            assert (await c.shared_memory_status()).regions == ()

    asyncio.run(main())
    assert leftovers() == []


def test_an_async_step_cancelled_while_it_waits_ends_the_channel(start_server):
    import asyncio
    srv = start_server("--shared_memory", "--step_channels=1", "--workers=1",
                       "--threads_per_worker=1")

    async def main():
        async with attnserve.AsyncClient(srv.target, timeout=60) as c:
            s = await c.create_session("async-long", num_kv_heads=HKV, head_dim=D,
                                       max_tokens=1 << 17)
            k, v = random((1 << 16, HKV, D), seed=1), random((1 << 16, HKV, D), seed=2)
            await s.append(0, k, v, chunk_tokens=8192)
            steps = await c.step_channel(size=8 << 20, spin=0)
            q = random((256, HQ, D), seed=3)  # 256 queries over 65536 tokens
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(steps.attend_sessions(0, [(s, q)], causal=False),
                                       0.001)
            with pytest.raises(ValueError, match="step channel is closed"):
                await steps.attend_sessions(0, [(s, q)])
            await steps.close()  # idempotent
            assert (await c.shared_memory_status()).regions == ()  # the region is gone
            # The server frees the channel once the step it was computing ends
            # (a cancel, unlike close(), does not wait for that).
            deadline = time.monotonic() + 30
            while True:
                try:
                    again = await c.step_channel()
                    break
                except attnserve.ResourceExhausted:
                    assert time.monotonic() < deadline, "the channel was never freed"
                    await asyncio.sleep(0.05)
            async with again:
                (out,) = await again.attend_sessions(0, [(s, q[:1])])
                assert out.shape == (1, HQ, D)

    asyncio.run(main())
    assert leftovers() == []
