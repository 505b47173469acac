"""NumPy / PyTorch tensors <-> attnserve.v1.Tensor: the package's one dtype table.

A tensor crosses as its raw little-endian bytes; NumPy has no bfloat16, so a
BFLOAT16 result for NumPy callers comes back as float32 holding the bf16 values
exactly (an array whose dtype is named "bfloat16", e.g. ml_dtypes', is sent as
BFLOAT16).
"""

import numpy as np

from .errors import InvalidArgument
from .v1 import attention_pb2 as pb

try:  # torch is optional: NumPy callers never need it.
    import torch
except ImportError:  # pragma: no cover - exercised on machines without torch
    torch = None


class DType:
    __slots__ = ("name", "wire", "short", "size", "numpy", "torch_name")

    def __init__(self, name, wire, short, size, numpy_dtype, torch_name):
        self.name = name          # the Python-side name: "float32", ...
        self.wire = wire          # attnserve.v1.DataType number
        self.short = short        # the server's short name in messages: "f32", ...
        self.size = size          # bytes per element
        self.numpy = numpy_dtype  # the NumPy dtype of the bytes ("<u2" for bf16)
        self.torch_name = torch_name

    @property
    def wire_name(self):
        return pb.DataType.Name(self.wire)


FLOAT32 = DType("float32", pb.FLOAT32, "f32", 4, np.dtype("<f4"), "float32")
BFLOAT16 = DType("bfloat16", pb.BFLOAT16, "bf16", 2, np.dtype("<u2"), "bfloat16")
FLOAT16 = DType("float16", pb.FLOAT16, "f16", 2, np.dtype("<f2"), "float16")
BOOL = DType("bool", pb.BOOL, "bool", 1, np.dtype("|b1"), "bool")
INT32 = DType("int32", pb.INT32, "i32", 4, np.dtype("<i4"), "int32")

FLOATS = (FLOAT32, BFLOAT16, FLOAT16)
_BY_NAME = {d.name: d for d in (FLOAT32, BFLOAT16, FLOAT16, BOOL, INT32)}
_BY_NAME.update({"f32": FLOAT32, "bf16": BFLOAT16, "f16": FLOAT16,
                 "float": FLOAT32, "half": FLOAT16})
_BY_WIRE = {d.wire: d for d in (FLOAT32, BFLOAT16, FLOAT16, BOOL, INT32)}

NUMPY, TORCH = "numpy", "torch"


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def kind_of(x):
    return TORCH if is_torch(x) else NUMPY


def dtype_named(spec, field):
    """A float DType from a name ("bfloat16", "bf16"), a NumPy or torch dtype."""
    if spec is None:
        return None
    if isinstance(spec, DType):
        return spec
    if torch is not None and isinstance(spec, torch.dtype):
        name = str(spec).replace("torch.", "")
    elif isinstance(spec, str):
        name = spec.lower()
    else:
        try:
            name = np.dtype(spec).name
        except TypeError:
            raise TypeError(f"{field}: expected a dtype, got {spec!r}") from None
    d = _BY_NAME.get(name)
    if d not in FLOATS:
        raise InvalidArgument(f"{field}: {name} is not supported "
                              "(expected float32, bfloat16 or float16)")
    return d


# NumPy and torch dtype objects seen so far -> DType (or None): the names are
# costly to compute on every call of a decode loop.
_BY_SOURCE_DTYPE = {}


def dtype_of(x):
    """The DType of an array or tensor, or None when attnserve has no such dtype."""
    key = x.dtype
    try:
        return _BY_SOURCE_DTYPE[key]
    except KeyError:
        pass
    d = _BY_NAME.get(source_dtype_name(x))
    _BY_SOURCE_DTYPE[key] = d
    return d


def source_dtype_name(x):
    return str(x.dtype).replace("torch.", "") if is_torch(x) else x.dtype.name


def as_array(x):
    """x itself when it is a NumPy array or torch tensor, else np.asarray(x)."""
    if is_torch(x) or isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def shape_of(x):
    return [int(d) for d in x.shape]


def _raw_numpy(x, dtype):
    """A C-contiguous little-endian NumPy view of x's elements as `dtype`'s bytes."""
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if dtype is BFLOAT16:
            t = t.view(torch.int16)
        return t.numpy()
    a = x
    if dtype is BFLOAT16:
        a = a.view(np.uint16)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a)


def to_wire(x, dtype, out):
    """Fills the attnserve.v1.Tensor `out` with x (already of `dtype`)."""
    out.dtype = dtype.wire
    out.shape[:] = x.shape
    out.data = _raw_numpy(x, dtype).tobytes()
    return out


def dtype_of_wire(wire, field="output"):
    dtype = _BY_WIRE.get(wire)
    if dtype is None:
        raise InvalidArgument(f"{field}.dtype: unknown value {wire}")
    return dtype


def write_raw(x, dtype, destination):
    """Copies x (already of `dtype`) into the NumPy array `destination` of
    dtype.numpy and x's shape (a span of a shared-memory region)."""
    src = _raw_numpy(x, dtype)
    if src.dtype != dtype.numpy:  # torch's bfloat16 bits come as int16
        src = src.view(dtype.numpy)
    np.copyto(destination, src.reshape(destination.shape), casting="no")


def from_wire(tensor, kind, field="output"):
    """An array (kind "numpy") or tensor ("torch") holding a copy of `tensor`."""
    dtype = dtype_of_wire(tensor.dtype, field)
    # A copy: the response's bytes are immutable, and callers expect to write
    # into what they get back.
    return from_buffer(tensor.data, dtype, tuple(tensor.shape), kind)


def from_buffer(buffer, dtype, shape, kind, *, offset=0, copy=True):
    """The elements of `dtype` and `shape` at byte `offset` of `buffer` as an
    array (kind "numpy") or tensor ("torch"): a copy, or with copy=False a view
    sharing the buffer's memory (NumPy bfloat16 is then its raw uint16 bits)."""
    count = 1
    for d in shape:
        count *= int(d)
    raw = np.frombuffer(buffer, dtype.numpy, count, offset).reshape(shape)
    if copy:
        raw = raw.copy()
    if kind == TORCH:
        if torch is None:
            raise RuntimeError("torch is not importable")
        if dtype is BFLOAT16:  # torch has no uint16: reinterpret as int16, then bf16
            return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(raw)
    if dtype is BFLOAT16 and copy:
        return (raw.astype("<u4") << 16).view("<f4")
    return raw
