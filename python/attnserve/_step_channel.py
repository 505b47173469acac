"""The client side of a same-host step channel's ring (docs/api.md, "StepChannel").

The server lays the ring out over a registered shared-memory region: a header of
little-endian uint32 fields, a request slot and a response slot. A step writes a
serialized AttendSessionsRequest into the request slot, its length into
request_bytes, then request_seq = response_seq + 1 (mod 2^32), and wakes the
server's futex if it sleeps; the answer is there once response_seq equals the
number written. The client polls for `spin` seconds, then sleeps on the futex at
response_seq in slices of WAIT_SLICE, checking between slices whether the
channel's call is still alive.

Python cannot issue memory fences; x86-64 keeps stores in order and loads in
order, which is all this protocol needs from the client (the one reordering
x86-64 allows, a load before an earlier store, costs at most one WAIT_SLICE of
either side's futex wait, never a lost step). Other machines may reorder more,
so opening a ring there is refused (check_machine).
"""

import ctypes
import platform
import time

from .errors import Internal, InvalidArgument, Unavailable, Unimplemented

MAGIC = 0x31525341                    # "ASR1"
VERSION = 1
HEADER_BYTES = 256

# Byte offsets of the header's uint32 fields.
_MAGIC, _VERSION, _REQUEST_CAPACITY, _RESPONSE_CAPACITY = 0, 4, 8, 12
_REQUEST_OFFSET, _RESPONSE_OFFSET = 16, 20
_REQUEST_SEQ, _REQUEST_BYTES, _SERVER_SLEEPING, _HANGUP = 64, 68, 72, 76
_RESPONSE_SEQ, _RESPONSE_BYTES, _CLIENT_SLEEPING, _CLOSED = 128, 132, 136, 140

_SEQ_MASK = 0xFFFFFFFF
DEFAULT_SPIN = 0.002                  # seconds of polling before the futex wait
WAIT_SLICE = 0.010                    # the longest futex wait before checking again

# The machines whose memory order the protocol can rely on without fences.
_ORDERED_MACHINES = ("x86_64", "AMD64")
_SYS_FUTEX = {"x86_64": 202, "AMD64": 202, "aarch64": 98, "arm64": 98}
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1       # shared futexes: no FUTEX_PRIVATE_FLAG
_EAGAIN, _EINTR, _ETIMEDOUT = 11, 4, 110


def check_machine(machine=None):
    """Unimplemented unless this is an x86-64 machine (see the module's note)."""
    machine = machine or platform.machine()
    if machine not in _ORDERED_MACHINES:
        raise Unimplemented(
            f"step channels: the Python client opens them on x86-64 only (this machine "
            f"is {machine or 'unknown'}: pure Python cannot order its shared-memory "
            "writes there); use session_stream() instead")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Futex:
    """futex(2) through libc's syscall(), on one uint32 of a mapping."""

    _libc = None

    def __init__(self, mapping, offset):
        if _Futex._libc is None:
            _Futex._libc = ctypes.CDLL(None, use_errno=True)
        self._word = ctypes.c_uint32.from_buffer(mapping, offset)  # a buffer export
        self._address = ctypes.c_void_p(ctypes.addressof(self._word))
        self._number = ctypes.c_long(_SYS_FUTEX[platform.machine()])

    def _futex(self, op, value, timeout):
        return self._libc.syscall(self._number, self._address, ctypes.c_int(op),
                                  ctypes.c_uint32(value), timeout, None, ctypes.c_int(0))

    def wake(self):
        if self._futex(_FUTEX_WAKE, 1, None) < 0:
            raise Internal(f"step channel: futex wake failed (errno {ctypes.get_errno()})")

    def wait(self, expected, timeout):
        """Sleeps while the word holds `expected`, at most `timeout` (a _Timespec)."""
        if self._futex(_FUTEX_WAIT, expected, ctypes.byref(timeout)) < 0:
            errno = ctypes.get_errno()
            if errno not in (_EAGAIN, _EINTR, _ETIMEDOUT):
                raise Internal(f"step channel: futex wait failed (errno {errno})")

    def release(self):
        self._word = None


