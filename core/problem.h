#ifndef ATTNSERVE_CORE_PROBLEM_H_
#define ATTNSERVE_CORE_PROBLEM_H_

// Internal: a validated attention call in one canonical form, with every stride
// in elements over (batch, head, row, column) whatever the layout. Shared by
// the engine's kernels and the reference.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attention.h"
#include "core/block_sparse.h"
#include "core/paged.h"
#include "core/tensor.h"

namespace attnserve {

// Element strides of a 4-D operand seen as [b][h][row][col]; col stride is 1
// for q/k/v/output and may be 0 (broadcast) for the explicit mask.
struct Strides4 {
  int64_t b = 0, h = 0, row = 0, col = 1;
  int64_t offset(int64_t ib, int64_t ih, int64_t ir) const {
    return ib * b + ih * h + ir * row;
  }
};

struct Problem {
  AttentionShape shape;
  DType dtype = DType::kFloat32;  // of query, key and value
  Layout layout = Layout::kBHLD;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  Strides4 q_strides, k_strides, v_strides;
  int64_t group = 1;  // Hq / Hkv
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0 when set (AttentionInputs::softcap)
  // What the softmax passes multiply a row's scores by: the scale, or 1 when
  // VecOps::soft_cap has scaled and capped them already.
  float pass_scale() const { return softcap > 0 ? 1.0f : scale; }
  const float* sinks = nullptr;  // [Hq] or null

  // Mask, resolved.
  bool causal = false;
  int64_t diag_offset = 0;  // d(i) = i + diag_offset
  std::optional<int64_t> window_left, window_right;
  int64_t sink_tokens = 0;               // MaskSpec::sink_tokens
  const int32_t* key_lengths = nullptr;  // [B] or null
  const void* mask = nullptr;            // explicit mask or null
  DType mask_dtype = DType::kBool;
  Strides4 mask_strides;         // broadcast dims have stride 0
  const float* alibi = nullptr;  // [Hq] or null
  // T5's relative bias: table [Hq, num_buckets] or null, and the bucket of
  // each relative position j - d(i) from rel_first to -rel_first (one array
  // for every head: FillBias gathers a row's bias from it); below and above
  // that range every position's bucket is rel_below, rel_above.
  const float* rel_table = nullptr;
  int32_t rel_buckets = 0;
  int64_t rel_first = 0;
  std::vector<int32_t> rel_bucket;
  int32_t rel_below = 0, rel_above = 0;
  // Relative position keys (RelativeKeysSpec): the table, f32 [relk_heads,
  // relk_rows, D] (the caller's bytes, possibly unaligned) or null, and the
  // query bias [Hq, D] or null.
  const void* relk_table = nullptr;
  int64_t relk_heads = 0, relk_rows = 0, relk_zero_row = 0;
  const float* relk_query_bias = nullptr;
  std::shared_ptr<const BlockLayout> block_layout;  // or null

  // Softmax, or a variant (core/variants/) with its parameters as given.
  AttentionMethod method = AttentionMethod::kSoftmax;
  LinearSpec linear;
  LshSpec lsh;

  KernelPath kernel = KernelPath::kAuto;

  // Paged keys and values (AttentionEngine::RunPaged; core/paged.h's block
  // layout): when kv_blocks is set, k and v are unused and the rows of kv
  // head h at tokens [t, block end) start at PagedKeys / PagedValues, in
  // kv_layout's dtype (`dtype` is the queries'; an int8 cache's rows have
  // scales, PagedKeyScales / PagedValueScales). The kernels then take key
  // blocks of block_tokens keys, so none crosses a block.
  const void* const* kv_blocks = nullptr;
  int64_t block_tokens = 0;
  PagedBlockLayout kv_layout;
  // PagedKv's: blocks from kv_kept_blocks on are kv_blocks[i - evicted].
  int64_t kv_kept_blocks = 0;
  int64_t kv_evicted_blocks = 0;

