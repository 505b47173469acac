"""Errors: one class per gRPC code with the server's message; client-side checks
in the server's words; retries of idempotent calls on UNAVAILABLE."""

import asyncio
import concurrent.futures
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

import attnserve
from attnserve import _codec
from attnserve.errors import ERROR_CLASSES
from attnserve.v1 import attention_pb2 as pb
from attnserve.v1 import attention_pb2_grpc as pb_grpc
from conftest import free_port
from reference import random


def f32(*shape, seed=0):
    return random(shape, seed=seed)


GOOD = dict(query=f32(1, 4, 3, 8), key=f32(1, 2, 5, 8, seed=1), value=f32(1, 2, 5, 8, seed=2))

# Inputs the client rejects before sending, each with what it should say. The
# test sends each one to the server unchecked as well and requires the server's
# message to be the same, so the client's words cannot drift from the server's.
BAD = {
    "dtype_mismatch": (dict(GOOD, key=GOOD["key"].astype(np.float16)),
                       "key.dtype: FLOAT16 differs from query.dtype FLOAT32 (query, key "
                       "and value must share one dtype)"),
    "bool_query": (dict(GOOD, query=GOOD["query"] > 0),
                   "query.dtype: BOOL is not supported (expected FLOAT32, BFLOAT16 or FLOAT16)"),
    "rank": (dict(GOOD, query=f32(4, 3, 8)),
             "query.shape: expected rank 4 [B, Hq, Lq, D], got rank 3 (shape [4, 3, 8])"),
    "rank_blhd": (dict(GOOD, value=f32(1, 5, 8), layout="BLHD"),
                  "value.shape: expected rank 4 [B, Lk, Hkv, Dv], got rank 3 (shape [1, 5, 8])"),
    "head_dim": (dict(query=f32(1, 2, 3, 600), key=f32(1, 2, 3, 600), value=f32(1, 2, 3, 4)),
                 "query: head dimension D = 600 is out of range [1, 576]"),
    "value_dim": (dict(GOOD, value=f32(1, 2, 5, 0)),
                  "value: head dimension Dv = 0 is out of range [1, 512]"),
    "no_kv_heads": (dict(GOOD, key=f32(1, 0, 5, 8), value=f32(1, 0, 5, 8)),
                    "key: number of kv heads must be at least 1, got 0 (shape [1, 0, 5, 8])"),
    "key_batch": (dict(GOOD, key=f32(2, 2, 5, 8)),
                  "key: shape [2, 2, 5, 8] does not match query shape [1, 4, 3, 8] in layout "
                  "BHLD (expected [1, 2, 5, 8])"),
    "value_length": (dict(GOOD, value=f32(1, 2, 6, 8)),
                     "value: shape [1, 2, 6, 8] does not match key shape [1, 2, 5, 8] in "
                     "layout BHLD (expected [1, 2, 5, 8])"),
    "gqa": (dict(GOOD, query=f32(1, 3, 3, 8)),
            "query heads Hq = 3 is not a multiple of key/value heads Hkv = 2 (Hq % Hkv must be 0)"),
    "key_lengths_count": (dict(GOOD, key_lengths=[1, 2]),
                          "mask.key_lengths: expected 1 entries (one per batch), got 2"),
    "mask_broadcast": (dict(GOOD, attn_mask=np.ones((2, 5), bool)),
                       "mask: shape [2, 5] is not broadcastable to [1, 4, 3, 5] (dimension 0 "
                       "is 2, expected 1 or 3)"),
    "mask_rank": (dict(GOOD, attn_mask=np.ones((1, 1, 1, 1, 5), bool)),
                  "mask.explicit_mask: rank 5 exceeds the maximum 4 (shape [1, 1, 1, 1, 5])"),
    "alibi_count": (dict(GOOD, alibi_slopes=[0.5]),
                    "mask.alibi_slopes: expected 4 entries (one per query head), got 1"),
    "sinks_count": (dict(GOOD, sinks=[0.5, 0.5]),
                    "sinks: expected 4 entries (one per query head), got 2"),
    # The server checks sinks before the mask: so does the client.
    "sinks_count_first": (dict(GOOD, sinks=np.zeros(5), key_lengths=[1, 2]),
                          "sinks: expected 4 entries (one per query head), got 5"),
    "relative_bias_table": (dict(GOOD, relative_bias=attnserve.RelativeBias(
                                np.zeros(31, np.float32), 8, 20, bidirectional=True)),
                            "mask.relative_bias.table: expected Hq × num_buckets = 4 × 8 = "
                            "32 entries, got 31"),
    "relative_bias_table_heads": (dict(GOOD, relative_bias=attnserve.RelativeBias(
                                      np.zeros((2, 16)), 16, 128)),
                                  "mask.relative_bias.table: expected Hq × num_buckets = 4 × "
                                  "16 = 64 entries, got 32"),
    # The server checks the relative bias before a block-sparse layout: so does the client.
    "relative_bias_before_block_sparse": (
        dict(GOOD, relative_bias=attnserve.RelativeBias([0.0] * 7, 2, 5),
             block_sparse=attnserve.BlockSparse(block_size=0, stride=1)),
        "mask.relative_bias.table: expected Hq × num_buckets = 4 × 2 = 8 entries, got 7"),
    "relative_keys_heads": (
        dict(GOOD, relative_keys=attnserve.RelativeKeys(f32(2, 6, 8))),
        "mask.relative_keys.table: shape [2, 6, 8] is not [heads, rows, D] with heads 1 "
        "or Hq = 4, rows >= 1 and D = 8"),
    "relative_keys_zero_row": (
        dict(GOOD, relative_keys=attnserve.RelativeKeys(f32(4, 6, 8), zero_row=6)),
        "mask.relative_keys.zero_row: 6 is outside [0, rows = 6)"),
    "relative_keys_query_bias": (
        dict(GOOD, relative_keys=attnserve.RelativeKeys(f32(1, 6, 8), query_bias=f32(4, 7))),
        "mask.relative_keys.query_bias: expected Hq·D = 32 entries ([Hq, D]), got 28"),
    "relative_keys_before_the_method": (
        dict(GOOD, relative_keys=attnserve.RelativeKeys(f32(1, 6, 8)),
             linear=attnserve.LinearAttention()),
        "mask.relative_keys: relative position keys cannot be linearised: linear "
        "attention sums phi(k) v^T over the keys once, so only causal and key_lengths "
        "can restrict them"),
}


