#include "core/kernel_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/convert.h"

namespace attnserve {

const void* OperandRows(const KernelArgs& args, const void* src, int64_t ld,
                        int64_t rows, int64_t cols, ScratchBuffer* buffer,
                        int64_t* ld_out) {
  const DType dtype = args.p->dtype;
  if (dtype == args.gemm_dtype) {
    *ld_out = ld;
    return src;
  }
  // Only widening to f32 happens here: bf16 products are used for bf16 inputs
  // only.
  float* dst = buffer->Get<float>(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    args.ops->load(ElementPtr(src, r * ld, dtype), dtype, cols, dst + r * cols);
  }
  *ld_out = cols;
  return dst;
}

const void* DequantizedRows(const KernelArgs& args, const void* src,
                            const float* scales, int64_t rows, int64_t cols,
                            ScratchBuffer* buffer) {
  float* dst = buffer->Get<float>(rows * cols);
  const int8_t* q = static_cast<const int8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) {
    args.ops->dequant_int8(q + r * cols, cols, scales[r], dst + r * cols);
  }
  return dst;
}

const void* PaddedCopy(const void* src, int64_t ld, int64_t rows,
                       int64_t padded, int64_t cols, size_t es,
                       ScratchBuffer* buffer) {
  char* dst = buffer->Get<char>(padded * cols * es);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * cols * es,
                static_cast<const char*>(src) + r * ld * es, cols * es);
  }
  std::memset(dst + rows * cols * es, 0, (padded - rows) * cols * es);
  return dst;
}

float SinkNormalizer(float sink, float max, float sum) {
  if (max == -std::numeric_limits<float>::infinity()) return 0.0f;
  if (sink <= max) return 1.0f / (sum + std::exp(sink - max));
  const float a = std::exp(max - sink);
  return a / (sum * a + 1.0f);
}

bool UniformBias(const KernelArgs& args, int64_t h, int64_t i, int64_t k0,
                 int64_t n, float* value) {
  const Problem& p = *args.p;
  if (p.rel_table == nullptr || p.mask != nullptr || p.alibi != nullptr ||
      p.relk_table != nullptr || p.block_layout != nullptr || n <= 0) {
    return false;
  }
  // Relative positions [first, first + n) against the array's
  // [rel_first, -rel_first].
  const int64_t first = k0 - (i + p.diag_offset);
  const float* table = p.rel_table + h * p.rel_buckets;
  if (first + n - 1 < p.rel_first) {
    *value = table[p.rel_below];
    return true;
  }
  if (first > -p.rel_first) {
    *value = table[p.rel_above];
    return true;
  }
  return false;
}

namespace {

// The products of relative keys (RelativeKeysSpec) with the biased queries
// of up to kRelativeRows consecutive rows of one head against one key block:
// dots[r · count + t - first] = (q + query_bias) · table[t] of row i0 + r,
// for the table rows [first, first + count) the block's keys reach from
// those rows. One run's kernels visit a block's rows one after another, so
// a thread keeps a few such products (one slot per head, modulo
// kRelativeSlots) and forms them once per kRelativeRows rows, as one product
// of many rows instead of one per row.
struct RelativeProducts {
  uint64_t run = 0;  // KernelArgs::run; 0 = empty
  int64_t b = 0, h = 0, k0 = 0, n = 0, i0 = 0, rows = 0;
  int64_t first = 0, count = 0;
  std::vector<float> q, dots;
};
constexpr int64_t kRelativeRows = 32;
constexpr int kRelativeSlots = 8;
// A slot's products take about this many floats (256 KiB): long key blocks
// take fewer rows at a time, down to one row (whose products are a block's
// length).
constexpr int64_t kRelativeFloats = int64_t{1} << 16;

const RelativeProducts& RelativeProductsFor(const KernelArgs& args, int64_t b,
                                            int64_t h, int64_t i, int64_t k0,
                                            int64_t n) {
  thread_local RelativeProducts slots[kRelativeSlots];
  RelativeProducts& c = slots[h % kRelativeSlots];
  if (c.run == args.run && c.b == b && c.h == h && c.k0 == k0 && c.n == n &&
      i >= c.i0 && i < c.i0 + c.rows) {
    return c;
  }
  const Problem& p = *args.p;
  const int64_t d = p.shape.head_dim;
  const int64_t last_row = p.relk_rows - 1;
  c.run = args.run;
  c.b = b, c.h = h, c.k0 = k0, c.n = n, c.i0 = i;
  c.rows = std::clamp<int64_t>(kRelativeFloats / (n + kRelativeRows), 1,
                               std::min(kRelativeRows, p.shape.q_len - i));
  // Row i0 + r reads table rows base + r - c for keys c in [0, n).
  const int64_t base = i + p.diag_offset - k0 + p.relk_zero_row;
  c.first = std::clamp<int64_t>(base - (n - 1), 0, last_row);
  c.count = std::clamp<int64_t>(base + c.rows - 1, 0, last_row) - c.first + 1;
  c.q.resize(static_cast<size_t>(c.rows * d));
  for (int64_t r = 0; r < c.rows; ++r) {
    float* q = c.q.data() + r * d;
    args.ops->load(ElementPtr(p.q, p.q_strides.offset(b, h, i + r), p.dtype),
                   p.dtype, d, q);
    if (p.relk_query_bias != nullptr) {
      const float* qb = p.relk_query_bias + h * d;
      for (int64_t e = 0; e < d; ++e) q[e] += qb[e];
    }
  }
  c.dots.resize(static_cast<size_t>(c.rows * c.count));
  args.ops->kv_scores(c.q.data(), d, c.rows, d, p.RelativeKey(h, c.first),
                      DType::kFloat32, nullptr, c.count, c.dots.data(),
                      c.count);
  return c;
}

// Adds relative keys' term to bias[0, n), keys [k0, k0 + n) of query row i
// of (b, h): key k0 + c reads table row clamp(base - c, 0, rows - 1), so the
// keys below the table's last row share one product, those past its row 0
// another, and the middle reads consecutive rows backwards.
void AddRelativeKeys(const KernelArgs& args, int64_t b, int64_t h, int64_t i,
                     int64_t k0, int64_t n, float* bias) {
  const Problem& p = *args.p;
  const RelativeProducts& c = RelativeProductsFor(args, b, h, i, k0, n);
  // Table row t's product is dots[t - c.first].
  const float* dots = c.dots.data() + (i - c.i0) * c.count;
  const int64_t rows = p.relk_rows;
  const int64_t base = i + p.diag_offset - k0 + p.relk_zero_row;
  // [0, top): row rows - 1; [bottom, n): row 0; between them rows base - e.
  const int64_t top = std::clamp<int64_t>(base - rows + 2, 0, n);
  const int64_t bottom = std::clamp<int64_t>(base, top, n);
  const float scale = p.scale;
  if (top > 0) {
    const float last = scale * dots[rows - 1 - c.first];
    for (int64_t e = 0; e < top; ++e) bias[e] += last;
  }
  const int64_t middle = base - c.first;  // row base - e at middle - e
  for (int64_t e = top; e < bottom; ++e) bias[e] += scale * dots[middle - e];
  if (bottom < n) {
    const float zero = scale * dots[0 - c.first];
    for (int64_t e = bottom; e < n; ++e) bias[e] += zero;
  }
}

}  // namespace

