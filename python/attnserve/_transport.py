"""Channel settings, credentials, metadata and the retry policy, in one place.

The HTTP/2 settings are the server's own (wire/transport.h, docs/operations.md
"Client settings"): frames of 2^24 - 1 bytes and a 64 MiB stream window, so
tensors of several MB do not cross in 16 KB frames. Message limits come from the
server's GetServerInfo: the send limit is max_request_bytes and the receive
limit max_response_bytes plus the room the server allows for everything around
the tensors (kResponseEnvelopeBytes).
"""

import operator
import os
import random
import time

import grpc

HTTP2_MAX_FRAME_BYTES = (1 << 24) - 1
HTTP2_STREAM_LOOKAHEAD_BYTES = 64 << 20
RESPONSE_ENVELOPE_BYTES = 64 * 1024
_INT_MAX = (1 << 31) - 1


MAX_CONNECTIONS = 256
# connections="auto" opens one data connection and another whenever a call
# starts while every open one is busy, up to this many (attnctl bench's
# --connections=auto: min(concurrency, 8); docs/operations.md "Several connections
# per target").
MAX_AUTO_CONNECTIONS = 8


def connection_count(connections):
    """None for "auto", else the count in [1, MAX_CONNECTIONS]."""
    if isinstance(connections, str) and connections.strip().lower() == "auto":
        return None
    try:
        if isinstance(connections, bool):
            raise TypeError
        connections = operator.index(connections)
    except TypeError:
        raise TypeError(f'connections: expected "auto" or a count in [1, {MAX_CONNECTIONS}], '
                        f"got {connections!r}") from None
    if not 1 <= connections <= MAX_CONNECTIONS:
        raise ValueError(f'connections: must be "auto" or a count in [1, {MAX_CONNECTIONS}], '
                         f"got {connections}")
    return connections


def _clamp(n):
    return int(max(1, min(n, _INT_MAX)))


def channel_options(max_send_bytes, max_receive_bytes, connection_key):
    """Options of one channel. Channels with distinct connection keys get TCP
    connections of their own (a local subchannel pool plus an argument naming
    the key), as attnctl's --connections do."""
    return [
        ("grpc.max_send_message_length", _clamp(max_send_bytes)),
        ("grpc.max_receive_message_length", _clamp(max_receive_bytes)),
        ("grpc.http2.max_frame_size", HTTP2_MAX_FRAME_BYTES),
        ("grpc.http2.lookahead_bytes", HTTP2_STREAM_LOOKAHEAD_BYTES),
        ("grpc.use_local_subchannel_pool", 1),
        ("attnserve.connection", connection_key),
    ]


# attnserve's default --max_request_bytes and --max_response_bytes. The
# bootstrap channel is sized as a data channel of a server with these limits,
# so that against such a server it is also the first data channel: a client's
# first call then needs no second connection.
SERVER_DEFAULT_REQUEST_BYTES = 256 << 20
SERVER_DEFAULT_RESPONSE_BYTES = 256 << 20


def data_channel_limits(max_request_bytes, max_response_bytes):
    """(send, receive) message limits of a data channel to a server with these
    limits (its ServerInfo's)."""
    return max_request_bytes, max_response_bytes + RESPONSE_ENVELOPE_BYTES


def data_channel_options(info, index):
    return channel_options(*data_channel_limits(info.max_request_bytes,
                                                info.max_response_bytes),
                           f"data-{index}")


def bootstrap_channel_options():
    return channel_options(*data_channel_limits(SERVER_DEFAULT_REQUEST_BYTES,
                                                SERVER_DEFAULT_RESPONSE_BYTES),
                           "data-0")


def bootstrap_serves_data(info):
    """Whether the bootstrap channel has the options data channel 0 would have
    for a server of ServerInfo `info` (and so can be it)."""
    return (data_channel_limits(info.max_request_bytes, info.max_response_bytes)
            == data_channel_limits(SERVER_DEFAULT_REQUEST_BYTES,
                                   SERVER_DEFAULT_RESPONSE_BYTES))


def credentials(tls):
    """None for plain text; else grpc.ChannelCredentials.

    tls: None/False = plain text; True = TLS with the system's roots; a path to
    a PEM CA file (or its bytes); or grpc.ChannelCredentials for anything else
    (client certificates: grpc.ssl_channel_credentials(ca, key, cert)).
    """
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials()
    if isinstance(tls, grpc.ChannelCredentials):
        return tls
    if isinstance(tls, (bytes, bytearray)):
        return grpc.ssl_channel_credentials(root_certificates=bytes(tls))
    if isinstance(tls, (str, os.PathLike)):
        with open(tls, "rb") as f:
            return grpc.ssl_channel_credentials(root_certificates=f.read())
    raise TypeError("tls: expected None, True, a CA file path, PEM bytes or "
                    f"grpc.ChannelCredentials, got {type(tls).__name__}")


def base_metadata(token):
    return (("authorization", f"Bearer {token}"),) if token else ()


SESSION_ROUTE_HEADER = "attnserve-session"


class RetryPolicy:
    """Retries of idempotent calls that fail with UNAVAILABLE.

    The server answers UNAVAILABLE only for calls it did not compute (it is
    draining) and gRPC for calls that never reached it, so retrying is safe for
    calls whose repetition changes nothing. Backoff doubles from `initial`
    (seconds) up to `maximum`, with +-20 % jitter, and never past the call's
    deadline.
    """

    def __init__(self, attempts=5, initial=0.1, maximum=2.0, multiplier=2.0):
        if attempts < 1:
            raise ValueError(f"retries: attempts must be >= 1, got {attempts}")
        self.attempts = attempts
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier

    def delays(self):
        """The pause before each retry (attempts - 1 of them)."""
        delay = self.initial
        for _ in range(self.attempts - 1):
            yield delay * random.uniform(0.8, 1.2)
            delay = min(delay * self.multiplier, self.maximum)


def deadline_after(timeout):
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline):
    return None if deadline is None else deadline - time.monotonic()


def is_retryable(rpc_error):
    return rpc_error.code() == grpc.StatusCode.UNAVAILABLE
