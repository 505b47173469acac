"""The client side of a TCP step channel's socket (docs/api.md, "StepChannel").

The client connects to the port the StepChannel call's answer names, on the host
of the gRPC target, and sends the answer's 32-byte token first. Each step is then
one frame each way: a little-endian uint32 length and that many bytes (a
serialized AttendSessionsRequest, then its AttendSessionsResponse). A step polls
the socket for `spin` seconds, then waits in slices of WAIT_SLICE, checking
between slices whether the channel's call is still alive. Closing the socket is
the client's hang-up.
"""

import ipaddress
import os
import select
import socket
import struct
import time

from ._step_channel import DEFAULT_SPIN, WAIT_SLICE
from .errors import Internal, InvalidArgument, Unavailable

TOKEN_BYTES = 32
_LENGTH = struct.Struct("<I")
_KEPT_BUFFER = 1 << 20  # the receive buffer a socket keeps between steps


def target_host(target):
    """The host of a gRPC target: "host:port", "[v6]:port", "dns:///host:port",
    "ipv4:host:port"."""
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    if target.startswith("["):
        return target[1:target.find("]")]
    return target.rpartition(":")[0] or target


def is_loopback(host):
    """Whether `host` (a target's host) names this machine's loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_id():
    """This process's host and network namespace as a server names its own in
    StepChannelInfo.host_id ("<boot id>/<net namespace>"); "" when /proc does
    not tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/net')}"
    except OSError:
        return ""


class Socket:
    """One connected TCP step channel; the same calls as _step_channel.Ring.
    One step at a time: the caller serializes steps."""

    def __init__(self, host, port, token, request_capacity, response_capacity,
                 spin=DEFAULT_SPIN, connect_timeout=30.0):
        if spin < 0:
            raise ValueError(f"spin: must be >= 0 seconds, got {spin}")
        if len(token) != TOKEN_BYTES or not 0 < port < 65536:
            raise Internal(f"step channel: the server's answer names no TCP channel "
                           f"(port {port}, a token of {len(token)} bytes)")
        self.spin = float(spin)
        self.request_capacity = request_capacity
        self.response_capacity = response_capacity
        self._buffer = bytearray(_KEPT_BUFFER)  # answers up to its size are read here
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise Unavailable(f"step channel: cannot connect to {host}:{port}: {e}") from None
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.settimeout(None)
            self._sock.sendall(token)
        except OSError as e:
            self._sock.close()
            raise Unavailable(f"step channel: {host}:{port}: {e}") from None

    def call(self, payload, alive):
        """One step of serialized bytes: the serialized answer. alive(): called
        between waits; it raises when the channel's call has ended."""
        n = len(payload)
        if n > self.request_capacity:
            raise InvalidArgument(
                f"request: {n} bytes are past the step channel's limit of "
                f"{self.request_capacity} bytes")
        if self._sock is None:
            raise Unavailable("step channel: closed")
        head = _LENGTH.pack(n)
        try:
            # One gathered write of the length and the bytes; the rest, if any.
            sent = self._sock.sendmsg([head, payload])
            if sent < 4:
                self._sock.sendall(head[sent:])
                sent = 4
            if sent - 4 < n:
                self._sock.sendall(memoryview(payload)[sent - 4:])
        except OSError as e:
            raise Unavailable(f"step channel: the server closed it ({e})") from None
        return self._receive_frame(time.perf_counter() + self.spin, alive)

    def _receive_frame(self, spin_end, alive):
        """The body of the next frame. The server answers each step once, so
        everything that arrives is this frame: it is read in as few receives as
        it arrives in."""
        buffer = self._buffer
        head = _LENGTH.size
        got, need = 0, None
        sock = self._sock
        while need is None or got < need:
            try:
                r = sock.recv_into(memoryview(buffer)[got:], 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if time.perf_counter() < spin_end:
                    continue
                alive()
                select.select([sock], [], [], WAIT_SLICE)
                continue
            except OSError as e:
                raise Unavailable(f"step channel: receive failed ({e})") from None
            if r == 0:
                raise Unavailable("step channel: the server closed it before answering")
            got += r
            if need is None and got >= head:
                size = _LENGTH.unpack_from(buffer)[0]
                if size > self.response_capacity:
                    raise Internal(f"step channel: an answer of {size} bytes is past the "
                                   f"channel's {self.response_capacity}")
                need = head + size
                if len(buffer) < need:  # a larger answer: a buffer of its own
                    grown = bytearray(need)
                    grown[:got] = memoryview(buffer)[:got]
                    buffer = grown
        if got > need:
            raise Internal(f"step channel: {got - need} bytes arrived past the answer")
        return bytes(memoryview(buffer)[head:need])

    def hangup(self):
        """No further steps: the server frees the channel and ends its call OK."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def release(self):
        """Closes the socket (the channel is unusable after)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
