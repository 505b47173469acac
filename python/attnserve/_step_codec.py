"""Session steps as bytes, for a decode loop through a step channel.

Building an AttendSessionsRequest message per layer call and reading its answer
field by field costs a Python decoder more than the step itself. A StepCodec
serializes the options of a loop's calls once (through the protobuf library,
with the same checks as Client.attend_sessions) and writes each step's layer
and session parts straight into the wire format behind them: a message's
fields may come in any order, and a field written twice keeps its last value
(repeated ones add up), so the bytes parse as the message the library would
build. Field numbers come from the generated descriptors. Answers are parsed by
the library and their outputs copied into one tensor for the whole batch.
"""

import struct

import numpy as np

from . import _codec as C
from . import _tensors as T
from .errors import Internal, error_for_code
from .v1 import attention_pb2 as pb
from .v1 import sessions_pb2 as spb

_LEN, _VARINT, _FIXED32 = 2, 0, 5


def _encode_varint(n):
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# The varints of one and two bytes, made once: a step's lengths and most
# positions.
_SMALL = [_encode_varint(n) for n in range(1 << 14)]


def _varint(n):
    return _SMALL[n] if n < 16384 else _encode_varint(n)


def _tag(message, field, wire_type):
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


_LAYER = _tag(spb.AttendSessionsRequest, "layer", _VARINT)
_SESSIONS = _tag(spb.AttendSessionsRequest, "sessions", _LEN)
_SINKS = _tag(spb.AttendSessionsRequest, "sinks", _LEN)
_SESSION_ID = _tag(spb.SessionQuery, "session_id", _LEN)
_QUERY = _tag(spb.SessionQuery, "query", _LEN)
_KEY = _tag(spb.SessionQuery, "key", _LEN)
_VALUE = _tag(spb.SessionQuery, "value", _LEN)
_POSITION = _tag(spb.SessionQuery, "position", _VARINT)
_DTYPE = _tag(pb.Tensor, "dtype", _VARINT)
_SHAPE = _tag(pb.Tensor, "shape", _LEN)
_DATA = _tag(pb.Tensor, "data", _LEN)

# torch dtype -> DType of the bytes a step sends (the dtypes the fast path takes),
# and an output's wire dtype -> (DType, torch dtype).
_TORCH_DTYPES = {} if T.torch is None else {
    T.torch.float32: T.FLOAT32, T.torch.bfloat16: T.BFLOAT16, T.torch.float16: T.FLOAT16}
_OUTPUT_DTYPES = {d.wire: (d, t) for t, d in _TORCH_DTYPES.items()}


class StepCodec:
    """The bytes of steps with fixed options (Client.attend_sessions' keyword
    arguments but sinks, which may differ per call) and their answers."""

    def __init__(self, **options):
        request, _ = C.attend_sessions_request(0, [], **options)
        self._options = request.SerializeToString()
        self._tensor_heads = {}  # (wire dtype, shape) -> the Tensor's bytes before its data

    @staticmethod
    def takes(*tensors):
        """Whether the step's tensors (None for absent ones) can go as bytes here:
        CPU torch tensors of one float dtype without grad. Others take the
        general path (Client.attend_sessions), which converts or refuses them."""
        dtype = None
        for x in tensors:
            if x is None:
                continue
            if (not T.is_torch(x) or x.device.type != "cpu" or x.dtype not in _TORCH_DTYPES
                    or x.requires_grad or dtype not in (None, x.dtype)):
                return False
            dtype = x.dtype
        return dtype is not None

    def _operand(self, x):
        """(the bytes of x's rows as a NumPy array, their Tensor head: the
        message's bytes before its data) for a [B, ...] batch x."""
        dtype = _TORCH_DTYPES[x.dtype]
        rows = (x.view(T.torch.int16) if dtype is T.BFLOAT16 else x).numpy()
        shape = rows.shape[1:]
        key = (dtype.wire, shape)
        head = self._tensor_heads.get(key)
        if head is None:
            packed = b"".join(_varint(d) for d in shape)
            head = (_DTYPE + _varint(dtype.wire) + _SHAPE + _varint(len(packed)) + packed
                    + _DATA + _varint(rows[0].nbytes if len(rows) else 0))
            self._tensor_heads[key] = head
        return rows, head

    def request(self, layer, session_ids, q, k=None, v=None, positions=None, sinks=None):
        """The serialized AttendSessionsRequest of one step: session_ids[i] gets
        q[i] ([T, Hq, D]) and, when k is given, appends k[i], v[i] at
        positions[i]. q, k, v as StepCodec.takes them."""
        pieces = [self._options, _LAYER, _varint(layer)]
        if sinks is not None:
            values = C.float_list(sinks)
            pieces += (_SINKS, _varint(4 * len(values)),
                       struct.pack(f"<{len(values)}f", *values))
        fields = [(_QUERY, *self._operand(q))]
        if k is not None:
            fields += ((_KEY, *self._operand(k)), (_VALUE, *self._operand(v)))
        for i, sid in enumerate(session_ids):
            sid = sid.encode()
            sid_length = _varint(len(sid))
            part = [_SESSION_ID, sid_length, sid]
            size = len(_SESSION_ID) + len(sid_length) + len(sid)
            for tag, rows, head in fields:
                data = rows[i]
                if not data.flags.c_contiguous:
                    data = np.ascontiguousarray(data)
                length = _varint(len(head) + data.nbytes)
                part += (tag, length, head, data)
                size += len(tag) + len(length) + len(head) + data.nbytes
            if k is not None:
                position = _varint(positions[i])
                part += (_POSITION, position)
                size += len(_POSITION) + len(position)
            pieces += (_SESSIONS, _varint(size))
            pieces += part
        return b"".join(pieces)

    @staticmethod
    def outputs(answer, count, shape):
        """The outputs of a serialized AttendSessionsResponse of `count` sessions,
        each of `shape` ([T, Hq, Dv]), as one torch tensor [count, *shape]; the
        answer's error raised."""
        resp = spb.AttendSessionsResponse.FromString(answer)
        if resp.error_code:
            raise error_for_code(resp.error_code, resp.error_message)
        if len(resp.results) != count:
            raise Internal(f"the server answered {len(resp.results)} results for "
                           f"{count} sessions")
        out = view = None
        out_elements = int(np.prod(shape))
        for i, r in enumerate(resp.results):
            output = r.output
            dtype, torch_dtype = _OUTPUT_DTYPES.get(output.dtype, (None, None))
            if dtype is None or tuple(output.shape) != shape or (
                    len(output.data) != dtype.size * out_elements):
                name = (pb.DataType.Name(output.dtype) if output.dtype in pb.DataType.values()
                        else f"dtype {output.dtype}")
                raise Internal(f"results[{i}].output: {name} {list(output.shape)} in "
                               f"{len(output.data)} bytes, expected a float {list(shape)}")
            if out is None:
                out = T.torch.empty((count,) + shape, dtype=torch_dtype)
                view = (out.view(T.torch.int16) if dtype is T.BFLOAT16 else out).numpy()
            elif out.dtype != torch_dtype:
                raise Internal(f"results[{i}].output: {dtype.name}, results[0]'s "
                               f"{out.dtype}")
            view[i] = np.frombuffer(output.data, view.dtype).reshape(shape)
        return out
