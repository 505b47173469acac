"""Plain values the client takes and returns (the wire messages stay inside)."""

import dataclasses
import json
from typing import NamedTuple, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class BlockSparse:
    """Mask.block_sparse: a block-sparse layout (softmax attention only).

    Blocks are block_size query rows x block_size keys; a block is kept when any
    component keeps it: the local band (local_left/local_right blocks around the
    diagonal block), the stride pattern ("strided" or "fixed"), random_blocks per
    query block drawn from seed, global_tokens, or block_mask (bool
    [ceil(Lq / block_size), ceil(Lk / block_size)], True = keep).
    """

    block_size: int
    local_left: Optional[int] = None
    local_right: Optional[int] = None
    stride: int = 0
    stride_pattern: str = "strided"
    random_blocks: int = 0
    seed: int = 0
    global_tokens: Sequence[int] = ()
    block_mask: object = None


@dataclasses.dataclass(frozen=True, eq=False)
class RelativeBias:
    """Mask.relative_bias: T5's bucketed relative position bias (softmax attention only).

    Adds table[h, b] to the scaled scores of head h, b the bucket of the key's
    relative position j - d(i) as T5's _relative_position_bucket computes it.
    table: [Hq, num_buckets] (or flat) finite values, a list, NumPy array or torch
    tensor: T5's relative_attention_bias.weight ([num_buckets, Hq]) transposed,
    e.g. layer.relative_attention_bias.weight.T. num_buckets: T5 uses 32;
    max_distance: T5's relative_attention_max_distance (128); bidirectional: True
    for T5's encoder, False for its decoder. T5 scales no scores: pass scale=1.0.
    """

    table: object
    num_buckets: int
    max_distance: int = 128
    bidirectional: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class RelativeKeys:
    """Mask.relative_keys: relative position keys (softmax attention only).

    Adds scale · (q_i + query_bias[h]) · table[h, t] to the scaled score of query
    row i and key j of head h, t = clamp(d(i) - j + zero_row, 0, rows - 1): row t
    of the table is the key of relative distance d(i) - j = t - zero_row.
    table: float32 [heads, rows, D] (heads 1, shared, or Hq), a NumPy array or
    torch tensor; query_bias: None or [Hq, D].
    Transformer-XL: send q + u as the query, table[h, t] = (W_R·R_t) of head h for
    distances t = 0, 1, ... (zero_row 0) and query_bias = v - u. Shaw et al. with
    distances clipped to ±K: a shared table of 2K + 1 rows, zero_row K.
    """

    table: object
    zero_row: int = 0
    query_bias: object = None


@dataclasses.dataclass(frozen=True)
class LinearAttention:
    """AttendRequest.linear: feature_map "elu_plus_one", "relu" or "favor_plus"
    (num_features random features drawn from seed)."""

    feature_map: str = "elu_plus_one"
    num_features: int = 0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class LshAttention:
    """AttendRequest.lsh: Reformer's shared-QK LSH attention (send no key)."""

    num_hashes: int = 1
    num_buckets: int = 2
    chunk_size: int = 64
    seed: int = 0


class WeightStats(NamedTuple):
    """Per query row, what its attention weights come to, without the weights
    (return_weight_stats=True): entropy -sum_j w_j ln w_j in nats (ln of the
    allowed keys when uniform, 0 when one key takes all) and max_weight, the
    largest weight; both [B, Hq, Lq] for attend, [Hq, Lnew] for a session step,
    0 and 0 for a row with no allowed key."""

    entropy: object
    max_weight: object


@dataclasses.dataclass(frozen=True)
class Timing:
    queue_us: int
    compute_us: int
    total_us: int
    flops: float

    @classmethod
    def from_proto(cls, t):
        return cls(t.queue_us, t.compute_us, t.total_us, t.flops)


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    name: str
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    config: dict

    @classmethod
    def from_proto(cls, m):
        return cls(m.name, m.d_model, m.num_heads, m.num_kv_heads, m.head_dim,
                   json.loads(m.config_json) if m.config_json else {})


@dataclasses.dataclass(frozen=True)
class SessionLimits:
    kv_cache_bytes: int
    block_tokens: int
    eviction: str
    default_ttl_ms: int
    max_ttl_ms: int
    max_sessions: int
    live_sessions: int
    kv_bytes_used: int

    @classmethod
    def from_proto(cls, s):
        return cls(s.kv_cache_bytes, s.block_tokens, s.eviction, s.default_ttl_ms,
                   s.max_ttl_ms, s.max_sessions, s.live_sessions, s.kv_bytes_used)


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    version: str
    onednn_version: str
    isa: str
    workers: int
    threads_per_worker: int
    max_queue: int
    max_request_bytes: int
    max_response_bytes: int
    models: Tuple[ModelInfo, ...]
    sessions: SessionLimits

    @classmethod
    def from_proto(cls, i):
        return cls(i.version, i.onednn_version, i.isa, i.workers,
                   i.threads_per_worker, i.max_queue, i.max_request_bytes,
                   i.max_response_bytes,
                   tuple(ModelInfo.from_proto(m) for m in i.models),
                   SessionLimits.from_proto(i.sessions))


@dataclasses.dataclass(frozen=True)
class SessionShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    value_dim: int
    storage_dtype: str
    max_tokens: int
    # A sink + window session (window_tokens > 0): each layer keeps its first
    # sink_tokens tokens and its last window_tokens.
    window_tokens: int = 0
    sink_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class SessionInfo:
    session_id: str
    shape: SessionShape
    layer_tokens: Tuple[int, ...]
    kv_bytes: int
    ttl_ms: int
    idle_ms: int
    created: bool
    parent_id: str


@dataclasses.dataclass(frozen=True)
class SharedMemoryRegionInfo:
    """A region the server has registered (SharedMemoryService.Status)."""

    name: str
    key: str
    byte_size: int
    calls: int  # Attend calls that referred to it

    @classmethod
    def from_proto(cls, r):
        return cls(r.name, r.key, r.byte_size, r.calls)


@dataclasses.dataclass(frozen=True)
class SharedMemoryStatus:
    """The server's registered regions, its --shared_memory_prefix and limits."""

    regions: Tuple[SharedMemoryRegionInfo, ...]
    prefix: str
    max_regions: int
    max_bytes: int

    @classmethod
    def from_proto(cls, m):
        return cls(tuple(SharedMemoryRegionInfo.from_proto(r) for r in m.regions),
                   m.prefix, m.max_regions, m.max_bytes)
