"""Messages past gRPC's 4 MiB default, both ways: the channels take the server's limits."""

from reference import attention, random
from test_parity import assert_close


def test_request_larger_than_4_mib(client):
    # q 64 KiB, k and v 4 MiB each: an 8 MiB request, a small answer.
    q = random((1, 1, 16, 64), seed=1)
    k = random((1, 1, 16384, 64), seed=2)
    v = random((1, 1, 16384, 64), seed=3)
    out = client.attend(q, k, v)
    assert out.shape == (1, 1, 16, 64)
    assert_close(out, attention(q, k, v)[0], 1e-5)


def test_response_larger_than_4_mib(client):
    # A small request whose weights [1, 4, 512, 1024] are 8 MiB.
    q = random((1, 4, 512, 8), seed=4)
    k = random((1, 1, 1024, 8), seed=5)
    v = random((1, 1, 1024, 8), seed=6)
    out, w = client.attend(q, k, v, return_weights=True, is_causal=True)
    assert w.nbytes == 8 << 20
    want_out, want_w = attention(q, k, v, is_causal=True)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)


def test_stream_of_large_messages(client):
    q = random((1, 1, 8, 64), seed=7)
    k = random((1, 1, 20000, 64), seed=8)  # 5 MiB each
    v = random((1, 1, 20000, 64), seed=9)
    outs = list(client.attend_many([(q, k, v)] * 3))
    want = attention(q, k, v)[0]
    for out in outs:
        assert_close(out, want, 1e-5)



def test_request_past_the_message_limit_goes_in_pieces(client):
    # k and v 10 MiB each: past the server's one-message limit (16 MiB by
    # default), so only a call in pieces (AttendPieces) can be served.
    q = random((1, 2, 4, 64), seed=10)
    k = random((1, 2, 20480, 64), seed=11)
    v = random((1, 2, 20480, 64), seed=12)
    client.attend(q[..., :1, :], k[..., :8, :], v[..., :8, :])  # opens the channels
    assert q.nbytes + k.nbytes + v.nbytes > client.limits.max_message_bytes
    out = client.attend(q, k, v, is_causal=True)
    assert_close(out, attention(q, k, v, is_causal=True)[0], 1e-5)
