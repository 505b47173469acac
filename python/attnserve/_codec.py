"""Requests built from Python arguments and responses decoded to arrays/tensors.

Shared by Client and AsyncClient, so both check and convert the same way. The
checks cover shapes and dtypes (what the caller can get wrong before the server
knows anything) and raise InvalidArgument in the server's own words; value rules
(key length ranges, finite scales, ...) are left to the server, which reports
them the same way.
"""

import contextlib
import math

import numpy as np

from . import _shared_memory as S
from . import _tensors as T
from ._transport import RESPONSE_ENVELOPE_BYTES
from .errors import Error, InvalidArgument
from .types import (BlockSparse, LinearAttention, LshAttention, RelativeBias, RelativeKeys,
                    SessionInfo, SessionShape, WeightStats)
from .v1 import attention_pb2 as pb
from .v1 import sessions_pb2 as spb

_LAYOUTS = {"BHLD": pb.BHLD, "BLHD": pb.BLHD}
_ALIGNMENTS = {"top_left": pb.TOP_LEFT, "bottom_right": pb.BOTTOM_RIGHT}
_STRIDE_PATTERNS = {"strided": pb.STRIDED, "fixed": pb.FIXED}
_FEATURE_MAPS = {"elu_plus_one": pb.ELU_PLUS_ONE, "relu": pb.RELU,
                 "favor_plus": pb.FAVOR_PLUS}
_MAX_BLOCK_PAIRS = 1 << 24
_LINEAR_WHY = (" cannot be linearised: linear attention sums phi(k) v^T over the keys "
               "once, so only causal and key_lengths can restrict them")
_LSH_WHY = (" is not supported by LSH attention, which attends within hash chunks "
            "(only causal and key_lengths apply)")


def shape_text(shape):
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _choice(table, value, field, expected):
    key = value.upper() if table is _LAYOUTS else value.lower()
    if not isinstance(value, str) or key not in table:
        raise InvalidArgument(f"{field}: unknown value {value!r} (expected {expected})")
    return table[key]


def _axes(name, layout):
    bhld = layout == pb.BHLD
    if name == "query":
        return "[B, Hq, Lq, D]" if bhld else "[B, Lq, Hq, D]"
    if name == "key":
        return "[B, Hkv, Lk, D]" if bhld else "[B, Lk, Hkv, D]"
    return "[B, Hkv, Lk, Dv]" if bhld else "[B, Lk, Hkv, Dv]"


def float_operand(name, x, axes, same_as=None, check=True):
    """(array, DType) of a query/key/value/hidden operand."""
    if x is None:
        raise InvalidArgument(f"{name}: missing (expected a FLOAT32, BFLOAT16 or "
                              f"FLOAT16 tensor {axes})")
    if isinstance(x, S.SharedTensor):  # in shared memory: its dtype and shape
        x._check(name)
        dtype = x.dtype
    else:
        x = T.as_array(x)
        dtype = T.dtype_of(x)
    if dtype is None:
        raise InvalidArgument(f"{name}.dtype: {T.source_dtype_name(x)} is not supported "
                              "(expected FLOAT32, BFLOAT16 or FLOAT16)")
    if check and dtype not in T.FLOATS:
        raise InvalidArgument(f"{name}.dtype: {dtype.wire_name} is not supported "
                              "(expected FLOAT32, BFLOAT16 or FLOAT16)")
    if check and same_as is not None and dtype is not same_as[1]:
        raise InvalidArgument(f"{name}.dtype: {dtype.wire_name} differs from "
                              f"{same_as[0]}.dtype {same_as[1].wire_name}"
                              + (f" ({same_as[2]})" if len(same_as) > 2 else ""))
    return x, dtype


def _explicit_mask(attn_mask, check):
    m = T.as_array(attn_mask)
    dtype = T.dtype_of(m)
    if dtype is T.BOOL:
        pass
    elif dtype in T.FLOATS or (not T.is_torch(m) and m.dtype.kind == "f") or (
            T.is_torch(m) and m.dtype.is_floating_point):
        # The wire takes FLOAT32 masks; bf16/f16/f64 masks convert exactly or
        # round as torch would add them in f32.
        m, dtype = (m.float() if T.is_torch(m) else np.asarray(m, np.float32)), T.FLOAT32
    elif check or dtype is None:
        raise InvalidArgument(f"mask.explicit_mask.dtype: {T.source_dtype_name(m)} is not "
                              "supported (expected bool or a float dtype)")
    if check and len(m.shape) > 4:
        raise InvalidArgument(f"mask.explicit_mask: rank {len(m.shape)} exceeds the "
                              f"maximum 4 (shape {shape_text(m.shape)})")
    return m, dtype


def _window(window):
    if window is None:
        return None, None
    if isinstance(window, (tuple, list)):
        if len(window) != 2:
            raise TypeError(f"window: expected an int or (left, right), got {window!r}")
        return window[0], window[1]
    return window, window