@pytest.fixture
def raw_stub(server):
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.AttentionServiceStub(channel)


@pytest.mark.parametrize("case", sorted(BAD))
def test_client_checks_speak_the_servers_words(client, raw_stub, case):
    kw, message = BAD[case]
    kw = dict(kw)
    q, k, v = kw.pop("query"), kw.pop("key"), kw.pop("value")
    with pytest.raises(attnserve.InvalidArgument) as caught:
        client.attend(q, k, v, **kw)
    assert caught.value.message == message
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    unchecked, _ = _codec.attend_request(q, k, v, check=False, **kw)
    with pytest.raises(grpc.RpcError) as server_said:
        raw_stub.Attend(unchecked)
    assert server_said.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server_said.value.details() == message


def test_missing_value_in_the_servers_words(client, raw_stub):
    with pytest.raises(attnserve.InvalidArgument) as caught:
        client.attend(GOOD["query"], GOOD["key"], None)
    req, _ = _codec.attend_request(GOOD["query"], GOOD["key"], GOOD["value"])
    req.ClearField("value")
    with pytest.raises(grpc.RpcError) as server_said:
        raw_stub.Attend(req)
    assert caught.value.message == server_said.value.details()


def test_dtypes_the_wire_lacks_are_named(client):
    with pytest.raises(attnserve.InvalidArgument, match=r"^query.dtype: float64 is not "
                       r"supported \(expected FLOAT32, BFLOAT16 or FLOAT16\)$"):
        client.attend(GOOD["query"].astype(np.float64), GOOD["key"], GOOD["value"])
    with pytest.raises(attnserve.InvalidArgument, match="^mask.explicit_mask.dtype: int64"):
        client.attend(**GOOD, attn_mask=np.ones(5, np.int64))
    with pytest.raises(attnserve.InvalidArgument, match="^layout: unknown value 'BHDL'"):
        client.attend(**GOOD, layout="BHDL")
    with pytest.raises(attnserve.InvalidArgument, match="^output_dtype: int8 is not supported"):
        client.attend(**GOOD, output_dtype=np.int8)


