"""Same-host zero-copy: tensors in a POSIX shared-memory region (docs/python.md,
"Shared memory"; the protocol is docs/api.md's "Shared memory").

A SharedMemoryRegion is a POSIX shared-memory object this process created
("/<server prefix><name>" under /dev/shm, 0600), mapped here and registered
with the server, whose Register call stays open as the registration's lease.
As attnctl's --shm does (client/shared_memory.cc), the object's name is
unlinked as soon as the server has mapped it, so nothing is left in /dev/shm
whatever happens to either process; both mappings stay until each side lets
go. Client.shared_memory / AsyncClient.shared_memory open regions; this module
holds what the two share: the object, the mapping, the allocator of 64-byte
aligned spans, SharedTensor, and the placement of one Attend call's tensors.
"""

import bisect
import itertools
import mmap
import os
import re
import threading

import grpc

from . import _tensors as T
from .errors import AlreadyExists, FailedPrecondition, Internal, InvalidArgument, \
    ResourceExhausted
from .v1 import shared_memory_pb2 as smpb

try:  # CPython's shm_open/shm_unlink, what multiprocessing.shared_memory calls
    import _posixshmem
except ImportError:  # pragma: no cover - an interpreter without it
    _posixshmem = None

# Spans start at multiples of this (attnctl's alignment; a multiple of every
# element size, as the server requires, and of a cache line).
ALIGNMENT = 64
MAX_NAME_LENGTH = 64    # the server's limits (server/shm/shared_memory_registry.cc)
MAX_KEY_LENGTH = 254
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.-]+\Z")
_names = itertools.count()

# Codes after which the server may still be computing a call (it timed out or
# was cancelled here, or the transport failed): its output spans are then kept
# out of reuse until the region closes, so that a late write lands nowhere that
# matters.
_MAY_STILL_WRITE = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN,
                    grpc.StatusCode.INTERNAL, grpc.StatusCode.ABORTED}


def default_name():
    return f"py_{os.getpid()}_{next(_names)}"


def _align(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def check_name(name):
    """The server's rule for a region's name, in its words."""
    if (not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH
            or not _NAME_CHARS.match(name)):
        raise InvalidArgument(f'name: "{name}" is not 1 to {MAX_NAME_LENGTH} characters '
                              "of [A-Za-z0-9_.-]")


def check_key(key):
    """The server's rule for an object name (the prefix is the server's to check)."""
    if (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH
            or not _NAME_CHARS.match(key) or ".." in key):
        raise InvalidArgument(
            f'key: "{key}" is not a shared-memory object name (1 to {MAX_KEY_LENGTH} '
            'characters of [A-Za-z0-9_.-], no "..", no "/": the name given to shm_open '
            'without its leading "/")')


def check_size(size):
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"size: expected a byte count, got {size!r}")
    if size < 1:
        raise InvalidArgument(f"byte_size: must be >= 1, got {size}")


def _shm_open(path):
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
    if _posixshmem is not None:
        return _posixshmem.shm_open(path, flags, 0o600)
    return os.open("/dev/shm" + path, flags | os.O_CLOEXEC, 0o600)


def _shm_unlink(path):
    if _posixshmem is not None:
        _posixshmem.shm_unlink(path)
    else:
        os.unlink("/dev/shm" + path)


class SharedTensor:
    """A tensor in a span of a SharedMemoryRegion: what region.put and
    region.empty return, and what attend takes for query, key, value and out.

    numpy() and torch() are views of the region's memory (NumPy shows bfloat16
    as its raw uint16 bits); copy() is the caller's own decoded copy, as attend
    returns. A view keeps the mapping alive after the region closes (no crash),
    but its span is then no one's: copy what must outlive the region.
    """

    __slots__ = ("region", "offset", "byte_size", "dtype", "shape", "kind", "_freed")

    def __init__(self, region, offset, byte_size, dtype, shape, kind):
        self.region = region
        self.offset = offset
        self.byte_size = byte_size
        self.dtype = dtype          # a _tensors.DType
        self.shape = tuple(shape)
        self.kind = kind            # what attend returns for it as the query
        self._freed = False

    def __repr__(self):
        return (f"SharedTensor(region={self.region.name!r}, offset={self.offset}, "
                f"shape={list(self.shape)}, dtype={self.dtype.name})")

    def _check(self, field="tensor"):
        self.region._check_open(field)
        if self._freed:
            raise FailedPrecondition(f"{field}: the span at offset {self.offset} of shared "
                                     f'memory region "{self.region.name}" was freed')

    def ref(self, field="tensor"):
        """Its attnserve.v1.SharedMemoryRef."""
        self._check(field)
        return smpb.SharedMemoryRef(region=self.region.name, offset=self.offset,
                                    byte_size=self.byte_size)

    def numpy(self):
        self._check()
        return T.from_buffer(self.region._map, self.dtype, self.shape, T.NUMPY,
                             offset=self.offset, copy=False)

    def torch(self):
        self._check()
        return T.from_buffer(self.region._map, self.dtype, self.shape, T.TORCH,
                             offset=self.offset, copy=False)

    def copy(self, kind=None):
        """A copy as attend returns it: of `kind` ("numpy" or "torch"; default the
        kind put() was given), NumPy bfloat16 as float32 holding the values."""
        self._check()
        return T.from_buffer(self.region._map, self.dtype, self.shape, kind or self.kind,
                             offset=self.offset)

    def free(self):
        """Gives its span back to the region (its views then show whatever is put
        there next)."""
        self.region.free(self)