def float_list(x):
    """Python floats of a list, NumPy array or torch tensor (any dtype or device,
    with or without grad), flattened: per-head values such as ALiBi slopes."""
    if T.is_torch(x):
        x = x.detach().cpu().double()
    return [float(s) for s in np.asarray(x, np.float64).reshape(-1)]


def relative_bias_message(spec, field="mask.relative_bias", check=True):
    """The attnserve.v1.RelativeBias of an attnserve.RelativeBias (a RelativeBias
    message is taken as it is). The table goes flat in row-major order, so a 2-D
    table must be [Hq, num_buckets]: T5's weight [num_buckets, Hq] as it is would
    send the buckets of one head as the heads of one bucket, and is refused."""
    if isinstance(spec, pb.RelativeBias):
        return spec
    if not isinstance(spec, RelativeBias):
        raise TypeError("relative_bias: expected attnserve.RelativeBias, got "
                        f"{type(spec).__name__}")
    msg = pb.RelativeBias(num_buckets=int(spec.num_buckets),
                          max_distance=int(spec.max_distance),
                          bidirectional=bool(spec.bidirectional))
    table = spec.table
    shape = [int(d) for d in (table.shape if hasattr(table, "shape") else np.shape(table))]
    if check and len(shape) > 2:
        raise InvalidArgument(f"{field}.table: shape {shape_text(shape)} is not [Hq, "
                              "num_buckets] or flat")
    if check and len(shape) == 2 and shape[1] != msg.num_buckets:
        hint = ""
        if shape[0] == msg.num_buckets:
            hint = (" (T5's relative_attention_bias.weight is [num_buckets, Hq]: send its "
                    "transpose, weight.T)")
        raise InvalidArgument(f"{field}.table: shape {shape_text(shape)} is not [Hq, "
                              f"num_buckets = {msg.num_buckets}]{hint}")
    msg.table[:] = float_list(table)
    return msg


def relative_keys_message(spec, out):
    """Fills the attnserve.v1.RelativeKeys `out` from an attnserve.RelativeKeys."""
    if not isinstance(spec, RelativeKeys):
        raise TypeError("relative_keys: expected attnserve.RelativeKeys, got "
                        f"{type(spec).__name__}")
    table = spec.table
    if T.is_torch(table):
        table = table.detach().cpu().float().numpy()
    table = np.ascontiguousarray(np.asarray(table, np.float32))
    out.table.dtype = pb.FLOAT32
    out.table.shape[:] = table.shape
    out.table.data = table.tobytes()
    out.zero_row = int(spec.zero_row)
    if spec.query_bias is not None:
        out.query_bias[:] = float_list(spec.query_bias)


def _check_relative_keys(rk, hq, d):
    """The server's checks of relative keys' shapes, in its order; False when it
    would refuse a value, which is left to it (and all after it)."""
    shape = list(rk.table.shape)
    if (len(shape) != 3 or shape[0] not in (1, hq) or shape[1] < 1 or shape[2] != d):
        raise InvalidArgument(f"mask.relative_keys.table: shape {shape_text(shape)} is not "
                              f"[heads, rows, D] with heads 1 or Hq = {hq}, rows >= 1 and "
                              f"D = {d}")
    if not 0 <= rk.zero_row < shape[1]:
        raise InvalidArgument(f"mask.relative_keys.zero_row: {rk.zero_row} is outside [0, "
                              f"rows = {shape[1]})")
    if len(rk.query_bias) and len(rk.query_bias) != hq * d:
        raise InvalidArgument(f"mask.relative_keys.query_bias: expected Hq·D = {hq * d} "
                              f"entries ([Hq, D]), got {len(rk.query_bias)}")
    return bool(np.isfinite(np.asarray(rk.query_bias, np.float32)).all())


