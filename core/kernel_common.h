#ifndef ATTNSERVE_CORE_KERNEL_COMMON_H_
#define ATTNSERVE_CORE_KERNEL_COMMON_H_

// Internal: what the three kernels (flash, decode, materialized) share: their
// arguments, the per-thread workspace, operand access and the per-row mask.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/matmul.h"
#include "core/problem.h"
#include "core/vec_ops.h"

namespace attnserve {

// A grow-only, 64-byte aligned scratch buffer.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer() { std::free(data_); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  template <typename T>
  T* Get(size_t count) {
    const size_t bytes = ((count * sizeof(T) + 63) / 64) * 64;
    if (bytes > size_) {
      std::free(data_);
      data_ = std::aligned_alloc(64, bytes);
      size_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One thread's resources for a Run; reused across calls (O(tile) memory).
struct Workspace {
  std::unique_ptr<MatmulRunner> matmul;
  ScratchBuffer scores, probs, acc, row_max, row_sum, q, k, v, bias;
  // With row statistics (KernelArgs::row_stats): each row's running
  // sum of exp(s - max)·(s - max), from which StoreRowStats takes the entropy.
  ScratchBuffer row_u;
  std::vector<int64_t> row_head, row_index, row_lo, row_hi;
  std::vector<int64_t> block_starts;  // block-sparse: the blocks of a product
  // Zero-padded copies of a ragged edge's query rows, keys and values.
  ScratchBuffer q_tail, k_tail, v_tail;
  // AMX (amx_products.h): K and V of the key-value head this thread works on
  // packed for the tiles, whole key block by block, reused by the head's
  // query blocks within one Run (RunFlash resets them): block i's at
  // packed_k + i·k_block·D and packed_v + i·k_block·Dv once
  // packed_blocks[i]. Spans that are not whole blocks (the causal diagonal),
  // or heads past kMaxPackedHeadBytes, are packed into span_k / span_v per
  // use.
  const Problem* packed_problem = nullptr;
  int64_t packed_batch = -1, packed_kv_head = -1;
  std::vector<bool> packed_blocks;
  ScratchBuffer packed_k, packed_v, span_k, span_v;
  // The variants' (core/variants/): one converted row; LSH's sort offsets and
  // per-row key limits.
  ScratchBuffer row;
  std::vector<int32_t> offsets, limits;
  absl::Status status;
};

struct KernelArgs {
  const Problem* p = nullptr;
  // Unique to each engine run (never 0): what the kernels keep per thread
  // between rows of one run (relative keys' products) is keyed by it.
  uint64_t run = 0;
  void* out = nullptr;
  DType out_dtype = DType::kFloat32;
  Strides4 out_strides;
  float* weights = nullptr;  // dense [B, Hq, Lq, Lk] or null
  // Dense [B, Hq, Lq] or null (AttentionOutputs::entropy, ::max_weight).
  float* entropy = nullptr;
  float* max_weight = nullptr;
  bool row_stats() const { return entropy != nullptr || max_weight != nullptr; }
  const VecOps* ops = nullptr;
  DType gemm_dtype = DType::kFloat32;  // operand type of the products
  int64_t q_block = 64;
  int64_t k_block = 512;
  int num_threads = 1;
  // bf16 products on our own AMX tiles (amx_products.h) where the flash
  // kernel's tiles allow it (dense layout, q_block a multiple of 16, head
  // dims multiples of 32 and 16, k_block of 32); else oneDNN's.
  bool amx = false;
  // A paged decode of few rows (at most kMaxKvRowsRows per item): its
  // products read the cache's rows in their stored dtype
  // (VecOps::kv_scores, kv_accumulate) instead of GEMMs over converted
  // copies; queries and probabilities are f32 (gemm_dtype kFloat32, no AMX).
  bool kv_rows = false;
};

// The most query rows (new queries × the heads of a GQA group) a paged item
// may have for KernelArgs::kv_rows: the products then stay bound by reading
// the cache; more rows run as GEMMs.
inline constexpr int64_t kMaxKvRowsRows = 16;

// What a variant kernel (core/variants/) gets from the engine: its vectorized
// code, one workspace per thread of the call (each with a runner of the
// engine's matmul primitive cache), and the product operand type the engine's
// kernels would use (bf16 for bf16 inputs where oneDNN has bf16 matmuls, else
// f32).
struct VariantContext {
  const VecOps* ops = nullptr;
  absl::Span<Workspace* const> ws;
  DType gemm_dtype = DType::kFloat32;
  int num_threads() const { return static_cast<int>(ws.size()); }
};

absl::Status RunFlash(const KernelArgs& args, absl::Span<Workspace* const> ws);
// The flash kernel over several calls at once, one parallel region over every
// call's tiles; each call's results are those of its own RunFlash.
absl::Status RunFlashBatch(absl::Span<const KernelArgs> calls,
                           absl::Span<Workspace* const> ws);
absl::Status RunDecode(const KernelArgs& args, absl::Span<Workspace* const> ws);
// The decode kernel over several calls at once (one per sequence of a paged
// batch): one parallel region over every call's (batch, kv head, row chunk,
// key split) items, then one over the merges. The calls share num_threads.
absl::Status RunDecodeBatch(absl::Span<const KernelArgs> calls,
                            absl::Span<Workspace* const> ws);
absl::Status RunMaterialized(const KernelArgs& args,
                             absl::Span<Workspace* const> ws);
// As RunFlashBatch, for the materialized kernel.
absl::Status RunMaterializedBatch(absl::Span<const KernelArgs> calls,
                                  absl::Span<Workspace* const> ws);

// Helpers shared by the kernels.

inline const char* ElementPtr(const void* base, int64_t offset, DType dtype) {
  return static_cast<const char*>(base) +
         offset * static_cast<int64_t>(DTypeSize(dtype));
}

// `rows` int8 rows of `cols` elements at `src` (dense) with a scale each
// (core/paged.h), dequantized into `buffer` as the product operand type (f32:
// an int8 cache's queries are f32), dense.
const void* DequantizedRows(const KernelArgs& args, const void* src,
                            const float* scales, int64_t rows, int64_t cols,
                            ScratchBuffer* buffer);

// `rows` rows of `cols` elements at `src` (row stride `ld`, in `src_dtype`) as
// the product operand type: returns src itself with *ld_out = ld when no
// conversion is needed, else converts into `buffer` (dense, *ld_out = cols).
const void* OperandRows(const KernelArgs& args, const void* src, int64_t ld,
                        int64_t rows, int64_t cols, ScratchBuffer* buffer,
                        int64_t* ld_out);

// `rows` rows of `cols` elements of `es` bytes at `src`, row stride `ld`,
// copied densely into `buffer` and followed by zero rows up to `padded`.
const void* PaddedCopy(const void* src, int64_t ld, int64_t rows,
                       int64_t padded, int64_t cols, size_t es,
                       ScratchBuffer* buffer);

// A thread keeps its head's packed K and V (Workspace::packed_k) up to this
// many bytes: 8192 keys of D = Dv = 64 (L2048 takes a quarter).
inline constexpr int64_t kMaxPackedHeadBytes = 2 << 20;

// The largest EngineOptions::q_block (rows of one tile).
inline constexpr int64_t kMaxQueryBlock = 4096;

// Key blocks are cut short after the last allowed key, at a multiple of this
// many keys: causal and padded rows skip most of a partly used block while the
// number of distinct product shapes (each a cached primitive) stays small.
inline constexpr int64_t kKeyGranule = 64;

// Rows of a ragged key block (causal diagonal, padding edges) are multiplied in
// groups of this many, each only as far as its own last allowed key.
inline constexpr int64_t kRowGranule = 64;

// Tile shapes. Every product primitive is created for exact dimensions
// (matmul.h), so the kernels keep the shapes they ask for to a fixed set per
// head size and layout: a new Lq or Lk must not create one. Full tiles are a
// query block (q_block rows) or a row group (kRowGranule rows) against a key
// block or a multiple of kKeyGranule keys. The ragged edges are padded:
//  - the last rows of a query block shorter than q_block are multiplied in
//    row groups, and the last group, of r < kRowGranule rows, from a copy of
//    its query rows zero-padded to a multiple of kRowPad rows;
//  - keys past the last multiple of kKeyGranule (at Lk, or the end of a key
//    split) are multiplied from a copy of those rows zero-padded to
//    kKeyGranule rows, their scores masked to -inf; a small span (a few KiB
//    of K and V) from a zero-padded copy of the whole span (PaddedKeys).
// The materialized kernel multiplies the same shapes, always in row groups,
// and a ragged key block always from a padded copy of the whole block.
// AttentionEngine::Prepare creates the whole set. With a k_block off the
// granule, keys the padding would push past the tile keep their exact
// length (PadsKeys), so such configurations still create shapes per length.
inline constexpr int64_t kRowPad = 16;

// The rows a padded row group of `rows` rows is multiplied as.
inline int64_t PaddedRows(int64_t rows) {
  return (rows + kRowPad - 1) / kRowPad * kRowPad;
}

// Keys a whole-copied span of n keys is multiplied as: fewer than one
// granule to a multiple of kKeyPad (a 16-key call does not pay for 64), more
// to a multiple of kKeyGranule.
inline constexpr int64_t kKeyPad = 16;
inline int64_t PaddedKeys(int64_t n) {
  const int64_t pad = n < kKeyGranule ? kKeyPad : kKeyGranule;
  return (n + pad - 1) / pad * pad;
}

// Whether a span of n keys that ends off the key granule is multiplied from
// zero-padded copies (PaddedKeys rows, or whole granules in place and a tail
// of kKeyGranule rows): not when n is the key block itself, nor when the
// padded keys would overrun the key tile (a k_block off the granule, e.g.
// paged blocks of 16 tokens), where the exact length stays.
inline bool PadsKeys(int64_t n, int64_t k_block) {
  const int64_t rest = n % kKeyGranule;
  return n != k_block && rest != 0 && n - rest + kKeyGranule <= k_block;
}

// The end of a key block starting at k0: k0 + k_block, but not past k_end, and
// not past `allowed_end` rounded up to kKeyGranule.
inline int64_t KeyBlockEnd(int64_t k0, int64_t k_block, int64_t allowed_end,
                           int64_t k_end) {
  const int64_t trimmed =
      k0 + (allowed_end - k0 + kKeyGranule - 1) / kKeyGranule * kKeyGranule;
  int64_t end = k0 + k_block;
  if (trimmed < end) end = trimmed;
  if (k_end < end) end = k_end;
  return end;
}

// 1 / (sum + exp(sink - max)), the normalizer of a row whose softmax has a
// sink, shifted by the larger of max and sink so that no exp overflows; 0
// for a row with nothing allowed (max -inf).
float SinkNormalizer(float sink, float max, float sum);

// Stores the statistics of row (b, h, i) where the call wants them
// (KernelArgs::entropy, ::max_weight), for weights w = inv·exp(t - max) with
// sum = Σ exp(t - max) and u = Σ exp(t - max)·(t - max) over the allowed
// keys (VecOps::scaled_exp_entropy_f32): the largest weight is inv, and
// -Σ w·ln w = -inv·(u + sum·ln inv). inv = 0 (nothing allowed) gives 0 and 0;
// rounding may take a one-key row's entropy a hair below 0 (stored as 0);
// NaN stays NaN.
inline void StoreRowStats(const KernelArgs& args, int64_t b, int64_t h,
                          int64_t i, float inv, float sum, float u) {
  float entropy = inv == 0.0f ? 0.0f : -inv * (u + sum * std::log(inv));
  if (entropy < 0.0f) entropy = 0.0f;
  const AttentionShape& s = args.p->shape;
  const int64_t at = (b * s.q_heads + h) * s.q_len + i;
  if (args.entropy != nullptr) args.entropy[at] = entropy;
  if (args.max_weight != nullptr) args.max_weight[at] = inv;
}

// When FillBias would add one value to every key of [k0, k0 + n) of query
// row i of head h — T5's relative bias is the call's only elementwise part
// and those keys all lie past one edge of its bucket array (where every
// position's bucket is rel_below, or rel_above: far from the diagonal) —
// sets *value to it and returns true; the kernels then shift the row's
// maximum instead of reading a row of biases. Else false.
bool UniformBias(const KernelArgs& args, int64_t h, int64_t i, int64_t k0,
                 int64_t n, float* value);

// Fills bias[0, n) with the elementwise mask parts (explicit mask, ALiBi,
// T5's relative bias, the block-sparse layout) of args.p for query row i of
// (b, h) against keys [k0, k0 + n).
void FillBias(const KernelArgs& args, int64_t b, int64_t h, int64_t i,
              int64_t k0, int64_t n, float* bias);

// Splits [0, count) across OpenMP threads and calls fn(workspace, item) for
// each, stopping early after the first error, which it returns.
template <typename Fn>
absl::Status ParallelFor(int num_threads, absl::Span<Workspace* const> ws,
                         int64_t count, const Fn& fn);

// Several calls' items as one list in one ParallelFor (on calls[0]'s
// threads): fn(call, workspace, item) for item in [0, items_of(call)) of
// every call, the call of a global index found by binary search.
template <typename ItemsOf, typename Fn>
absl::Status ParallelForCalls(absl::Span<const KernelArgs> calls,
                              absl::Span<Workspace* const> ws,
                              const ItemsOf& items_of, const Fn& fn);

}  // namespace attnserve

#include "core/parallel_for.inc"

#endif  // ATTNSERVE_CORE_KERNEL_COMMON_H_
