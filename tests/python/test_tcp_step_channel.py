"""Client.step_channel(tcp=True) against real attnserve processes with
--step_channels and --step_channel_listen (and no shared memory): steps
bit-identical to unary calls, refused steps that leave the channel going, the
server's limits and refusals, the channel's end, the async client, KVCache over it,
and the channel a KVCache opens by itself against a server with the defaults."""

import signal
import time

import numpy as np
import pytest
import torch

import attnserve
from attnserve import _step_socket
from attnserve._step_socket import is_loopback, target_host
from attnserve.torch import KVCache
from attnserve.v1 import sessions_pb2 as spb
from channel_steps import (HKV, HQ, D, LAYERS, OK_STEPS,
                           check_kvcache_generates_as_over_unary_calls, generate, step_inputs,
                           steps_until_closed, twin_sessions, wait_for)
from conftest import ServerProcess
from reference import random

LISTEN = "--step_channel_listen=127.0.0.1:0"


@pytest.fixture(scope="module")
def tcp_server():
    s = ServerProcess("--workers=2", "--threads_per_worker=1", "--step_channels=4",
                      LISTEN, "--max_message_bytes=2097152",
                      "--metrics_listen=127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture
def client(tcp_server):
    with attnserve.Client(tcp_server.target, timeout=60) as c:
        yield c


def test_the_host_of_a_target():
    assert target_host("localhost:50051") == "localhost"
    assert target_host("10.0.0.7:1") == "10.0.0.7"
    assert target_host("[::1]:50051") == "::1"
    assert target_host("dns:///attnserve.svc:50051") == "attnserve.svc"
    assert target_host("ipv4:127.0.0.1:9") == "127.0.0.1"
    assert target_host("ipv6:[::1]:9") == "::1"
    assert is_loopback("localhost") and is_loopback("127.0.0.1") and is_loopback("::1")
    assert is_loopback("127.3.2.1")
    assert not is_loopback("10.0.0.7") and not is_loopback("attnserve.svc")


def test_steps_are_bit_identical_to_unary_calls(client, tcp_server):
    before = tcp_server.metric(OK_STEPS)
    through, unary = twin_sessions(client, "tcp-parity")
    with client.step_channel(tcp=True) as channel:
        assert channel.request_capacity == channel.response_capacity == 2097152
        assert channel.region is None
        assert tcp_server.metric("attnserve_step_channels") == 1
        for t in range(40):
            for layer in range(LAYERS):
                q, k, v = step_inputs(t, layer)
                (got,) = channel.attend_sessions(layer, [(through, q, k, v, 5 + t)])
                (want,) = client.attend_sessions(layer, [(unary, q, k, v, 5 + t)])
                assert got.dtype == np.float32 and got.shape == (1, HQ, D)
                assert np.array_equal(got, want), (t, layer)
        # Weights and the options of a step; a batch of two sessions, torch in and out.
        q = random((3, HQ, D), seed=7)
        kw = dict(window_left=8, alibi_slopes=[0.1, 0.2, 0.3, 0.4], scale=0.3,
                  return_weights=True)
        (got,) = channel.attend_sessions(1, [(through, q)], **kw)
        (want,) = client.attend_sessions(1, [(unary, q)], **kw)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        tq = torch.from_numpy(random((1, HQ, D), seed=8))
        got = channel.attend_sessions(0, [(through, tq), (unary.session_id, tq)])
        assert all(isinstance(g, torch.Tensor) for g in got)
        assert torch.equal(got[0], got[1])
    assert through.info().layer_tokens == unary.info().layer_tokens == (45, 45)
    assert tcp_server.metric(OK_STEPS) - before == 40 * LAYERS + 2
    assert wait_for(lambda: tcp_server.metric("attnserve_step_channels") == 0)
    with pytest.raises(ValueError, match="step channel is closed"):
        channel.attend_sessions(0, [(through, q)])
    channel.close()  # closing twice is fine
    through.close()
    unary.close()


def test_an_answer_past_the_sockets_kept_buffer(client, tcp_server):
    # 300 new tokens with their weights: an answer of about 1.5 MiB, past the 1 MiB
    # buffer a socket keeps between steps; the steps after it are read as before.
    through, unary = twin_sessions(client, "tcp-large")
    q, k, v = (random((300, h, D), seed=s) for h, s in ((HQ, 3), (HKV, 4), (HKV, 5)))
    with client.step_channel(tcp=True) as channel:
        (got,) = channel.attend_sessions(0, [(through, q, k, v, 5)], return_weights=True)
        (want,) = client.attend_sessions(0, [(unary, q, k, v, 5)], return_weights=True)
        assert got[1].nbytes > 1 << 20
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        for t in range(3):
            q, k, v = step_inputs(t, 1)
            (got,) = channel.attend_sessions(1, [(through, q, k, v, 5 + t)])
            (want,) = client.attend_sessions(1, [(unary, q, k, v, 5 + t)])
            assert np.array_equal(got, want)
    through.close()
    unary.close()


def test_refused_steps_raise_and_the_channel_goes_on(client):
    s, twin = twin_sessions(client, "tcp-errors", prefill=3)
    with client.step_channel(tcp=True) as channel:
        with pytest.raises(attnserve.NotFound,
                           match='sessions\\[0\\].session_id: session "nobody"'):
            channel.attend_sessions(0, [("nobody", random((1, HQ, D)))])
        q, k, v = step_inputs(0, 0)
        with pytest.raises(attnserve.InvalidArgument, match="position: 2 overlaps"):
            channel.attend_sessions(0, [(s, q, k, v, 2)])
        # Bytes that are no AttendSessionsRequest: the server's INVALID_ARGUMENT.
        answer = spb.AttendSessionsResponse.FromString(
            channel.step_bytes(b"\xff\xff\xff\xff garbage \x00\x01"))
        assert answer.error_code == 3 and answer.error_message, answer
        # A frame of the whole limit (past what one write takes): answered, going on.
        answer = spb.AttendSessionsResponse.FromString(
            channel.step_bytes(b"\xff" * channel.request_capacity))
        assert answer.error_code == 3, answer
        # Past the server's frame limit: refused before anything is sent.
        with pytest.raises(attnserve.InvalidArgument, match="past the step channel's limit"):
            channel.step_bytes(b"\0" * (channel.request_capacity + 1))
        (got,) = channel.attend_sessions(0, [(s, q, k, v, 3)])
        (want,) = client.attend_sessions(0, [(twin, q, k, v, 3)])
        assert np.array_equal(got, want)
    assert s.info().layer_tokens == (4, 3)
    s.close()
    twin.close()


def test_servers_without_tcp_channels_refuse(start_server):
    srv = start_server("--shared_memory", "--step_channels=1", "--step_channel_listen=")
    with attnserve.Client(srv.target, timeout=60) as c:
        with pytest.raises(attnserve.FailedPrecondition, match="--step_channel_listen"):
            c.step_channel(tcp=True)
    off = start_server("--step_channels=0")
    with attnserve.Client(off.target, timeout=60) as c:
        with pytest.raises(attnserve.FailedPrecondition, match="--step_channels"):
            c.step_channel(tcp=True)


KV = dict(num_layers=LAYERS, num_kv_heads=HKV, head_dim=D, prefill_chunk=4)


def test_a_kvcache_opens_a_channel_of_its_own_on_a_default_servers_host(start_server):
    # A server with its defaults listens for TCP channels on 127.0.0.1; a cache
    # whose client targets it there opens one at its first call, sends every
    # layer call through it (answering as unary calls do, to the bit), and
    # closes it with the cache; the cache can be used again.
    srv = start_server("--metrics_listen=127.0.0.1:0")
    with attnserve.Client(srv.target, timeout=60) as c:
        with KVCache(c, step_channel=False, **KV) as cache:
            want = generate(cache)
            assert cache.transport is c
        before = srv.metric(OK_STEPS)
        cache = KVCache(c, **KV)
        assert cache.transport is c and cache.step_channel_error is None
        for _ in range(2):
            with cache:
                got = generate(cache)
                assert isinstance(cache.transport, attnserve.StepChannel)
                assert cache.step_channel_error is None
                assert srv.metric("attnserve_step_channels") == 1
            assert cache.transport is c
            assert wait_for(lambda: srv.metric("attnserve_step_channels") == 0)
            assert all(torch.equal(a, b) for a, b in zip(got, want))
        # Per layer, the 6-token prefill in two chunks of 4 and five more calls.
        assert srv.metric(OK_STEPS) - before == 2 * LAYERS * 7


def test_a_kvcache_without_a_channel_makes_unary_calls_and_says_why(start_server, monkeypatch):
    off = start_server("--step_channels=0")
    with attnserve.Client(off.target, timeout=60) as c:
        with KVCache(c, step_channel=False, **KV) as cache:
            want = generate(cache)
        with KVCache(c, **KV) as cache:
            got = generate(cache)
            assert cache.transport is c
            assert isinstance(cache.step_channel_error, attnserve.FailedPrecondition)
            assert "--step_channels" in cache.step_channel_error.message
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        with KVCache(c, step_channel=True, **KV) as cache, \
                pytest.raises(attnserve.FailedPrecondition, match="--step_channels"):
            generate(cache)
    # A server in another network namespace (or on another host behind a
    # forwarded loopback port): its answer's host_id is not ours, so the cache
    # does not connect to a loopback port that would not be the server's.
    srv = start_server("--metrics_listen=127.0.0.1:0")
    monkeypatch.setattr(_step_socket, "host_id", lambda: "another-host/net:[1]")
    with attnserve.Client(srv.target, timeout=60) as c:
        with KVCache(c, **KV) as cache:
            got = generate(cache)
            assert cache.transport is c
            assert isinstance(cache.step_channel_error, attnserve.FailedPrecondition)
            assert "does not run on this host" in cache.step_channel_error.message
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        assert wait_for(lambda: srv.metric("attnserve_step_channels") == 0)
        with pytest.raises(attnserve.FailedPrecondition, match="does not run on this host"):
            c.step_channel(tcp=True, same_host=True)
        with c.step_channel(tcp=True) as channel:  # without same_host: connects
            assert channel.request_capacity > 0


def test_a_kvcache_tries_again_once_a_channel_is_free(start_server):
    # All the server's channels taken: the layer calls go through the client
    # meanwhile, and a second later the cache opens its channel.
    srv = start_server("--step_channels=1")
    with attnserve.Client(srv.target, timeout=60) as c:
        with KVCache(c, step_channel=False, **KV) as cache:
            want = generate(cache)
        with c.step_channel(tcp=True) as taken, KVCache(c, **KV) as cache:
            def free_the_channel():
                assert cache.transport is c
                assert isinstance(cache.step_channel_error, attnserve.ResourceExhausted)
                taken.close()
                time.sleep(1.1)

            got = generate(cache, midway=free_the_channel)
            assert isinstance(cache.transport, attnserve.StepChannel)
            assert cache.step_channel_error is None
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_the_server_names_its_host_and_network_namespace(start_server):
    srv = start_server()
    with attnserve.Client(srv.target, timeout=60) as c:
        with c.step_channel(tcp=True, same_host=True) as channel:
            assert channel.request_capacity > 0
    assert _step_socket.host_id().count("/") == 1
    assert _step_socket.host_id().endswith("]") and "/net:[" in _step_socket.host_id()


def test_kvcache_step_channel_argument_errors(client):
    with pytest.raises(ValueError, match="step_channel=True and a transport"):
        KVCache(client, transport=client, step_channel=True, **KV)
    with pytest.raises(TypeError, match="step_channel: expected None, True or False"):
        KVCache(client, step_channel="yes", **KV)
    with pytest.raises(TypeError, match="step_channel=True: expected an attnserve.Client"):
        KVCache(object(), step_channel=True, **KV)


def test_past_the_servers_limit_then_freed_by_close(start_server):
    srv = start_server("--step_channels=1", LISTEN)
    with attnserve.Client(srv.target, timeout=60) as c:
        s = c.create_session("tcp-limit", num_kv_heads=HKV, head_dim=D)
        s.append(0, random((2, HKV, D)), random((2, HKV, D)))
        q = random((1, HQ, D), seed=3)
        want = s.attend(0, q)
        first = c.step_channel(tcp=True)
        assert np.array_equal(first.attend_sessions(0, [(s, q)])[0], want)
        with pytest.raises(attnserve.ResourceExhausted, match="--step_channels"):
            c.step_channel(tcp=True)
        first.close()
        with c.step_channel(tcp=True) as second:  # the server freed the first one
            assert np.array_equal(second.attend_sessions(0, [(s, q)])[0], want)


def test_a_wrong_host_is_unavailable_and_frees_the_channel(start_server):
    srv = start_server("--step_channels=1", LISTEN, "--metrics_listen=127.0.0.1:0")
    with attnserve.Client(srv.target, timeout=60) as c:
        # Nothing listens on the channel's port at this address.
        with pytest.raises(attnserve.Unavailable, match="cannot connect"):
            c.step_channel(tcp=True, tcp_host="127.0.0.2")
        assert wait_for(lambda: srv.metric("attnserve_step_channels") == 0)
        with c.step_channel(tcp=True) as channel:
            assert channel.request_capacity > 0


def test_a_draining_server_ends_the_channel(start_server):
    srv = start_server("--step_channels=2", LISTEN, "--shutdown_grace=30s")
    with attnserve.Client(srv.target, timeout=60, retries=0) as c:
        s = c.create_session("tcp-drain", num_kv_heads=HKV, head_dim=D)
        s.append(0, random((2, HKV, D)), random((2, HKV, D)))
        channel = c.step_channel(tcp=True)
        channel.attend_sessions(0, [(s, random((1, HQ, D)))])
        srv.signal(signal.SIGTERM)
        steps_until_closed(channel, s)
        channel.close()


def test_kvcache_over_a_tcp_channel_generates_as_over_unary_calls(client):
    check_kvcache_generates_as_over_unary_calls(client, lambda: client.step_channel(tcp=True))


def test_async_steps_are_bit_identical_to_unary_calls_and_close_frees_at_once(
        start_server):
    import asyncio
    srv = start_server("--step_channels=1", LISTEN)

    async def main():
        async with attnserve.AsyncClient(srv.target, timeout=60) as c:
            sessions = []
            for i in range(2):
                s = await c.create_session(f"tcp-async-{i}", num_kv_heads=HKV, head_dim=D,
                                           num_layers=LAYERS)
                for layer in range(LAYERS):
                    await s.append(layer, random((5, HKV, D), seed=layer),
                                   random((5, HKV, D), seed=9 + layer), position=0)
                sessions.append(s)
            async with await c.step_channel(tcp=True) as steps:
                assert steps.request_capacity > 0
                for t in range(20):
                    for layer in range(LAYERS):
                        q, k, v = step_inputs(t, layer)
                        (got,) = await steps.attend_sessions(layer, [(sessions[0], q, k, v)])
                        (want,) = await c.attend_sessions(layer, [(sessions[1], q, k, v)])
                        assert np.array_equal(got, want), (t, layer)
                with pytest.raises(attnserve.NotFound):
                    await steps.attend_sessions(0, [(c.session("nobody"), q)])
                (again,) = await steps.attend_sessions(0, [(sessions[0], q)])
            # Closed: the server's only channel is free again at once.
            async with await c.step_channel(tcp=True) as second:
                (out,) = await second.attend_sessions(0, [(sessions[0], q)])
                assert np.array_equal(out, again)
            with pytest.raises(ValueError, match="step channel is closed"):
                await second.attend_sessions(0, [(sessions[0], q)])

    asyncio.run(main())