@pytest.mark.parametrize("kw,message", [
    (dict(key_lengths=[9]), "mask.key_lengths[0] = 9 is out of range [0, Lk = 5]"),
    (dict(window=(-1, None)), "mask.window_left: must be >= 0, got -1"),
    (dict(scale=float("inf")), "scale: must be finite, got inf"),
    (dict(softcap=0), "softcap: must be finite and > 0, got 0"),
    (dict(softcap=-2.5), "softcap: must be finite and > 0, got -2.5"),
    (dict(softcap=float("inf")), "softcap: must be finite and > 0, got inf"),
    (dict(sinks=[0, float("nan"), 0, 0]), "sinks[1]: must be finite, got nan"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 3)), 3, 10, bidirectional=True)),
     "mask.relative_bias.num_buckets: 3 is outside [4, 1024] (bidirectional)"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 1)), 1, 10)),
     "mask.relative_bias.num_buckets: 1 is outside [2, 1024]"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 1025)), 1025, 2000)),
     "mask.relative_bias.num_buckets: 1025 is outside [2, 1024]"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 8)), 8, 2, bidirectional=True)),
     "mask.relative_bias.max_distance: 2 is outside (2, 4096] (it must pass the 2 exact "
     "buckets)"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 32)), 32, 16)),
     "mask.relative_bias.max_distance: 16 is outside (16, 4096] (it must pass the 16 exact "
     "buckets)"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((4, 32)), 32, 4097)),
     "mask.relative_bias.max_distance: 4097 is outside (16, 4096] (it must pass the "
     "16 exact buckets)"),
    # A bad num_buckets is named before a table of the wrong size (the server's order).
    (dict(relative_bias=attnserve.RelativeBias(np.zeros(5), 2000, 128)),
     "mask.relative_bias.num_buckets: 2000 is outside [2, 1024]"),
    (dict(relative_bias=attnserve.RelativeBias(
        np.where(np.arange(32) == 5, np.nan, 0.0).reshape(4, 8), 8, 20, bidirectional=True)),
     "mask.relative_bias.table[5]: must be finite, got nan"),
    (dict(relative_bias=attnserve.RelativeBias([0.0] * 10 + [float("-inf")] * 22, 8, 20)),
     "mask.relative_bias.table[10]: must be finite, got -inf"),
])
def test_value_errors_come_from_the_server(client, kw, message):
    with pytest.raises(attnserve.InvalidArgument) as caught:
        client.attend(**GOOD, **kw)
    assert caught.value.message == message


def test_relative_bias_table_in_t5s_layout_is_refused_with_the_fix():
    # T5's relative_attention_bias.weight is [num_buckets, Hq]; sent as it is, the
    # buckets of a head would go as the heads of a bucket. The client refuses a 2-D
    # table that is not [Hq, num_buckets] (its own rule: the wire takes a flat table).
    weight = np.zeros((32, 4), np.float32)
    with pytest.raises(attnserve.InvalidArgument) as caught:
        _codec.attend_request(**GOOD, relative_bias=attnserve.RelativeBias(weight, 32))
    assert caught.value.message == (
        "mask.relative_bias.table: shape [32, 4] is not [Hq, num_buckets = 32] (T5's "
        "relative_attention_bias.weight is [num_buckets, Hq]: send its transpose, weight.T)")
    req, _ = _codec.attend_request(**GOOD, relative_bias=attnserve.RelativeBias(weight.T, 32))
    assert len(req.mask.relative_bias.table) == 128
    with pytest.raises(attnserve.InvalidArgument, match=r"^relative_bias.table: shape "
                       r"\[4, 2, 8\] is not \[Hq, num_buckets\] or flat$"):
        _codec.attend_sessions_request(0, [("s", f32(1, 4, 8), None, None, None)],
                                       relative_bias=attnserve.RelativeBias(
                                           np.zeros((4, 2, 8)), 16))
    with pytest.raises(TypeError, match="attnserve.RelativeBias"):
        _codec.attend_request(**GOOD, relative_bias={"table": [0.0] * 128, "num_buckets": 32})


def test_not_found_unknown_model_and_session(client):
    with pytest.raises(attnserve.NotFound) as caught:
        client.model("no_such_model")(f32(1, 3, 64))
    assert "no_such_model" in caught.value.message and "mha_post" in caught.value.message
    with pytest.raises(attnserve.NotFound) as caught:
        client.session("never-made").info()
    assert caught.value.message.startswith('session "never-made" is unknown here')