def _relative_bias_in_range(rb):
    """num_buckets and max_distance within the server's ranges (which it checks,
    and names, before the table)."""
    low = 4 if rb.bidirectional else 2
    if not low <= rb.num_buckets <= 1024:
        return False
    exact = (rb.num_buckets // 2 if rb.bidirectional else rb.num_buckets) // 2
    return exact < rb.max_distance <= 4096


def fill_mask(mask, *, attn_mask=None, is_causal=False, alignment="top_left",
              key_lengths=None, window=None, sink_tokens=0, alibi_slopes=None, check=True):
    """Fills an attnserve.v1.Mask; returns the explicit mask array (or None)."""
    mask.causal = bool(is_causal)
    mask.alignment = _choice(_ALIGNMENTS, alignment, "mask.alignment",
                             "'top_left' or 'bottom_right'")
    left, right = _window(window)
    if left is not None:
        mask.window_left = int(left)
    if right is not None:
        mask.window_right = int(right)
    mask.sink_tokens = int(sink_tokens)
    if key_lengths is not None:
        mask.key_lengths[:] = [int(n) for n in np.asarray(key_lengths).reshape(-1)]
    if alibi_slopes is not None:
        mask.alibi_slopes[:] = float_list(alibi_slopes)
    if attn_mask is None:
        return None
    m, dtype = _explicit_mask(attn_mask, check)
    T.to_wire(m, dtype, mask.explicit_mask)
    return m


def _fill_block_sparse(bs, spec, check):
    if not isinstance(spec, BlockSparse):
        raise TypeError("block_sparse: expected attnserve.BlockSparse, got "
                        f"{type(spec).__name__}")
    bs.block_size = int(spec.block_size)
    if spec.local_left is not None:
        bs.local_left = int(spec.local_left)
    if spec.local_right is not None:
        bs.local_right = int(spec.local_right)
    bs.stride = int(spec.stride)
    bs.stride_pattern = _choice(_STRIDE_PATTERNS, spec.stride_pattern,
                                "mask.block_sparse.stride_pattern", "'strided' or 'fixed'")
    bs.random_blocks = int(spec.random_blocks)
    bs.seed = int(spec.seed)
    bs.global_tokens[:] = [int(t) for t in spec.global_tokens]
    if spec.block_mask is not None:
        m = T.as_array(spec.block_mask)
        d = T.dtype_of(m)
        if check and d is not T.BOOL:
            name = d.wire_name if d is not None else T.source_dtype_name(m)
            raise InvalidArgument(f"mask.block_sparse.block_mask.dtype: {name} is not "
                                  "supported (expected BOOL)")
        if d is None:
            raise InvalidArgument(f"mask.block_sparse.block_mask.dtype: "
                                  f"{T.source_dtype_name(m)} is not supported (expected BOOL)")
        T.to_wire(m, d, bs.block_mask)


def _check_block_sparse(bs, q_len, k_len):
    def bad(field, what):
        raise InvalidArgument(f"mask.block_sparse.{field}: {what}")

    size = bs.block_size
    if size < 1 or size > 4096:
        bad("block_size", f"must be in [1, 4096], got {size}")
    nqb, nkb = -(-q_len // size), -(-k_len // size)
    if nqb * nkb > _MAX_BLOCK_PAIRS:
        bad("block_size", f"{size} cuts Lq = {q_len} and Lk = {k_len} into {nqb} x {nkb} "
            f"blocks, more than {_MAX_BLOCK_PAIRS}; use larger blocks")
    for field in ("local_left", "local_right"):
        if bs.HasField(field) and getattr(bs, field) < 0:
            bad(field, f"must be >= 0, got {getattr(bs, field)}")
    if bs.stride < 0:
        bad("stride", f"must be >= 0, got {bs.stride}")
    if bs.random_blocks < 0:
        bad("random_blocks", f"must be >= 0, got {bs.random_blocks}")
    max_token = max(q_len, k_len)
    for t, g in enumerate(bs.global_tokens):
        if g < 0 or g >= max_token:
            bad(f"global_tokens[{t}]", f"{g} is out of range [0, max(Lq, Lk) = {max_token})")
        if t > 0 and g <= bs.global_tokens[t - 1]:
            bad(f"global_tokens[{t}]", f"{g} does not exceed the previous entry "
                f"{bs.global_tokens[t - 1]} (entries must be strictly increasing)")
    if bs.HasField("block_mask") and list(bs.block_mask.shape) != [nqb, nkb]:
        bad("block_mask", f"shape {shape_text(bs.block_mask.shape)} does not match "
            f"{shape_text([nqb, nkb])} (ceil(Lq / block_size), ceil(Lk / block_size))")
    local = bs.HasField("local_left") or bs.HasField("local_right")
    if not (local or bs.stride or bs.random_blocks or len(bs.global_tokens)
            or bs.HasField("block_mask")):
        raise InvalidArgument(
            "mask.block_sparse: the layout has no component (give local_left / "
            "local_right, stride, random_blocks, global_tokens or block_mask)")


def _check_softmax_only(req, why):
    """The server's refusal of what only softmax attention has, in its order."""
    mask = req.mask
    if mask.HasField("window_left") or mask.HasField("window_right"):
        raise InvalidArgument("mask.window_left/window_right: a sliding window" + why)
    if mask.HasField("explicit_mask"):
        raise InvalidArgument("mask.explicit_mask: an explicit mask" + why)
    if len(mask.alibi_slopes):
        raise InvalidArgument("mask.alibi_slopes: ALiBi" + why)
    # A relative bias is valid here: _check_attend_shapes leaves a bad one (and
    # all after it) to the server, which names its value before the method.
    if mask.HasField("relative_bias"):
        raise InvalidArgument("mask.relative_bias: a relative position bias" + why)
    if mask.HasField("relative_keys"):
        raise InvalidArgument("mask.relative_keys: relative position keys" + why)
    if mask.HasField("block_sparse"):
        raise InvalidArgument("mask.block_sparse: a block-sparse layout" + why)
    # The server checks softcap's and sinks' values before the method: an
    # invalid one is left to it, and it names the value.
    if req.HasField("softcap") and math.isfinite(req.softcap) and req.softcap > 0:
        raise InvalidArgument("softcap: logit soft-capping" + why)
    if len(req.sinks) and all(math.isfinite(s) for s in req.sinks):
        raise InvalidArgument("sinks: attention sinks" + why)


def _fill_linear(msg, spec, check):
    if not isinstance(spec, LinearAttention):
        raise TypeError(f"linear: expected attnserve.LinearAttention, got {type(spec).__name__}")
    msg.feature_map = _choice(_FEATURE_MAPS, spec.feature_map, "linear.feature_map",
                              "'elu_plus_one', 'relu' or 'favor_plus'")
    msg.num_features = int(spec.num_features)
    msg.seed = int(spec.seed)
    if check and msg.feature_map == pb.FAVOR_PLUS and not 1 <= msg.num_features <= 4096:
        raise InvalidArgument("linear.num_features: must be in [1, 4096] for FAVOR+, "
                              f"got {msg.num_features}")


def _fill_lsh(msg, spec, check):
    if not isinstance(spec, LshAttention):
        raise TypeError(f"lsh: expected attnserve.LshAttention, got {type(spec).__name__}")
    msg.num_hashes, msg.num_buckets = int(spec.num_hashes), int(spec.num_buckets)
    msg.chunk_size, msg.seed = int(spec.chunk_size), int(spec.seed)
    if not check:
        return
    if not 1 <= msg.num_hashes <= 64:
        raise InvalidArgument(f"lsh.num_hashes: must be in [1, 64], got {msg.num_hashes}")
    nb = msg.num_buckets
    if nb != 1 and (nb < 2 or nb > 4096 or nb % 2):
        raise InvalidArgument(f"lsh.num_buckets: must be 1 or even in [2, 4096], got {nb}")
    if not 1 <= msg.chunk_size <= 65536:
        raise InvalidArgument(f"lsh.chunk_size: must be in [1, 65536], got {msg.chunk_size}")


def _check_attend_shapes(req, q_shape, k_shape, v_shape, layout, lsh, enable_gqa=True):
    """The engine's shape rules (core/problem.cc), in its order and words, and
    SDPA's enable_gqa=False (a client-side rule: the server groups heads)."""
    bhld = layout == pb.BHLD
    h_axis, l_axis = (1, 2) if bhld else (2, 1)
    layout_name = "BHLD" if bhld else "BLHD"
    b, hq, lq, d = q_shape[0], q_shape[h_axis], q_shape[l_axis], q_shape[3]
    hkv, lk, dv = k_shape[h_axis], k_shape[l_axis], v_shape[3]

    def expected(h, length, dim):
        return shape_text([b, h, length, dim] if bhld else [b, length, h, dim])

    if not 1 <= d <= 576:
        raise InvalidArgument(f"query: head dimension D = {d} is out of range [1, 576]")
    if not 1 <= dv <= 512:
        raise InvalidArgument(f"value: head dimension Dv = {dv} is out of range [1, 512]")
    if hkv < 1:
        raise InvalidArgument(f"key: number of kv heads must be at least 1, got {hkv} "
                              f"(shape {shape_text(k_shape)})")
    if k_shape[0] != b or k_shape[3] != d:
        raise InvalidArgument(f"key: shape {shape_text(k_shape)} does not match query shape "
                              f"{shape_text(q_shape)} in layout {layout_name} (expected "
                              f"{expected(hkv, lk, d)})")
    if v_shape[0] != b or v_shape[h_axis] != hkv or v_shape[l_axis] != lk:
        if lsh:
            raise InvalidArgument(
                "value: LSH attention takes its keys from the queries, so value needs the "
                f"query's batch, heads and length: expected {expected(hkv, lk, dv)}, got "
                f"{shape_text(v_shape)}")
        raise InvalidArgument(f"value: shape {shape_text(v_shape)} does not match key shape "
                              f"{shape_text(k_shape)} in layout {layout_name} (expected "
                              f"{expected(hkv, lk, dv)})")
    if not enable_gqa and hq != hkv:
        raise InvalidArgument(f"query heads Hq = {hq} differ from key/value heads Hkv = {hkv}, "
                              "and enable_gqa is False: pass enable_gqa=True for grouped-query "
                              "attention (as in torch's scaled_dot_product_attention)")
    if hq % hkv:
        raise InvalidArgument(f"query heads Hq = {hq} is not a multiple of key/value heads "
                              f"Hkv = {hkv} (Hq % Hkv must be 0)")
    if len(req.sinks) and len(req.sinks) != hq:
        raise InvalidArgument(f"sinks: expected {hq} entries (one per query head), got "
                              f"{len(req.sinks)}")
    mask = req.mask
    if len(mask.key_lengths) and len(mask.key_lengths) != b:
        raise InvalidArgument(f"mask.key_lengths: expected {b} entries (one per batch), "
                              f"got {len(mask.key_lengths)}")
    if mask.HasField("explicit_mask"):
        full = [b, hq, lq, lk]
        m_shape = list(mask.explicit_mask.shape)
        for i, dim in enumerate(m_shape):
            target = full[4 - len(m_shape) + i]
            if dim != 1 and dim != target:
                raise InvalidArgument(
                    f"mask: shape {shape_text(m_shape)} is not broadcastable to "
                    f"{shape_text(full)} (dimension {i} is {dim}, expected 1 or {target})")
    if len(mask.alibi_slopes) and len(mask.alibi_slopes) != hq:
        raise InvalidArgument(f"mask.alibi_slopes: expected {hq} entries (one per query "
                              f"head), got {len(mask.alibi_slopes)}")
    if mask.HasField("relative_bias"):
        rb = mask.relative_bias
        # The server checks num_buckets and max_distance, then the table's size,
        # then its values, before the rest of the mask and the method: the
        # values are left to it, and so is all that follows a bad one.
        if not _relative_bias_in_range(rb):
            return
        entries = hq * rb.num_buckets
        if len(rb.table) != entries:
            raise InvalidArgument(f"mask.relative_bias.table: expected Hq × num_buckets = {hq} "
                                  f"× {rb.num_buckets} = {entries} entries, got "
                                  f"{len(rb.table)}")
        if not np.isfinite(np.asarray(rb.table, np.float32)).all():
            return
    if mask.HasField("relative_keys") and not _check_relative_keys(mask.relative_keys,
                                                                   hq, d):
        return
    if mask.HasField("block_sparse"):
        _check_block_sparse(mask.block_sparse, lq, lk)
    if req.HasField("linear"):
        _check_softmax_only(req, _LINEAR_WHY)
    if req.HasField("lsh"):
        _check_softmax_only(req, _LSH_WHY)


def output_dtype_wire(output_dtype):
    d = T.dtype_named(output_dtype, "output_dtype")
    return pb.DATA_TYPE_UNSPECIFIED if d is None else d.wire


def check_dropout(dropout_p):
    """SDPA's dropout_p: only 0 (attention here is inference-only)."""
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        raise TypeError(f"dropout_p: expected a number, got {type(dropout_p).__name__}") from None
    if p != 0.0:
        raise InvalidArgument(
            f"dropout_p: must be 0, got {dropout_p}: attention here is inference-only and "
            "applies no dropout (pass dropout_p=0.0, e.g. `p if self.training else 0.0`)")


def attend_request(query, key, value, *, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=True, key_lengths=None, window=None,
                   sink_tokens=0, alibi_slopes=None, softcap=None, sinks=None,
                   relative_bias=None, relative_keys=None, alignment="top_left", layout="BHLD",
                   return_weights=False, return_weight_stats=False, output_dtype=None,
                   block_sparse=None, linear=None, lsh=None, request_id="", check=True):
    """(AttendRequest, kind of the query)."""
    check_dropout(dropout_p)
    req = pb.AttendRequest(request_id=request_id)
    req.layout = _choice(_LAYOUTS, layout, "layout", "'BHLD' or 'BLHD'")
    if linear is not None and lsh is not None:
        raise InvalidArgument("linear, lsh: one method per request (AttendRequest.method "
                              "is a oneof)")
    q, qd = float_operand("query", query, _axes("query", req.layout), check=check)
    shared = ("query", qd, "query, key and value must share one dtype")
    to_check = [("query", q)]
    kd = None
    if lsh is not None:
        if key is not None and check:
            raise InvalidArgument("key: LSH attention shares queries and keys (Reformer's "
                                  "shared-QK); send no key")
    else:
        key, kd = float_operand("key", key, _axes("key", req.layout), shared, check)
        to_check.append(("key", key))
    value, vd = float_operand("value", value, _axes("value", req.layout), shared, check)
    to_check.append(("value", value))
    if check:
        for name, x in to_check:
            if len(x.shape) != 4:
                raise InvalidArgument(
                    f"{name}.shape: expected rank 4 {_axes(name, req.layout)}, got rank "
                    f"{len(x.shape)} (shape {shape_text(x.shape)})")
    _operand_to_wire(q, qd, req.query, "query")
    if key is not None:
        if kd is None:  # an unchecked LSH request that sends a key anyway
            kd = key.dtype if isinstance(key, S.SharedTensor) else T.dtype_of(key)
        _operand_to_wire(key, kd, req.key, "key")
    _operand_to_wire(value, vd, req.value, "value")
    fill_mask(req.mask, attn_mask=attn_mask, is_causal=is_causal, alignment=alignment,
              key_lengths=key_lengths, window=window, sink_tokens=sink_tokens,
              alibi_slopes=alibi_slopes, check=check)
    if relative_bias is not None:
        req.mask.relative_bias.CopyFrom(relative_bias_message(relative_bias, check=check))
    if relative_keys is not None:
        relative_keys_message(relative_keys, req.mask.relative_keys)
    if block_sparse is not None:
        _fill_block_sparse(req.mask.block_sparse, block_sparse, check)
    if linear is not None:
        _fill_linear(req.linear, linear, check)
    if lsh is not None:
        _fill_lsh(req.lsh, lsh, check)
    if scale is not None:
        req.scale = float(scale)
    if softcap is not None:
        req.softcap = float(softcap)
    if sinks is not None:
        req.sinks[:] = float_list(sinks)
    req.return_weights = bool(return_weights)
    req.return_weight_stats = bool(return_weight_stats)
    req.output_dtype = output_dtype_wire(output_dtype)
    if check:
        q_shape = T.shape_of(q)
        k_shape = q_shape if lsh is not None else T.shape_of(key)
        _check_attend_shapes(req, q_shape, k_shape, T.shape_of(value), req.layout,
                             lsh is not None, bool(enable_gqa))
    return req, (q.kind if isinstance(q, S.SharedTensor) else T.kind_of(q))


def _operand_to_wire(x, dtype, out, field):
    if isinstance(x, S.SharedTensor):  # a reference instead of the bytes
        out.dtype = dtype.wire
        out.shape[:] = x.shape
        out.shared_memory.CopyFrom(x.ref(f"{field}.shared_memory"))
    else:
        T.to_wire(x, dtype, out)


def shared_attend_request(query, key, value, *, shared_memory=None, out=None, **kw):
    """(AttendRequest, kind, Placement or None): attend_request with tensors in
    shared memory. With a region in `shared_memory`, array operands are copied
    into it for this call; SharedTensor operands (region.put) travel as
    references in any case. The output (and weights) are written into `out` or
    into spans of the region (shared_memory's, else the first SharedTensor's)
    that decode_attend copies out; without either, this is attend_request."""
    region = shared_memory
    if region is None:
        region = next((x.region for x in (query, key, value, out)
                       if isinstance(x, S.SharedTensor)), None)
    if region is None:
        req, kind = attend_request(query, key, value, **kw)
        return req, kind, None
    placed = S.Placement(region)
    try:
        operands = [query, key, value]
        if shared_memory is not None:
            region._check_open("shared_memory")
            layout = _choice(_LAYOUTS, kw.get("layout", "BHLD"), "layout", "'BHLD' or 'BLHD'")
            for i, name in enumerate(("query", "key", "value")):
                x = operands[i]
                if x is not None and not isinstance(x, S.SharedTensor):
                    x, _ = float_operand(name, x, _axes(name, layout), check=False)
                    operands[i] = placed.put(x, name)
        req, kind = attend_request(*operands, **kw)
        place_attend_outputs(req, placed, out)
        return req, kind, placed
    except BaseException:
        placed.release()
        raise


def attend_output_shapes(req):
    """(output shape, output DType, weights shape or None) of a checked
    AttendRequest: [B, Hq, Lq, Dv] in its layout and [B, Hq, Lq, Lk] float32."""
    q, v = list(req.query.shape), list(req.value.shape)
    bhld = req.layout == pb.BHLD
    h_axis, l_axis = (1, 2) if bhld else (2, 1)
    out_dtype = T.dtype_of_wire(req.output_dtype or req.query.dtype, "output_dtype")
    weights = ([q[0], q[h_axis], q[l_axis], v[l_axis]] if req.return_weights else None)
    return q[:3] + [v[3]], out_dtype, weights


def place_attend_outputs(req, placed, out):
    shape, dtype, weights = attend_output_shapes(req)
    if out is not None:
        if not isinstance(out, S.SharedTensor):
            raise TypeError("out: expected a SharedTensor (region.empty(shape, dtype)), got "
                            f"{type(out).__name__}")
        if out.dtype is not dtype or list(out.shape) != shape:
            raise InvalidArgument(
                f"out: shape {shape_text(out.shape)} of {out.dtype.short} does not match "
                f"the output's {shape_text(shape)} of {dtype.short}")
    req.output_shared_memory.CopyFrom(placed.output("output", shape, dtype, out))
    if weights is not None:
        req.weights_shared_memory.CopyFrom(placed.output("weights", weights, T.FLOAT32))


# Requests larger than one piece go in pieces of this size (AttendPieces), so
# that no message passes the server's --max_message_bytes and the server admits
# the call before the rest is sent; the C++ client's wire::kRequestPieceBytes.
PIECE_BYTES = 1 << 20


class RequestPieces:
    """A serialized AttendRequest as the RequestPiece messages of AttendPieces.
    iter() of it starts again from the first piece: a retried call (the
    clients' _call) sends them all again."""

    def __init__(self, data):
        self._data = memoryview(data)
        self._at = 0

    def __iter__(self):
        self._at = 0
        return self

    def __next__(self):
        at = self._at
        if at >= len(self._data):
            raise StopIteration
        self._at = at + PIECE_BYTES
        piece = pb.RequestPiece(data=bytes(self._data[at:self._at]))
        if at == 0:
            piece.request_bytes = len(self._data)
        return piece


def fresh(request):
    """A call's request for one attempt: pieces start again from the first."""
    return iter(request) if isinstance(request, RequestPieces) else request


def attend_call(stub, req):
    """The (method, request) of one Attend call on `stub`: one message when the
    request fits in a piece, else AttendPieces."""
    if req.ByteSize() <= PIECE_BYTES:
        return stub.Attend, req
    return stub.AttendPieces, RequestPieces(req.SerializeToString())


def append_chunk_tokens(req, tokens, limits):
    """None when the AppendKvRequest `req` of `tokens` new tokens fits in one
    message of the server (`limits`: its ServerInfo, max_message_bytes; None =
    not known); else how many tokens a chunk of an AppendKvStream may hold."""
    limit = getattr(limits, "max_message_bytes", 0) if limits is not None else 0
    room = limit - RESPONSE_ENVELOPE_BYTES  # the fields around the tensors
    size = req.ByteSize()
    if not limit or size <= room or tokens < 2:
        return None
    return max(1, room * tokens // size)


@contextlib.contextmanager
def released(placed):
    """Frees a call's shared-memory spans (shared_attend_request's Placement;
    None: nothing to free) when the block ends, passing release the error
    that ended it, if any."""
    error = None
    try:
        yield
    except Error as e:
        error = e
        raise
    finally:
        if placed is not None:
            placed.release(error)


def decode_attend(response, kind, return_weights, placed=None):
    """The result of an AttendResponse; `placed` reads what the server wrote in
    shared memory (shared_attend_request's Placement)."""
    if placed is not None:
        out = placed.collect(response.output, "output", kind)
        weights = (placed.collect(response.weights, "weights", kind)
                   if return_weights else None)
    else:
        out = T.from_wire(response.output, kind)
        weights = T.from_wire(response.weights, kind, "weights") if return_weights else None
    return _result(out, weights, response, kind)


def _result(out, weights, message, kind):
    """out, or (out[, weights][, WeightStats]) with what the call asked for
    (the weight statistics when the message carries them)."""
    parts = [out]
    if weights is not None:
        parts.append(weights)
    if message.HasField("entropy"):
        parts.append(WeightStats(T.from_wire(message.entropy, kind, "entropy"),
                                 T.from_wire(message.max_weight, kind, "max_weight")))
    return parts[0] if len(parts) == 1 else tuple(parts)


def model_request(model, hidden, memory=None, *, attn_mask=None, is_causal=False,
                  alignment="top_left", key_lengths=None, window=None, alibi_slopes=None,
                  positions=None, return_weights=False, output_dtype=None, request_id=""):
    """(ModelRequest, kind of the hidden states). Shapes against d_model are the
    server's to check: it holds the model."""
    req = pb.ModelRequest(request_id=request_id, model=model)
    h, hd = float_operand("hidden", hidden, "[B, Lq, d_model]")
    T.to_wire(h, hd, req.hidden)
    if memory is not None:
        m, _ = float_operand("memory", memory, "[B, Lk, d_model]",
                             ("hidden", hd))
        T.to_wire(m, hd, req.memory)
    fill_mask(req.mask, attn_mask=attn_mask, is_causal=is_causal, alignment=alignment,
              key_lengths=key_lengths, window=window, alibi_slopes=alibi_slopes)
    if positions is not None:
        p = T.as_array(positions)
        p = p.to(T.torch.int32) if T.is_torch(p) else np.asarray(p, np.int32)
        T.to_wire(p, T.INT32, req.positions)
    req.return_weights = bool(return_weights)
    req.output_dtype = output_dtype_wire(output_dtype)
    return req, T.kind_of(h)


# --- sessions ------------------------------------------------------------------------

def _storage_is_int8(spec):
    if isinstance(spec, str):
        return spec.lower() == "int8"
    if T.torch is not None and isinstance(spec, T.torch.dtype):
        return spec == T.torch.int8
    try:
        return np.dtype(spec) == np.int8
    except TypeError:
        return False


def storage_dtype_wire(spec):
    """A session's storage dtype: a float dtype as dtype_named takes, or int8
    ("int8", np.int8, torch.int8)."""
    if _storage_is_int8(spec):
        return pb.INT8
    try:
        return T.dtype_named(spec, "shape.storage_dtype").wire
    except InvalidArgument:
        raise InvalidArgument(f"shape.storage_dtype: {spec} is not supported (expected "
                              "float32, bfloat16, float16 or int8)") from None


def storage_dtype_name(wire):
    """The Python name of a SessionShape.storage_dtype ("float32", ..., "int8")."""
    if wire == pb.INT8:
        return "int8"
    return T.dtype_named(pb.DataType.Name(wire).lower() if wire else "float32",
                         "storage_dtype").name


def session_shape(num_kv_heads, head_dim, *, num_layers=1, value_dim=0,
                  storage_dtype="float32", max_tokens=1 << 24, window_tokens=0,
                  sink_tokens=0):
    return spb.SessionShape(num_layers=int(num_layers), num_kv_heads=int(num_kv_heads),
                            head_dim=int(head_dim), value_dim=int(value_dim),
                            storage_dtype=storage_dtype_wire(storage_dtype),
                            max_tokens=int(max_tokens), window_tokens=int(window_tokens),
                            sink_tokens=int(sink_tokens))


def ttl_ms(ttl):
    """Seconds (float) -> ms; None = the server's default."""
    return 0 if ttl is None else int(round(ttl * 1000))


def session_info(msg):
    s = msg.shape
    return SessionInfo(
        session_id=msg.session_id,
        shape=SessionShape(s.num_layers, s.num_kv_heads, s.head_dim, s.value_dim,
                           storage_dtype_name(s.storage_dtype), s.max_tokens,
                           s.window_tokens, s.sink_tokens),
        layer_tokens=tuple(msg.layer_tokens), kv_bytes=msg.kv_bytes, ttl_ms=msg.ttl_ms,
        idle_ms=msg.idle_ms, created=msg.created, parent_id=msg.parent_id)


def _session_tensor(name, x, axes, out):
    x, d = float_operand(name, x, axes)
    T.to_wire(x, d, out)
    return x


def append_request(session_id, layer, key, value, position=None):
    req = spb.AppendKvRequest(session_id=session_id, layer=int(layer))
    if position is not None:
        req.position = int(position)
    _session_tensor("key", key, "[Lnew, num_kv_heads, head_dim]", req.key)
    _session_tensor("value", value, "[Lnew, num_kv_heads, value_dim]", req.value)
    return req


def session_query(part, at, session_id, query, key=None, value=None, position=None):
    """Fills SessionQuery `part` (field prefix `at`, e.g. "sessions[0]."); the kind."""
    part.session_id = session_id
    q = _session_tensor(at + "query", query, "[Lnew, Hq, head_dim]", part.query)
    if len(q.shape) != 3 or q.shape[0] < 1:
        raise InvalidArgument(f"{at}query.shape: expected [Lnew, Hq, head_dim] with "
                              f"Lnew >= 1, got {shape_text(q.shape)}")
    if (key is None) != (value is None):
        raise InvalidArgument(f"{at}key, {at}value: send both new keys and values, or "
                              "neither")
    if key is not None:
        _session_tensor(at + "key", key, "[Lnew, num_kv_heads, head_dim]", part.key)
        _session_tensor(at + "value", value, "[Lnew, num_kv_heads, value_dim]", part.value)
    if position is not None:
        part.position = int(position)
    return T.kind_of(q)


def attend_sessions_request(layer, parts, *, causal=True, window_left=None,
                            alibi_slopes=None, scale=None, softcap=None, sinks=None,
                            relative_bias=None, return_weights=False,
                            return_weight_stats=False, output_dtype=None, request_id="",
                            relative_keys=None):
    """parts: (session_id, query, key, value, position) tuples. (request, kinds)."""
    req = spb.AttendSessionsRequest(request_id=request_id, layer=int(layer))
    kinds = [session_query(req.sessions.add(), f"sessions[{i}].", *p)
             for i, p in enumerate(parts)]
    req.causal = bool(causal)
    if window_left is not None:
        req.window_left = int(window_left)
    if alibi_slopes is not None:
        req.alibi_slopes[:] = float_list(alibi_slopes)
    if scale is not None:
        if not math.isfinite(float(scale)):
            raise InvalidArgument(f"scale: {float(scale)} is not finite")
        req.scale = float(scale)
    if softcap is not None:
        req.softcap = float(softcap)
    if sinks is not None:
        req.sinks[:] = float_list(sinks)
    if relative_bias is not None:
        req.relative_bias.CopyFrom(relative_bias_message(relative_bias, "relative_bias"))
    if relative_keys is not None:
        relative_keys_message(relative_keys, req.relative_keys)
    req.return_weights = bool(return_weights)
    req.return_weight_stats = bool(return_weight_stats)
    req.output_dtype = output_dtype_wire(output_dtype)
    return req, kinds


def decode_session_results(response, kinds, return_weights):
    return [_result(T.from_wire(r.output, kind),
                    T.from_wire(r.weights, kind, "weights") if return_weights else None,
                    r, kind)
            for r, kind in zip(response.results, kinds)]