class SharedMemoryRegion:
    """A registered POSIX shared-memory region; Client.shared_memory opens it.

    put(x) copies an array or tensor into a new 64-byte aligned span and
    returns its SharedTensor; empty(shape, dtype) reserves a span (e.g. for
    attend's out=). Spans are given back by SharedTensor.free() and all at
    close(). Thread-safe; several calls may use one region at once.
    """

    def __init__(self, name, key, size):
        self.name = name
        self.key = key
        self.size = size
        self._lock = threading.Lock()
        self._starts = []        # sorted span offsets
        self._ends = {}          # offset -> aligned end
        self._fd = -1
        self._map = None
        self._linked = False
        self._call = None        # the Register call: the lease
        self._closed = False
        self._ended = None       # why the lease ended on its own

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return f"{type(self).__name__}({self.name!r}, key={self.key!r}, size={self.size}, {state})"

    @property
    def path(self):
        """The object's shm_open name ("/" + key); unlinked once registered."""
        return "/" + self.key

    @property
    def closed(self):
        return self._closed

    # -- the object and its mapping -----------------------------------------------
    def _create(self):
        """Creates the object (0600, O_EXCL), sizes and maps it."""
        try:
            self._fd = _shm_open(self.path)
        except FileExistsError:
            raise AlreadyExists(f'key: shared memory "{self.path}" exists already (pick '
                                "another name)") from None
        except OSError as e:
            raise Internal(f'key: cannot create shared memory "{self.path}": '
                           f"{e.strerror}") from None
        self._linked = True
        try:
            os.ftruncate(self._fd, self.size)
            self._map = mmap.mmap(self._fd, self.size, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            self._discard()
            raise Internal(f'cannot size or map shared memory "{self.path}" '
                           f"({self.size} bytes): {e.strerror}") from None

    def _leased(self, call):
        """The Register call answered: hold it and unlink the name (the server
        has mapped the object)."""
        self._call = call
        call.add_done_callback(self._lease_done)
        self._unlink()

    def _lease_done(self, call):
        if not self._closed and self._ended is None:
            why = "the Register call ended"
            code = getattr(call, "code", None)
            if isinstance(call, grpc.Call) and callable(code):
                try:
                    why = f"the Register call ended with {call.code().name}: {call.details()}"
                except Exception:  # noqa: BLE001 - the aio call's code() is a coroutine
                    pass
            self._ended = why

    def _unlink(self):
        if self._linked:
            self._linked = False
            try:
                _shm_unlink(self.path)
            except OSError:
                pass

    def _discard(self):
        """Unlinks (if still named) and unmaps; closed from then on."""
        self._closed = True
        self._unlink()
        if self._map is not None:
            m, self._map = self._map, None
            try:
                m.close()
            except BufferError:
                # Views of it are alive (numpy()/torch() results): the mapping
                # goes when the last of them does.
                pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _begin_close(self):
        """True the first time: marks the region closed (no new spans or
        references) and returns whether there is a lease to end."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        return self._call is not None

    def _check_open(self, field="shared_memory"):
        if self._closed:
            raise FailedPrecondition(f'{field}: shared memory region "{self.name}" is '
                                     "closed (its registration ended at close() or at the "
                                     "end of its with-block)")
        if self._ended is not None:
            raise FailedPrecondition(
                f'{field}: the registration of shared memory region "{self.name}" ended '
                f"({self._ended}; the connection dropped or the server unregistered it): "
                "close it and open another")

    # -- spans ----------------------------------------------------------------------
    def _allocate(self, nbytes, field):
        need = _align(max(int(nbytes), 1))
        with self._lock:
            self._check_open(field)
            at = 0
            for start in self._starts:
                if start - at >= need:
                    break
                at = self._ends[start]
            if at + need > self.size:
                used = sum(self._ends[s] - s for s in self._starts)
                raise ResourceExhausted(
                    f'{field}: shared memory region "{self.name}" ({self.size} bytes, '
                    f"{used} in use) has no room for {nbytes} bytes at {ALIGNMENT}-byte "
                    "alignment (open a larger region, or free() spans)")
            bisect.insort(self._starts, at)
            self._ends[at] = at + need
            return at

    def free(self, tensor):
        """Gives `tensor`'s span back; a no-op after close or a second free."""
        with self._lock:
            if tensor.region is not self or tensor._freed:
                return
            tensor._freed = True
            if tensor.offset in self._ends:
                del self._ends[tensor.offset]
                self._starts.remove(tensor.offset)

    def put(self, x, *, field="tensor"):
        """Copies x (a NumPy array or torch tensor of float32, bfloat16 or
        float16) into a new span; its SharedTensor."""
        x = T.as_array(x)
        dtype = T.dtype_of(x)
        if dtype not in T.FLOATS:
            raise InvalidArgument(f"{field}.dtype: {T.source_dtype_name(x)} is not "
                                  "supported (expected FLOAT32, BFLOAT16 or FLOAT16)")
        t = self._tensor(T.shape_of(x), dtype, T.kind_of(x), field)
        try:
            T.write_raw(x, dtype, t.numpy())
        except BaseException:
            self.free(t)
            raise
        return t

    def empty(self, shape, dtype="float32", *, kind=T.NUMPY):
        """Reserves a span for a tensor of `shape` and `dtype` (contents
        unspecified): attend(..., out=region.empty(...)) writes the output there."""
        shape = [int(d) for d in shape]
        if any(d < 0 for d in shape):
            raise InvalidArgument(f"shape: {shape} has a negative dimension")
        return self._tensor(shape, T.dtype_named(dtype, "dtype"), kind, "tensor")

    def _tensor(self, shape, dtype, kind, field):
        nbytes = dtype.size
        for d in shape:
            nbytes *= d
        return SharedTensor(self, self._allocate(nbytes, field), nbytes, dtype, shape, kind)


class Placement:
    """One Attend call's spans in a region: inputs it staged, the output and
    weights it reserved (or the caller's out=), and how to read them back."""

    def __init__(self, region):
        if not isinstance(region, SharedMemoryRegion):
            raise TypeError("shared_memory: expected a region of client.shared_memory(), "
                            f"got {type(region).__name__}")
        self.region = region
        self._inputs = []
        self._outputs = []       # spans the call writes
        self._given = {}         # field -> the caller's SharedTensor

    def put(self, x, field):
        t = self.region.put(x, field=field)
        self._inputs.append(t)
        return t

    def output(self, field, shape, dtype, given=None):
        """The SharedMemoryRef the server writes `field` ("output", "weights") to:
        a new span, or `given` (a SharedTensor of that shape and dtype)."""
        if given is None:
            t = self.region._tensor(shape, dtype, T.NUMPY, field)
            self._outputs.append(t)
        else:  # checked by the caller (_codec.place_attend_outputs)
            t = given
            self._given[field] = t
        return t.ref(f"{field}_shared_memory")

    def collect(self, tensor, field, kind):
        """The result for response tensor `field`: the caller's out= as a view, or
        a copy of the span the server wrote."""
        if not tensor.HasField("shared_memory"):
            return T.from_wire(tensor, kind, field)
        ref = tensor.shared_memory
        self.region._check_open(field)
        given = self._given.get(field)
        spans = [given] if given is not None else self._outputs
        span = next((t for t in spans if t.region.name == ref.region
                     and t.offset == ref.offset and t.byte_size == ref.byte_size), None)
        if span is None:
            raise Internal(f"{field}: the response refers to bytes [{ref.offset}, +"
                           f'{ref.byte_size}) of region "{ref.region}", not the span this '
                           "call placed there")
        dtype = T.dtype_of_wire(tensor.dtype, field)
        shape = tuple(tensor.shape)
        if given is not None:
            return given.torch() if kind == T.TORCH else given.numpy()
        return T.from_buffer(self.region._map, dtype, shape, kind, offset=ref.offset)

    def release(self, error=None):
        """Frees the spans the call took (not the caller's). After an error the
        server may still be writing (a deadline, a cancel, the transport), the
        output spans stay reserved until the region closes."""
        for t in self._inputs:
            t.free()
        if error is None or getattr(error, "code", None) not in _MAY_STILL_WRITE:
            for t in self._outputs:
                t.free()
        self._inputs, self._outputs = [], []