def test_already_exists_and_out_of_range(client):
    s = client.create_session("err-exists", num_kv_heads=1, head_dim=8, max_tokens=4)
    try:
        with pytest.raises(attnserve.AlreadyExists) as caught:
            client.create_session("err-exists", num_kv_heads=2, head_dim=8)
        assert "err-exists" in caught.value.message
        with pytest.raises(attnserve.OutOfRange) as caught:
            s.append(0, f32(5, 1, 8), f32(5, 1, 8))
        assert "max_tokens" in caught.value.message or "4" in caught.value.message
    finally:
        s.close()


def test_resource_exhausted_from_the_servers_limits(start_server):
    srv = start_server("--max_response_bytes=1000", "--max_request_bytes=200000",
                       "--workers=1", "--threads_per_worker=1")
    with attnserve.Client(srv.target, timeout=30) as c:
        with pytest.raises(attnserve.ResourceExhausted) as caught:
            c.attend(f32(1, 4, 16, 8), f32(1, 4, 16, 8), f32(1, 4, 16, 8))
        assert caught.value.message == (
            "response: 2048 bytes (output [1, 4, 16, 8] of f32: 2048 bytes) exceed the limit "
            "of 1000 bytes (the server's --max_response_bytes flag)")
        # The channel's send limit is the server's max_request_bytes: a larger
        # request fails in the client, before it is sent.
        assert c.limits.max_request_bytes == 200000
        with pytest.raises(attnserve.ResourceExhausted) as caught:
            c.attend(f32(1, 1, 1, 8), f32(1, 1, 20000, 8), f32(1, 1, 20000, 1))
        assert "larger than max" in caught.value.message