void FillBias(const KernelArgs& args, int64_t b, int64_t h, int64_t i,
              int64_t k0, int64_t n, float* bias) {
  const Problem& p = *args.p;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const Strides4& ms = p.mask_strides;
  const int64_t row = b * ms.b + h * ms.h + i * ms.row;
  if (p.mask == nullptr || p.mask_dtype == DType::kBool) {
    std::fill(bias, bias + n, 0.0f);
    if (p.mask != nullptr) {
      const char* m = static_cast<const char*>(p.mask);
      for (int64_t c = 0; c < n; ++c) {
        if (m[row + (k0 + c) * ms.col] == 0) bias[c] = kNegInf;
      }
    }
  } else {
    // A float mask is f32 (ResolveProblem), possibly unaligned (a
    // message's bytes), and sets every key's bias: a dense row is one
    // copy, a broadcast one one value.
    const char* m = static_cast<const char*>(p.mask) +
                    (row + k0 * ms.col) * int64_t{sizeof(float)};
    if (ms.col == 1) {
      std::memcpy(bias, m, static_cast<size_t>(n) * sizeof(float));
    } else if (ms.col == 0) {
      float value;
      std::memcpy(&value, m, sizeof value);
      std::fill(bias, bias + n, value);
    } else {
      for (int64_t c = 0; c < n; ++c) {
        std::memcpy(bias + c, m + c * ms.col * int64_t{sizeof(float)},
                    sizeof(float));
      }
    }
  }
  if (p.alibi != nullptr) {
    const float slope = p.alibi[h];
    const int64_t d = i + p.diag_offset;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t dist = std::abs(d - (k0 + c));
      bias[c] -= slope * static_cast<float>(dist);
    }
  }
  if (p.rel_table != nullptr) {
    // Key c is at relative position k0 + c - d: the array's range in the
    // middle, the edge buckets on either side.
    const float* table = p.rel_table + h * p.rel_buckets;
    const int64_t first = k0 - (i + p.diag_offset);
    const int64_t begin = std::clamp<int64_t>(p.rel_first - first, 0, n);
    const int64_t end = std::clamp<int64_t>(-p.rel_first + 1 - first, 0, n);
    for (int64_t c = 0; c < begin; ++c) bias[c] += table[p.rel_below];
    args.ops->add_gathered(bias + begin, table,
                           p.rel_bucket.data() + (first + begin - p.rel_first),
                           end - begin);
    for (int64_t c = end; c < n; ++c) bias[c] += table[p.rel_above];
  }
  if (p.relk_table != nullptr) AddRelativeKeys(args, b, h, i, k0, n, bias);
  if (p.block_layout != nullptr) p.block_layout->Restrict(i, k0, n, bias);
}

}  // namespace attnserve
