#ifndef ATTNSERVE_CORE_PAGED_H_
#define ATTNSERVE_CORE_PAGED_H_

// Attention over a paged KV cache (the server's KV-cache sessions): each
// sequence's keys and values live in fixed-size blocks that the decode kernel
// reads in place, and a batch of sequences of different lengths is one run
// (AttentionEngine::RunPaged).

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "core/relative_bias.h"
#include "core/tensor.h"

namespace attnserve {

// The dtype of a paged call's queries, and of the keys and values of its
// stateless equivalent: the cache's own, f32 for an int8 cache.
inline DType PagedOperandDType(DType kv_dtype) {
  return kv_dtype == DType::kInt8 ? DType::kFloat32 : kv_dtype;
}

// Where a block's rows lie, in bytes from the block's start. A block of T
// tokens holds, dense,
//   keys   [Hkv][T][D]  from the block's start,
//   values [Hkv][T][Dv] right after the keys,
// in the cache's dtype (f32, bf16, f16 or int8). An int8 cache then holds
// one f32 scale per stored row,
//   key scales   [Hkv][T]  after the values,
//   value scales [Hkv][T]  after the key scales,
// and an element q of a row reads as q · the row's scale (QuantizeInt8 in
// core/convert.h writes them).
class PagedBlockLayout {
 public:
  PagedBlockLayout() = default;
  PagedBlockLayout(int64_t kv_heads, int64_t head_dim, int64_t value_dim,
                   int64_t block_tokens, DType kv_dtype);

  // Bytes one token takes in a block (all kv heads, scales included).
  static int64_t BytesPerToken(int64_t kv_heads, int64_t head_dim,
                               int64_t value_dim, DType kv_dtype);

  DType dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_; }
  int64_t key(int64_t h, int64_t row) const {
    return (h * tokens_ + row) * key_row_;
  }
  int64_t value(int64_t h, int64_t row) const {
    return values_ + (h * tokens_ + row) * value_row_;
  }
  // Int8 only: the f32 scale of a key's or a value's row.
  int64_t key_scale(int64_t h, int64_t row) const {
    return key_scales_ + (h * tokens_ + row) * int64_t{sizeof(float)};
  }
  int64_t value_scale(int64_t h, int64_t row) const {
    return value_scales_ + (h * tokens_ + row) * int64_t{sizeof(float)};
  }

 private:
  DType dtype_ = DType::kFloat32;
  int64_t tokens_ = 0;
  int64_t key_row_ = 0;
  int64_t value_row_ = 0;
  int64_t values_ = 0;
  int64_t key_scales_ = 0;
  int64_t value_scales_ = 0;
  int64_t bytes_ = 0;
};

// One sequence's cache: block i holds tokens [i·T, (i+1)·T) (T =
// PagedAttentionInputs::block_tokens) as PagedBlockLayout lays them out. Only
// the first `tokens` tokens are read; `blocks` must hold at least
// ceil(tokens / T) - evicted_blocks pointers.
//
// A cache that dropped the middle of its sequence (a sink + window session)
// holds its first kept_blocks blocks, then none of the next evicted_blocks,
// then the rest: `blocks` lists the held ones in order. No key a query may
// attend lies in the dropped blocks (CheckPagedInputs refuses a call where one
// would).
struct PagedKv {
  absl::Span<const void* const> blocks;
  int64_t tokens = 0;
  int64_t kept_blocks = 0;
  int64_t evicted_blocks = 0;
};

// One sequence of a paged call: its new queries against its cache.
struct PagedSequence {
  // [Lnew, Hq, D] in PagedOperandDType(kv_dtype), last dimension dense,
  // Lnew >= 1.
  TensorView query;
  PagedKv kv;
  // [Lnew, Hq, Dv] in any float dtype, last dimension dense.
  MutableTensorView output;
  // When present: f32 [Hq, Lnew, tokens], dense. Such a sequence is computed
  // by the materialized kernel over a contiguous copy of its cache (a slower
  // path than the in-place decode kernel).
  std::optional<MutableTensorView> weights;
  // When present: f32 [Hq, Lnew], dense, each (AttentionOutputs::entropy,
  // ::max_weight).
  std::optional<MutableTensorView> entropy;
  std::optional<MutableTensorView> max_weight;
  // The sequence's own sliding window (a sink + window session): the call's
  // window_left narrowed to window_left, and the first sink_tokens keys
  // exempt from it (MaskSpec::sink_tokens).
  std::optional<int64_t> window_left;
  int64_t sink_tokens = 0;
};

// The query heads a paged call may have: [1, kMaxPagedQueryHeads].
inline constexpr int64_t kMaxPagedQueryHeads = int64_t{1} << 16;

// What a paged call applies to every sequence: its mask and scoring parts.
struct PagedCallOptions {
  // Causal with bottom-right alignment (default): new query i of Lnew sits at
  // position tokens - Lnew + i and sees the keys up to it.
  bool causal = true;
  // Sliding window: keys more than window_left before the query's position
  // are masked. Unset = unbounded.
  std::optional<int64_t> window_left;
  // Empty or [Hq]: ALiBi slopes, as MaskSpec::alibi_slopes.
  absl::Span<const float> alibi_slopes;
  // Default 1/sqrt(D). Must be finite.
  std::optional<float> scale;
  // Logit soft-cap and [Hq] attention sinks, as AttentionInputs' (unset,
  // empty: none).
  std::optional<float> softcap;
  absl::Span<const float> sinks;
  // T5's relative bias, as MaskSpec::relative_bias.
  std::optional<RelativeBiasSpec> relative_bias;
  // Relative position keys, as MaskSpec::relative_keys (distances between
  // stream positions).
  std::optional<RelativeKeysSpec> relative_keys;
};

// Exactly the stateless call, per sequence, with query [1, Lnew, Hq, D] and key
// and value [1, tokens, Hkv, ·] (BLHD) and the call's options.
struct PagedAttentionInputs : PagedCallOptions {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t value_dim = 0;
  int64_t block_tokens = 0;
  // f32, bf16, f16 or int8.
  DType kv_dtype = DType::kFloat32;
  absl::Span<const PagedSequence> sequences;
};

// Copies a sequence's first kv.tokens tokens into dense `keys`
// [tokens, Hkv, D] and `values` [tokens, Hkv, Dv] (in
// PagedOperandDType(kv_dtype): an int8 cache's rows are dequantized; the
// dropped blocks' rows are zeros), i.e. the BLHD key and value of the
// equivalent stateless call (batch 1).
void GatherPagedKv(const PagedAttentionInputs& inputs, const PagedKv& kv,
                   void* keys, void* values);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_PAGED_H_