def test_unauthenticated(start_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret")
    srv = start_server(f"--auth_token_file={token_file}")
    with attnserve.Client(srv.target, timeout=30) as c:
        assert c.health() == "SERVING"  # health needs no token
        with pytest.raises(attnserve.Unauthenticated) as caught:
            c.attend(**GOOD)
        assert caught.value.message == 'missing "authorization: Bearer <token>" metadata'
        # A stream refused at its start ends with the stream's status (the
        # channels opened by hand: GetServerInfo itself needs the token).
        c._open_data_channels(pb.ServerInfo(max_request_bytes=1 << 20,
                                            max_response_bytes=1 << 20))
        with pytest.raises(attnserve.Unauthenticated):
            list(c.attend_many([GOOD] * 3))
        with pytest.raises(attnserve.Unauthenticated):
            list(c.attend_many(iter(())))
    with attnserve.Client(srv.target, token="wrong", timeout=30) as c:
        with pytest.raises(attnserve.Unauthenticated, match="^invalid bearer token$"):
            c.server_info()
    with attnserve.Client(srv.target, token="s3cret", timeout=30) as c:
        assert c.attend(**GOOD).shape == (1, 4, 3, 8)


def _long_call_inputs():
    # About 275 GFLOP: seconds on one thread, so it is still running when the
    # next call arrives.
    shape = (1, 16, 8192, 64)
    return f32(*shape), f32(*shape, seed=1), f32(*shape, seed=2)


def test_deadline_exceeded(start_server):
    srv = start_server("--workers=1", "--threads_per_worker=1")
    with attnserve.Client(srv.target, timeout=0.2) as c:
        c.health()
        c.attend(**GOOD)  # the channels are open: the deadline covers only the call
        with pytest.raises(attnserve.DeadlineExceeded) as caught:
            c.attend(*_long_call_inputs())
        assert caught.value.message


def test_unavailable_while_draining(start_server):
    srv = start_server("--workers=1", "--threads_per_worker=1", "--shutdown_grace=60s",
                       "--metrics_listen=127.0.0.1:0")
    with attnserve.Client(srv.target, timeout=120, retries=0) as c:
        c.attend(**GOOD)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            long_call = pool.submit(c.attend, *_long_call_inputs())
            deadline = time.monotonic() + 30
            while (srv.metric("attnserve_inflight_requests") < 1
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            assert not long_call.done()
            srv.signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while "draining" not in srv.log() and time.monotonic() < deadline:
                time.sleep(0.01)
            with pytest.raises(attnserve.Unavailable) as caught:
                c.attend(**GOOD)
            assert caught.value.message == "server is shutting down", srv.log()
            assert long_call.result().shape == (1, 16, 8192, 64)  # in flight: finished


def test_stream_errors_per_message(client):
    bad = dict(GOOD, key_lengths=[9])  # passes the client's checks; the server refuses it
    items = [GOOD, bad, GOOD, dict(GOOD, key_lengths=[1, 2])]
    got = list(client.attend_many(items, return_exceptions=True))
    assert isinstance(got[0], np.ndarray) and isinstance(got[2], np.ndarray)
    assert isinstance(got[1], attnserve.InvalidArgument)
    assert got[1].message == "mask.key_lengths[0] = 9 is out of range [0, Lk = 5]"
    assert isinstance(got[3], attnserve.InvalidArgument)  # the client's own check
    assert got[3].message == "mask.key_lengths: expected 1 entries (one per batch), got 2"
    stream = client.attend_many(items)
    assert next(stream).shape == (1, 4, 3, 8)
    with pytest.raises(attnserve.InvalidArgument, match="out of range"):
        next(stream)


# --- every class for its code, through a stand-in server --------------------------------

class _Failing(pb_grpc.AttentionServiceServicer):
    """Answers GetServerInfo (so the client can size its channels), fails Attend
    with `code` and counts the attempts."""

    def __init__(self):
        self.code = grpc.StatusCode.INTERNAL
        self.attempts = 0

    def GetServerInfo(self, request, context):
        return pb.ServerInfo(version="stand-in", max_request_bytes=1 << 20,
                             max_response_bytes=1 << 20)

    def Attend(self, request, context):
        self.attempts += 1
        context.abort(self.code, f"stand-in says {self.code.name}")


@pytest.fixture
def failing_server():
    servicer = _Failing()
    srv = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
    pb_grpc.add_AttentionServiceServicer_to_server(servicer, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    yield servicer, f"127.0.0.1:{port}"
    srv.stop(None)


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c != grpc.StatusCode.OK],
                         ids=lambda c: c.name)
def test_every_code_has_its_class(failing_server, code):
    servicer, target = failing_server
    servicer.code = code
    with attnserve.Client(target, timeout=30, retries=2) as c:
        with pytest.raises(attnserve.Error) as caught:
            c.attend(**GOOD)
    assert type(caught.value) is ERROR_CLASSES[code]
    assert type(caught.value).__name__ == "".join(
        w.capitalize() for w in code.name.split("_"))
    assert caught.value.code == code
    assert caught.value.message == f"stand-in says {code.name}"
    # Only UNAVAILABLE is retried (Attend is idempotent): 1 + 2 retries.
    assert servicer.attempts == (3 if code == grpc.StatusCode.UNAVAILABLE else 1)


def test_async_errors_have_the_same_classes(failing_server):
    servicer, target = failing_server
    servicer.code = grpc.StatusCode.PERMISSION_DENIED

    async def call():
        async with attnserve.AsyncClient(target, timeout=30) as c:
            await c.attend(**GOOD)

    with pytest.raises(attnserve.PermissionDenied, match="^stand-in says PERMISSION_DENIED$"):
        asyncio.run(call())


# --- retries against a real server -----------------------------------------------------

def test_idempotent_calls_retry_until_the_server_is_up(start_server):
    port = free_port()
    c = attnserve.Client(f"127.0.0.1:{port}", timeout=30, retries=8)
    result = {}

    def call():
        try:
            result["out"] = c.attend(**GOOD)
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=call)
    t.start()
    time.sleep(0.5)  # the first attempts find nothing listening
    start_server(port=port)
    t.join(60)
    c.close()
    assert "error" not in result, result.get("error")
    assert result["out"].shape == (1, 4, 3, 8)


def test_non_idempotent_calls_are_not_retried():
    port = free_port()
    with attnserve.Client(f"127.0.0.1:{port}", timeout=30, retries=8) as c:
        c._open_data_channels(pb.ServerInfo(max_request_bytes=1 << 20,
                                            max_response_bytes=1 << 20))
        started = time.monotonic()
        with pytest.raises(attnserve.Unavailable):
            c.session("s").append(0, f32(1, 1, 8), f32(1, 1, 8))
        assert time.monotonic() - started < 0.5  # no backoff: one attempt


def test_tls_with_a_ca_file(start_server, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    srv = start_server(f"--tls_cert={cert}", f"--tls_key={key}")
    with attnserve.Client(srv.target, tls=str(cert), timeout=30) as c:
        assert c.attend(**GOOD).shape == (1, 4, 3, 8)
    with attnserve.Client(srv.target, timeout=5, retries=0) as plain:
        with pytest.raises(attnserve.Unavailable):
            plain.attend(**GOOD)