class Ring:
    """The client's view of a ring the server laid out over `mapping` (an mmap
    of `size` bytes). One step at a time: the caller serializes steps, and
    calls check_machine() before it opens the channel.

    Its views of the mapping keep the mapping from closing: release() them first.
    """

    def __init__(self, mapping, size, spin=DEFAULT_SPIN):
        if spin < 0:
            raise ValueError(f"spin: must be >= 0 seconds, got {spin}")
        self.spin = float(spin)
        self._map = mapping
        self._view = memoryview(mapping)
        self._header = self._view[:HEADER_BYTES].cast("I")
        self._doorbell = self._answered = None
        try:
            self._attach(size)
            self._doorbell = _Futex(mapping, _REQUEST_SEQ)
            self._answered = _Futex(mapping, _RESPONSE_SEQ)
        except BaseException:
            self.release()
            raise
        self._slice = _Timespec(0, int(WAIT_SLICE * 1e9))

    def _field(self, offset):
        return self._header[offset // 4]

    def _attach(self, size):
        magic, version = self._field(_MAGIC), self._field(_VERSION)
        if magic != MAGIC or version != VERSION:
            raise Internal(f"step channel: the region holds no ring of version {VERSION} "
                           f"(magic 0x{magic:08x}, version {version})")
        self.request_capacity = self._field(_REQUEST_CAPACITY)
        self.response_capacity = self._field(_RESPONSE_CAPACITY)
        self._request_at = self._field(_REQUEST_OFFSET)
        self._response_at = self._field(_RESPONSE_OFFSET)
        if (self._request_at < HEADER_BYTES
                or self._request_at + self.request_capacity > self._response_at
                or self._response_at + self.response_capacity > size):
            raise Internal(
                f"step channel: the ring's slots (request {self.request_capacity} bytes at "
                f"{self._request_at}, response {self.response_capacity} at "
                f"{self._response_at}) do not fit the region's {size} bytes")

    @property
    def closed(self):
        """Whether the server has ended the channel (no step is answered after)."""
        return self._field(_CLOSED) == 1

    def write(self, payload):
        """Writes a request into the slot and rings: the number the answer will carry."""
        n = len(payload)
        if n > self.request_capacity:
            raise InvalidArgument(
                f"request: {n} bytes do not fit the step channel's request slot "
                f"({self.request_capacity} bytes; open the channel with a larger size)")
        if self.closed:
            raise Unavailable("step channel: the server closed it")
        self._map[self._request_at:self._request_at + n] = payload
        h = self._header
        h[_REQUEST_BYTES // 4] = n
        seq = (h[_RESPONSE_SEQ // 4] + 1) & _SEQ_MASK
        h[_REQUEST_SEQ // 4] = seq
        if h[_SERVER_SLEEPING // 4] == 1:
            self._doorbell.wake()
        return seq

    def wait(self, seq, alive):
        """Waits until response_seq is `seq` and returns the response's bytes.

        alive(): called between futex slices; it raises when the channel's call
        has ended. Unavailable when the server closes the ring meanwhile."""
        h = self._header
        answered, closed = _RESPONSE_SEQ // 4, _CLOSED // 4
        end = time.perf_counter() + self.spin
        while h[answered] != seq:
            if h[closed] == 1:
                raise Unavailable("step channel: the server closed it before answering")
            if time.perf_counter() >= end:
                self._sleep(seq, alive)
                break
        n = self._field(_RESPONSE_BYTES)
        if n > self.response_capacity:
            raise Internal(f"step channel: response_bytes {n} exceeds the response slot's "
                           f"{self.response_capacity}")
        return self._map[self._response_at:self._response_at + n]

    def _sleep(self, seq, alive):
        h = self._header
        answered, closed, sleeping = _RESPONSE_SEQ // 4, _CLOSED // 4, _CLIENT_SLEEPING // 4
        h[sleeping] = 1
        try:
            while True:
                now = h[answered]
                if now == seq:
                    return
                if h[closed] == 1:
                    raise Unavailable("step channel: the server closed it before answering")
                alive()
                self._answered.wait(now, self._slice)
        finally:
            h[sleeping] = 0

    def call(self, payload, alive):
        """One step of serialized bytes: the serialized answer."""
        return self.wait(self.write(payload), alive)

    def hangup(self):
        """No further steps: the server frees the channel and ends its call OK."""
        self._header[_HANGUP // 4] = 1
        self._doorbell.wake()

    def release(self):
        """Lets go of every view of the mapping (the ring is unusable after)."""
        for futex in (self._doorbell, self._answered):
            if futex is not None:
                futex.release()
        self._doorbell = self._answered = None
        self._header.release()
        self._view.release()
