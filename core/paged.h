#ifndef ATTNSERVE_CORE_PAGED_H_
#define ATTNSERVE_CORE_PAGED_H_

// Attention over a paged KV cache (the server's KV-cache sessions): each
// sequence's keys and values live in fixed-size blocks that the decode kernel
// reads in place, and a batch of sequences of different lengths is one run
// (AttentionEngine::RunPaged).

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "core/tensor.h"

namespace attnserve {

// One sequence's cache. Block i holds tokens [i·T, (i+1)·T) (T =
// PagedAttentionInputs::block_tokens) of every kv head, laid out as
//   keys   [Hkv][T][D]  from the block's start,
//   values [Hkv][T][Dv] right after the keys,
// dense, in PagedAttentionInputs::kv_dtype. Only the first `tokens` tokens are
// read; `blocks` must hold at least ceil(tokens / T) pointers.
struct PagedKv {
  absl::Span<const void* const> blocks;
  int64_t tokens = 0;
};

// One sequence of a paged call: its new queries against its cache.
struct PagedSequence {
  // [Lnew, Hq, D] in kv_dtype, last dimension dense, Lnew >= 1.
  TensorView query;
  PagedKv kv;
  // [Lnew, Hq, Dv] in any float dtype, last dimension dense.
  MutableTensorView output;
  // When present: f32 [Hq, Lnew, tokens], dense. Such a sequence is computed
  // by the materialized kernel over a contiguous copy of its cache (a slower
  // path than the in-place decode kernel).
  std::optional<MutableTensorView> weights;
};

// The query heads a paged call may have: [1, kMaxPagedQueryHeads].
inline constexpr int64_t kMaxPagedQueryHeads = int64_t{1} << 16;

// Exactly the stateless call, per sequence, with query [1, Lnew, Hq, D] and key
// and value [1, tokens, Hkv, ·] (BLHD) and the mask parts below.
struct PagedAttentionInputs {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t value_dim = 0;
  int64_t block_tokens = 0;
  DType kv_dtype = DType::kFloat32;
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
  absl::Span<const PagedSequence> sequences;
};

// Copies a sequence's first kv.tokens tokens into dense `keys`
// [tokens, Hkv, D] and `values` [tokens, Hkv, Dv] (kv_dtype), i.e. the BLHD
// key and value of the equivalent stateless call (batch 1).
void GatherPagedKv(const PagedAttentionInputs& inputs, const PagedKv& kv,
                   void* keys, void* values);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_PAGED_H_