  const void* PagedKeys(int64_t h, int64_t t) const {
    return PagedAt(t, kv_layout.key(h, t % block_tokens));
  }
  const void* PagedValues(int64_t h, int64_t t) const {
    return PagedAt(t, kv_layout.value(h, t % block_tokens));
  }
  const float* PagedKeyScales(int64_t h, int64_t t) const {
    return static_cast<const float*>(
        PagedAt(t, kv_layout.key_scale(h, t % block_tokens)));
  }
  const float* PagedValueScales(int64_t h, int64_t t) const {
    return static_cast<const float*>(
        PagedAt(t, kv_layout.value_scale(h, t % block_tokens)));
  }
  const void* PagedAt(int64_t t, int64_t offset) const {
    int64_t block = t / block_tokens;
    if (block >= kv_kept_blocks) block -= kv_evicted_blocks;
    return static_cast<const char*>(kv_blocks[block]) + offset;
  }

  // True when some part of the mask is decided per element (explicit, ALiBi,
  // T5's relative bias, relative keys, a block-sparse layout): FillBias then
  // has work to do.
  bool has_elementwise_mask() const {
    return mask != nullptr || alibi != nullptr || rel_table != nullptr ||
           relk_table != nullptr || block_layout != nullptr;
  }
  // Row t of head h's relative keys (f32, possibly unaligned).
  const void* RelativeKey(int64_t h, int64_t t) const {
    const int64_t row = (relk_heads == 1 ? 0 : h) * relk_rows + t;
    return static_cast<const char*>(relk_table) +
           row * shape.head_dim * int64_t{sizeof(float)};
  }
  // The table row of distance d(i) - j.
  int64_t RelativeKeyRow(int64_t distance) const {
    return std::clamp<int64_t>(distance + relk_zero_row, 0, relk_rows - 1);
  }

  // The half-open key interval [lo, hi) that causal, window and key_lengths
  // allow for row i of batch b. Empty (lo >= hi) when no key is allowed.
  void KeyRange(int64_t b, int64_t i, int64_t* lo, int64_t* hi) const {
    const int64_t d = i + diag_offset;
    int64_t l = 0;
    int64_t h = shape.k_len;
    if (key_lengths != nullptr && key_lengths[b] < h) h = key_lengths[b];
    if (causal && d + 1 < h) h = d + 1;
    if (window_right && d + *window_right + 1 < h) h = d + *window_right + 1;
    if (window_left && d - *window_left > l) l = d - *window_left;
    *lo = l;
    *hi = h;
  }
  // The end of row i's second key interval [0, SinkEnd): the first
  // sink_tokens keys that the window's left edge excluded from KeyRange's
  // [lo, hi) and every other part allows. 0 (empty) without sink_tokens.
  int64_t SinkEnd(int64_t lo, int64_t hi) const {
    return std::max<int64_t>(0, std::min({sink_tokens, lo, hi}));
  }
};

// Checks every input and resolves it into a Problem. InvalidArgument naming the
// tensor or field with expected and actual values.
absl::StatusOr<Problem> ResolveProblem(const AttentionInputs& inputs);

// For the methods that take only causal and key_lengths (linear, LSH):
// InvalidArgument naming the first other mask part (or softmax option:
// softcap, sinks) present, e.g. "mask.alibi_slopes: ALiBi" followed by `why`.
absl::Status CheckOnlyCausalAndPadding(const Problem& p, absl::string_view why);

// Checks outputs against a resolved problem and returns the element strides of
// the output over [b][h][row][col] (in the problem's layout).
absl::StatusOr<Strides4> ResolveOutput(const Problem& problem,
                                       const AttentionOutputs& outputs);

// Paged calls (core/paged.h), per sequence as the equivalent stateless call.

// Every shape-level check of a paged call: InvalidArgument naming the field
// ("sequences[2].query", "kv_heads", ...).
absl::Status CheckPagedInputs(const PagedAttentionInputs& inputs);

// Sequence `seq` of `inputs` as a stateless call: query [1, Lnew, Hq, D] and
// key/value [1, tokens, Hkv, ·] (BLHD) over `keys`/`values` — a gathered copy
// — or, when null, placeholders whose shapes only are valid (for
// ResolveProblem before setting Problem::kv_blocks).
AttentionInputs PagedAsStateless(const PagedAttentionInputs& inputs,
                                 const PagedSequence& seq, const void* keys,
                                 const void* values);

// The sequence's output (and weights) as [1, Lnew, Hq, Dv] ([1, Hq, Lnew,
// tokens]) views.
AttentionOutputs PagedOutputs(const PagedSequence& seq);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_PROBLEM_H_
