"""connections=: how many TCP connections the clients open, that each is its own
peer on the server, that calls use all of them and that a refusing connection's
errors reach only its own calls. A stand-in server records each call's peer
(client address and port: one per connection); a real attnserve shows its
connections in /proc/net/tcp6."""

import asyncio
import concurrent.futures
import threading

import grpc
import numpy as np
import pytest

import attnserve
from attnserve.v1 import attention_pb2 as pb
from attnserve.v1 import attention_pb2_grpc as pb_grpc
from reference import attention, random
from test_parity import assert_close

QKV = [random((1, 2, 4, 8), seed=s) for s in range(3)]


class _Recording(pb_grpc.AttentionServiceServicer):
    """Answers Attend with the query as output and counts each peer's calls.
    With `gather`, each call waits until that many calls are in flight at once
    (so a test knows they overlapped). With `refuse_first_peer`, every call of
    the first peer that called fails with RESOURCE_EXHAUSTED."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}
        self.gather = None
        self.refuse_first_peer = False
        self.refused_peer = None

    def GetServerInfo(self, request, context):
        return pb.ServerInfo(version="stand-in", max_request_bytes=1 << 20,
                             max_response_bytes=1 << 20)

    def Attend(self, request, context):
        peer = context.peer()
        with self.lock:
            self.calls[peer] = self.calls.get(peer, 0) + 1
            if self.refuse_first_peer and self.refused_peer is None:
                self.refused_peer = peer
            refuse = peer == self.refused_peer
        if self.gather is not None:
            self.gather.wait(timeout=30)
        if refuse:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "this connection refuses calls")
        return pb.AttendResponse(output=request.query)


@pytest.fixture
def recording():
    servicer = _Recording()
    srv = grpc.server(concurrent.futures.ThreadPoolExecutor(24))
    pb_grpc.add_AttentionServiceServicer_to_server(servicer, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield servicer, f"127.0.0.1:{port}"
    srv.stop(None)


def server_side_connections(port):
    """Established TCP connections whose local port is `port` (the server's end of
    each client connection)."""
    count = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as table:
            next(table)
            for line in table:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


@pytest.mark.parametrize("bad,error", [
    (0, ValueError), (-1, ValueError), (257, ValueError), (10**12, ValueError),
    ("many", TypeError), ("4", TypeError), (2.0, TypeError), (None, TypeError),
    (True, TypeError)])
def test_a_bad_count_is_refused_naming_the_argument(bad, error):
    for cls in (attnserve.Client, attnserve.AsyncClient):
        with pytest.raises(error, match=r'connections: .*"auto" or a count in \[1, 256\]'):
            cls("127.0.0.1:1", connections=bad)


def test_a_fixed_count_opens_that_many_peers_and_sequential_calls_use_each(recording):
    servicer, target = recording
    with attnserve.Client(target, timeout=30, connections=3) as c:
        assert c.connections == 3
        for _ in range(9):
            assert_close(c.attend(*QKV), QKV[0], 0)
        assert c.open_connections == 3
    assert sorted(servicer.calls.values()) == [3, 3, 3], servicer.calls


def test_auto_opens_one_connection_for_one_caller(recording):
    servicer, target = recording
    with attnserve.Client(target, timeout=30) as c:
        assert c.connections == "auto"
        for _ in range(6):
            c.attend(*QKV)
        assert c.open_connections == 1
    assert list(servicer.calls.values()) == [6]


@pytest.mark.parametrize("callers,expected", [(3, 3), (11, 8)])
def test_auto_grows_with_the_calls_in_flight_up_to_eight(recording, callers, expected):
    servicer, target = recording
    servicer.gather = threading.Barrier(callers)
    with attnserve.Client(target, timeout=30) as c:
        with concurrent.futures.ThreadPoolExecutor(callers) as pool:
            outs = list(pool.map(lambda _: c.attend(*QKV), range(callers)))
        assert c.open_connections == expected
    assert len(outs) == callers
    assert len(servicer.calls) == expected, servicer.calls
    assert sum(servicer.calls.values()) == callers


def test_async_auto_grows_with_the_calls_in_flight(recording):
    servicer, target = recording
    servicer.gather = threading.Barrier(4)

    async def main():
        async with attnserve.AsyncClient(target, timeout=30) as c:
            outs = await asyncio.gather(*[c.attend(*QKV) for _ in range(4)])
            return outs, c.open_connections

    outs, opened = asyncio.run(main())
    assert opened == 4
    assert len(servicer.calls) == 4, servicer.calls
    for out in outs:
        assert_close(out, QKV[0], 0)


def test_a_refusing_connection_fails_only_its_own_calls(recording):
    servicer, target = recording
    servicer.refuse_first_peer = True
    refused, ok = 0, 0
    with attnserve.Client(target, timeout=30, connections=3, retries=0) as c:
        for _ in range(12):
            try:
                c.attend(*QKV)
                ok += 1
            except attnserve.ResourceExhausted as e:
                assert e.message == "this connection refuses calls"
                refused += 1
    # Sequential calls go round the three idle connections in turn.
    assert (refused, ok) == (4, 8)
    assert sorted(servicer.calls.values()) == [4, 4, 4]


def test_real_server_sees_each_connection(start_server):
    s = start_server("--workers=1", "--threads_per_worker=1")
    q, k, v = (random((1, 4, 16, 16), seed=i) for i in range(3))
    with attnserve.Client(s.target, timeout=60, connections=3) as c:
        for _ in range(3):
            assert_close(c.attend(q, k, v), attention(q, k, v)[0], 1e-5)
        # Three data connections, the first of them the bootstrap channel's
        # (GetServerInfo): the server has its default limits.
        assert server_side_connections(s.port) == 3
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            outs = list(pool.map(lambda _: c.attend(q, k, v), range(24)))
        assert all(np.array_equal(np.asarray(o), np.asarray(outs[0])) for o in outs)
        assert server_side_connections(s.port) == 3


def test_sessions_keep_working_over_several_connections(start_server):
    s = start_server("--workers=1", "--threads_per_worker=1")
    with attnserve.Client(s.target, timeout=60, connections=4) as c:
        session = c.create_session("conn-1", num_kv_heads=2, head_dim=8)
        keys, values = random((5, 2, 8), seed=1), random((5, 2, 8), seed=2)
        session.append(0, keys, values)
        for step in range(6):
            session.attend(0, random((1, 4, 8), seed=10 + step), random((1, 2, 8), seed=20 + step),
                           random((1, 2, 8), seed=30 + step))
        assert tuple(session.info().layer_tokens) == (11,)
        session.close()
        assert c.open_connections == 4


def test_a_server_with_other_limits_gets_data_connections_of_their_own(start_server):
    # The bootstrap channel is sized for a server with the default limits; with
    # others, the data channels are sized from GetServerInfo and open beside it.
    s = start_server("--workers=1", "--threads_per_worker=1", "--max_response_bytes=64MiB")
    q, k, v = (random((1, 4, 16, 16), seed=i) for i in range(3))
    with attnserve.Client(s.target, timeout=60, connections=2) as c:
        for _ in range(2):
            assert_close(c.attend(q, k, v), attention(q, k, v)[0], 1e-5)
        assert c.limits.max_response_bytes == 64 << 20
        assert server_side_connections(s.port) == 3
