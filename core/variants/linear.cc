#include "core/variants/linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/kernel_common.h"
#include "core/matmul.h"
#include "core/status_macros.h"
#include "core/variants/favor_features.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Query rows per chunk of the causal kernel: the intra-chunk product is
// chunk x chunk x F, the prefix product chunk x F x Dv.
constexpr int64_t kChunk = 64;

bool IsFavor(const Problem& p) {
  return p.linear.feature_map == FeatureMap::kFavorPlus;
}

int64_t FeatureCount(const Problem& p) {
  return IsFavor(p) ? p.linear.num_features : p.shape.head_dim;
}

// Rows (query rows, keys) per block outside the causal chunks: a block of
// features (rows x F floats) stays within 256 KiB, between 16 and 256 rows.
int64_t RowBlock(int64_t features) {
  const int64_t rows = (int64_t{65536} / features) / 16 * 16;
  return std::clamp<int64_t>(rows, 16, 256);
}

// A running sum over keys: state [F x (Dv + 1)] holds sum_j phi(k_j) [v_j, 1]
// (S and z side by side), every phi(k_j) computed as exp(logit - m) for
// FAVOR+ (m = 0 for the other maps).
struct KeySum {
  float* state = nullptr;
  float m = 0.0f;
};

// One call of linear attention over resolved inputs. Workspace buffers (see
// kernel_common.h) are used as: rows of q or k loaded as f32 (`q`), query
// features (`probs`), key features transposed [F x cols] (`k`), values with a
// ones column (`v`), per-key -|x|^2/2 or elu's scratch (`row_max`), [num,
// den] rows (`acc`), the causal chunk's and the weights' scores (`scores`), a
// zero row (`bias`), the running key sum (`row_sum`). Query features survive
// key features, not the reverse.
class LinearKernel {
 public:
  LinearKernel(const Problem& p, const AttentionOutputs& outputs,
               const Strides4& out_strides, const VecOps& ops,
               const float* omega)
      : p_(p),
        s_(p.shape),
        ops_(ops),
        omega_(omega),
        out_(outputs.output.data),
        out_dtype_(outputs.output.dtype),
        out_strides_(out_strides),
        weights_(outputs.weights ? static_cast<float*>(outputs.weights->data)
                                 : nullptr),
        favor_(IsFavor(p)),
        f_(FeatureCount(p)),
        d_(p.shape.head_dim),
        dv_(p.shape.value_dim),
        dv1_(p.shape.value_dim + 1),
        block_(RowBlock(f_)),
        sqrt_scale_(std::sqrt(p.scale)) {}

  absl::Status RunFull(absl::Span<Workspace* const> ws, int threads);
  absl::Status RunCausal(absl::Span<Workspace* const> ws, int threads);
  absl::Status RunWeights(absl::Span<Workspace* const> ws, int threads);

 private:
  // Output rows (b, h, i0..i0+block) of the non-causal kernel from the key
  // sum `state` of their (b, kv head).
  absl::Status FullRows(Workspace* w, int64_t b, int64_t h, int64_t i0,
                        const float* state) const;
  // Output rows [row_begin, row_end) of every query head of kv head g, `sum`
  // holding keys [0, KeyEnd(b, row_begin)) on entry (advanced in place).
  absl::Status CausalRows(Workspace* w, int64_t b, int64_t g, int64_t row_begin,
                          int64_t row_end, KeySum* sum) const;

  int64_t KeyLength(int64_t b) const {
    return p_.key_lengths != nullptr ? p_.key_lengths[b] : s_.k_len;
  }
  // The end of row i's allowed keys (they are [0, end)).
  int64_t KeyEnd(int64_t b, int64_t i) const {
    int64_t lo, hi;
    p_.KeyRange(b, i, &lo, &hi);
    return std::max<int64_t>(hi, 0);
  }

  // x [rows x D]: rows r < n are (b, h, r0 + r) of `base` widened to f32 and
  // multiplied by sqrt(scale); rows n..rows are zero.
  void LoadScaled(const void* base, const Strides4& st, int64_t b, int64_t h,
                  int64_t r0, int64_t n, int64_t rows, float* x) const;
  // phi(x) in place for elu+1 and relu over count values.
  void MapInPlace(float* x, int64_t count, float* tmp) const;

  // Features [rows x F] of query rows (b, h, i0..i0+n), padded to `rows`.
  // FAVOR+ rows carry a constant factor each (exp(-max logit)), which
  // cancels between numerator and denominator.
  absl::StatusOr<const float*> QueryFeatures(Workspace* w, int64_t b, int64_t h,
                                             int64_t i0, int64_t n,
                                             int64_t rows) const;

  // Features [F x cols] (transposed; columns n..cols zero) of keys
  // (b, g, j0..j0+n) into w->k. For FAVOR+, features are exp(logit - *m);
  // unless fixed_m, *m is first raised to the block's largest logit, and the
  // result is the factor exp(old - new) by which sums made under the old *m
  // must be scaled (0 when there was none, 1 when *m did not move).
  absl::StatusOr<float> KeyFeatures(Workspace* w, int64_t b, int64_t g,
                                    int64_t j0, int64_t n, int64_t cols,
                                    float* m, bool fixed_m) const;
  // [v, 1] rows [cols x (Dv + 1)] of keys (b, g, j0..j0+n); rows n..cols zero.
  float* LoadValues(Workspace* w, int64_t b, int64_t g, int64_t j0, int64_t n,
                    int64_t cols) const;

  // Adds keys [lo, hi) of (b, g) to `sum`.
  absl::Status AddKeys(Workspace* w, int64_t b, int64_t g, int64_t lo,
                       int64_t hi, KeySum* sum) const;
  // `into` += `from` under a common constant.
  void Merge(const KeySum& from, KeySum* into) const;
  void Rescale(KeySum* sum, float factor) const {
    if (factor != 1.0f) ops_.scale(sum->state, f_ * dv1_, factor);
  }

  // Writes num / den of acc row [Dv + 1] as output row (b, h, i).
  void StoreRow(Workspace* w, const float* acc, int64_t b, int64_t h,
                int64_t i) const;

  int64_t StateSize() const { return f_ * dv1_; }
  // The sum over no keys, kept in `state` (StateSize() floats).
  KeySum EmptySum(float* state) const {
    std::fill(state, state + StateSize(), 0.0f);
    return KeySum{state, favor_ ? kNegInf : 0.0f};
  }

  const Problem& p_;
  const AttentionShape& s_;
  const VecOps& ops_;
  const float* const omega_;  // [F x D] for FAVOR+, else null
  void* const out_;
  const DType out_dtype_;
  const Strides4 out_strides_;
  float* const weights_;
  const bool favor_;
  const int64_t f_, d_, dv_, dv1_;
  const int64_t block_;
  const float sqrt_scale_;
};

void LinearKernel::LoadScaled(const void* base, const Strides4& st, int64_t b,
                              int64_t h, int64_t r0, int64_t n, int64_t rows,
                              float* x) const {
  for (int64_t r = 0; r < n; ++r) {
    float* row = x + r * d_;
    ops_.load(ElementPtr(base, st.offset(b, h, r0 + r), p_.dtype), p_.dtype, d_,
              row);
    ops_.scale(row, d_, sqrt_scale_);
  }
  std::fill(x + n * d_, x + rows * d_, 0.0f);
}

void LinearKernel::MapInPlace(float* x, int64_t count, float* tmp) const {
  if (p_.linear.feature_map == FeatureMap::kRelu) {
    for (int64_t c = 0; c < count; ++c) x[c] = std::max(x[c], 0.0f);
    return;
  }
  // elu(x) + 1 = exp(min(x, 0)) + max(x, 0).
  for (int64_t c = 0; c < count; ++c) tmp[c] = std::min(x[c], 0.0f);
  ops_.exp_sum_f32(tmp, count, 0.0f, tmp);
  for (int64_t c = 0; c < count; ++c) x[c] = tmp[c] + std::max(x[c], 0.0f);
}

absl::StatusOr<const float*> LinearKernel::QueryFeatures(Workspace* w,
                                                         int64_t b, int64_t h,
                                                         int64_t i0, int64_t n,
                                                         int64_t rows) const {
  float* phi = w->probs.Get<float>(rows * f_);
  if (!favor_) {
    LoadScaled(p_.q, p_.q_strides, b, h, i0, n, rows, phi);
    MapInPlace(phi, rows * d_, w->q.Get<float>(rows * d_));
    return phi;
  }
  float* x = w->q.Get<float>(rows * d_);
  LoadScaled(p_.q, p_.q_strides, b, h, i0, n, rows, x);
  MatmulShape shape{rows, f_, d_, d_, d_, f_, true};
  RETURN_IF_ERROR(w->matmul->Run(shape, x, omega_, phi));
  // -|x|^2/2 and 1/sqrt(m) are constant over a query row: they cancel.
  for (int64_t r = 0; r < rows; ++r) {
    float* row = phi + r * f_;
    const float top = ops_.scale_mask_max(row, f_, 1.0f, 0, f_, nullptr);
    ops_.exp_sum_f32(row, f_, std::isfinite(top) ? top : 0.0f, row);
  }
  return phi;
}

absl::StatusOr<float> LinearKernel::KeyFeatures(Workspace* w, int64_t b,
                                                int64_t g, int64_t j0,
                                                int64_t n, int64_t cols,
                                                float* m, bool fixed_m) const {
  float* x = w->q.Get<float>(cols * d_);
  LoadScaled(p_.k, p_.k_strides, b, g, j0, n, cols, x);
  float* phi_t = w->k.Get<float>(f_ * cols);
  if (!favor_) {
    MapInPlace(x, n * d_, w->row_max.Get<float>(cols * d_));
    for (int64_t c = 0; c < d_; ++c) {
      float* row = phi_t + c * cols;
      for (int64_t r = 0; r < n; ++r) row[r] = x[r * d_ + c];
      std::fill(row + n, row + cols, 0.0f);
    }
    return 1.0f;
  }
  float* neg_half_norm = w->row_max.Get<float>(cols);
  for (int64_t r = 0; r < cols; ++r) {
    const float* row = x + r * d_;
    float sq = 0.0f;
    for (int64_t c = 0; c < d_; ++c) sq += row[c] * row[c];
    neg_half_norm[r] = -0.5f * sq;
  }
  MatmulShape shape{f_, cols, d_, d_, d_, cols, true};
  RETURN_IF_ERROR(w->matmul->Run(shape, omega_, x, phi_t));
  // Columns n..cols become -inf, so exp makes them exactly 0.
  float top = kNegInf;
  for (int64_t r = 0; r < f_; ++r) {
    top = std::max(top, ops_.scale_mask_max(phi_t + r * cols, cols, 1.0f, 0, n,
                                            neg_half_norm));
  }
  float factor = 1.0f;
  if (!fixed_m && top > *m) {
    factor = *m == kNegInf ? 0.0f : std::exp(*m - top);
    *m = top;
  }
  if (!std::isfinite(*m)) {
    // No finite logit (n == 0, or infinite inputs): nothing to add.
    std::fill(phi_t, phi_t + f_ * cols, *m == kNegInf ? 0.0f : std::nanf(""));
    return factor;
  }
  for (int64_t r = 0; r < f_; ++r) {
    ops_.exp_sum_f32(phi_t + r * cols, cols, *m, phi_t + r * cols);
  }
  return factor;
}

float* LinearKernel::LoadValues(Workspace* w, int64_t b, int64_t g, int64_t j0,
                                int64_t n, int64_t cols) const {
  float* vals = w->v.Get<float>(cols * dv1_);
  for (int64_t r = 0; r < n; ++r) {
    float* row = vals + r * dv1_;
    ops_.load(ElementPtr(p_.v, p_.v_strides.offset(b, g, j0 + r), p_.dtype),
              p_.dtype, dv_, row);
    row[dv_] = 1.0f;
  }
  std::fill(vals + n * dv1_, vals + cols * dv1_, 0.0f);
  return vals;
}

absl::Status LinearKernel::AddKeys(Workspace* w, int64_t b, int64_t g,
                                   int64_t lo, int64_t hi, KeySum* sum) const {
  MatmulShape shape{f_,   dv1_,  block_,          block_, dv1_,
                    dv1_, false, DType::kFloat32, true};
  for (int64_t j0 = lo; j0 < hi; j0 += block_) {
    const int64_t n = std::min(block_, hi - j0);
    ASSIGN_OR_RETURN(const float factor,
                     KeyFeatures(w, b, g, j0, n, block_, &sum->m, false));
    Rescale(sum, factor);
    const float* vals = LoadValues(w, b, g, j0, n, block_);
    RETURN_IF_ERROR(
        w->matmul->Run(shape, w->k.Get<float>(0), vals, sum->state));
  }
  return absl::OkStatus();
}

void LinearKernel::Merge(const KeySum& from, KeySum* into) const {
  if (from.m == kNegInf) return;
  const int64_t n = StateSize();
  float a = 1.0f;
  if (from.m > into->m) {
    Rescale(into, into->m == kNegInf ? 0.0f : std::exp(into->m - from.m));
    into->m = from.m;
  } else {
    a = std::exp(from.m - into->m);
  }
  for (int64_t c = 0; c < n; ++c) into->state[c] += a * from.state[c];
}

void LinearKernel::StoreRow(Workspace* w, const float* acc, int64_t b,
                            int64_t h, int64_t i) const {
  void* dst = const_cast<char*>(
      ElementPtr(out_, out_strides_.offset(b, h, i), out_dtype_));
  const float den = acc[dv_];
  if (den == 0.0f) {
    float* zeros = w->bias.Get<float>(dv_);
    std::fill(zeros, zeros + dv_, 0.0f);
    ops_.store_scaled(zeros, dv_, 1.0f, dst, out_dtype_);
    return;
  }
  ops_.store_scaled(acc, dv_, 1.0f / den, dst, out_dtype_);
}

absl::Status LinearKernel::FullRows(Workspace* w, int64_t b, int64_t h,
                                    int64_t i0, const float* state) const {
  const int64_t n = std::min(block_, s_.q_len - i0);
  ASSIGN_OR_RETURN(const float* phi, QueryFeatures(w, b, h, i0, n, block_));
  float* acc = w->acc.Get<float>(block_ * dv1_);
  MatmulShape shape{block_, dv1_, f_, f_, dv1_, dv1_};
  RETURN_IF_ERROR(w->matmul->Run(shape, phi, state, acc));
  for (int64_t r = 0; r < n; ++r) StoreRow(w, acc + r * dv1_, b, h, i0 + r);
  return absl::OkStatus();
}

// Non-causal: per (b, kv head) the key sum [S, z] once, then every query row
// of the group's heads as one product with it. With at least as many pairs
// as threads, one item per pair does both (one parallel region: on shared
// cores each region's end waits for the slowest thread). With fewer, the key
// sum is split across threads and merged, then the query blocks are items.
absl::Status LinearKernel::RunFull(absl::Span<Workspace* const> ws,
                                   int threads) {
  const int64_t pairs = s_.batch * s_.kv_heads;
  const int64_t q_blocks = (s_.q_len + block_ - 1) / block_;
  if (pairs >= threads) {
    return ParallelFor(
        threads, ws, pairs, [&](Workspace* w, int64_t pair) -> absl::Status {
          const int64_t b = pair / s_.kv_heads, g = pair % s_.kv_heads;
          KeySum sum = EmptySum(w->row_sum.Get<float>(StateSize()));
          RETURN_IF_ERROR(AddKeys(w, b, g, 0, KeyLength(b), &sum));
          for (int64_t h = g * p_.group; h < (g + 1) * p_.group; ++h) {
            for (int64_t i0 = 0; i0 < s_.q_len; i0 += block_) {
              RETURN_IF_ERROR(FullRows(w, b, h, i0, sum.state));
            }
          }
          return absl::OkStatus();
        });
  }
  const int64_t key_blocks =
      std::max<int64_t>(1, (s_.k_len + block_ - 1) / block_);
  const int64_t splits =
      std::min<int64_t>((threads + pairs - 1) / pairs, key_blocks);
  std::vector<float> states(static_cast<size_t>(pairs * splits * StateSize()));
  std::vector<KeySum> sums(static_cast<size_t>(pairs * splits));
  RETURN_IF_ERROR(ParallelFor(
      threads, ws, pairs * splits,
      [&](Workspace* w, int64_t item) -> absl::Status {
        const int64_t pair = item / splits, split = item % splits;
        const int64_t b = pair / s_.kv_heads, g = pair % s_.kv_heads;
        KeySum& sum = sums[item];
        sum = EmptySum(states.data() + item * StateSize());
        const int64_t len = KeyLength(b);
        const int64_t blocks = (len + block_ - 1) / block_;
        const int64_t lo = std::min(len, blocks * split / splits * block_);
        const int64_t hi =
            std::min(len, blocks * (split + 1) / splits * block_);
        return AddKeys(w, b, g, lo, hi, &sum);
      }));
  for (int64_t pair = 0; pair < pairs; ++pair) {
    for (int64_t split = 1; split < splits; ++split) {
      Merge(sums[pair * splits + split], &sums[pair * splits]);
    }
  }
  return ParallelFor(threads, ws, pairs * p_.group * q_blocks,
                     [&](Workspace* w, int64_t item) -> absl::Status {
                       const int64_t pair = item / (p_.group * q_blocks);
                       const int64_t rest = item % (p_.group * q_blocks);
                       const int64_t b = pair / s_.kv_heads;
                       const int64_t h =
                           pair % s_.kv_heads * p_.group + rest / q_blocks;
                       return FullRows(w, b, h, rest % q_blocks * block_,
                                       sums[pair * splits].state);
                     });
}

// Causal: rows in chunks of kChunk, in order, with the prefix sum of the keys
// every row of the chunk sees ([0, KeyEnd(i0))). A chunk's rows get
// phi(Q_c) [S, z]_prefix plus the masked (phi(Q_c) phi(K_c)^T) [V_c, 1] of
// the keys between the prefix and their own end, then the prefix advances to
// the next chunk's start. KeyEnd grows by at most 1 per row, so the keys of a
// chunk are at most kChunk. With at least as many (b, kv head) pairs as
// threads, one item per pair runs all its rows; with fewer, the rows are cut
// into segments whose starting prefix sums are computed in parallel first
// (then scanned), so each segment runs on its own.
absl::Status LinearKernel::RunCausal(absl::Span<Workspace* const> ws,
                                     int threads) {
  const int64_t pairs = s_.batch * s_.kv_heads;
  if (pairs >= threads) {
    return ParallelFor(
        threads, ws, pairs, [&](Workspace* w, int64_t pair) -> absl::Status {
          const int64_t b = pair / s_.kv_heads, g = pair % s_.kv_heads;
          KeySum sum = EmptySum(w->row_sum.Get<float>(StateSize()));
          RETURN_IF_ERROR(AddKeys(w, b, g, 0, KeyEnd(b, 0), &sum));
          return CausalRows(w, b, g, 0, s_.q_len, &sum);
        });
  }
  const int64_t chunks = (s_.q_len + kChunk - 1) / kChunk;
  const int64_t segments =
      std::min<int64_t>((threads + pairs - 1) / pairs, chunks);
  std::vector<float> states(
      static_cast<size_t>(pairs * segments * StateSize()));
  std::vector<KeySum> sums(static_cast<size_t>(pairs * segments));
  auto segment_row = [&](int64_t seg) {
    return std::min(s_.q_len, chunks * seg / segments * kChunk);
  };
  // The keys between the starts of segment s - 1 and s (from 0 for s = 0).
  RETURN_IF_ERROR(ParallelFor(
      threads, ws, pairs * segments,
      [&](Workspace* w, int64_t item) -> absl::Status {
        const int64_t pair = item / segments, seg = item % segments;
        const int64_t b = pair / s_.kv_heads, g = pair % s_.kv_heads;
        KeySum& sum = sums[item];
        sum = EmptySum(states.data() + item * StateSize());
        const int64_t lo = seg == 0 ? 0 : KeyEnd(b, segment_row(seg - 1));
        const int64_t hi = KeyEnd(b, segment_row(seg));
        return AddKeys(w, b, g, lo, hi, &sum);
      }));
  for (int64_t pair = 0; pair < pairs; ++pair) {
    for (int64_t seg = 1; seg < segments; ++seg) {
      Merge(sums[pair * segments + seg - 1], &sums[pair * segments + seg]);
    }
  }
  return ParallelFor(
      threads, ws, pairs * segments,
      [&](Workspace* w, int64_t item) -> absl::Status {
        const int64_t pair = item / segments, seg = item % segments;
        return CausalRows(w, pair / s_.kv_heads, pair % s_.kv_heads,
                          segment_row(seg), segment_row(seg + 1), &sums[item]);
      });
}

absl::Status LinearKernel::CausalRows(Workspace* w, int64_t b, int64_t g,
                                      int64_t row_begin, int64_t row_end,
                                      KeySum* sum) const {
  float* acc = w->acc.Get<float>(kChunk * dv1_);
  float* scores = w->scores.Get<float>(kChunk * kChunk);
  // acc = phi(Q_c) [S, z]
  MatmulShape prefix{kChunk, dv1_, f_, f_, dv1_, dv1_};
  // scores = phi(Q_c) phi(K_c)^T
  MatmulShape qk{kChunk, kChunk, f_, f_, kChunk, kChunk};
  // acc += scores [V_c, 1]
  MatmulShape pv{kChunk, dv1_,  kChunk,          kChunk, dv1_,
                 dv1_,   false, DType::kFloat32, true};
  // [S, z] += phi(K_c)^T [V_c, 1]
  MatmulShape advance{f_,   dv1_,  kChunk,          kChunk, dv1_,
                      dv1_, false, DType::kFloat32, true};
  for (int64_t i0 = row_begin; i0 < row_end; i0 += kChunk) {
    const int64_t i1 = std::min(i0 + kChunk, row_end);
    const int64_t n = i1 - i0;
    const int64_t start = KeyEnd(b, i0);
    const int64_t next = i1 < row_end ? KeyEnd(b, i1) : start;
    const int64_t end = std::max(KeyEnd(b, i1 - 1), next);
    const int64_t keys = end - start;
    const float* vals = nullptr;
    if (keys > 0) {
      ASSIGN_OR_RETURN(const float factor, KeyFeatures(w, b, g, start, keys,
                                                       kChunk, &sum->m, false));
      Rescale(sum, factor);
      vals = LoadValues(w, b, g, start, keys, kChunk);
    }
    for (int64_t h = g * p_.group; h < (g + 1) * p_.group; ++h) {
      ASSIGN_OR_RETURN(const float* phi, QueryFeatures(w, b, h, i0, n, kChunk));
      RETURN_IF_ERROR(w->matmul->Run(prefix, phi, sum->state, acc));
      if (keys > 0) {
        RETURN_IF_ERROR(w->matmul->Run(qk, phi, w->k.Get<float>(0), scores));
        for (int64_t r = 0; r < kChunk; ++r) {
          const int64_t allowed = r < n ? KeyEnd(b, i0 + r) - start : 0;
          float* row = scores + r * kChunk;
          std::fill(row + std::max<int64_t>(allowed, 0), row + kChunk, 0.0f);
        }
        RETURN_IF_ERROR(w->matmul->Run(pv, scores, vals, acc));
      }
      for (int64_t r = 0; r < n; ++r) {
        StoreRow(w, acc + r * dv1_, b, h, i0 + r);
      }
    }
    if (next > start) {
      // The chunk's features are those of keys [start, end), and the prefix
      // takes [start, next): zero the rest of the values.
      float* v = w->v.Get<float>(0);
      std::fill(v + (next - start) * dv1_, v + kChunk * dv1_, 0.0f);
      RETURN_IF_ERROR(
          w->matmul->Run(advance, w->k.Get<float>(0), v, sum->state));
    }
  }
  return absl::OkStatus();
}

// Weights: w_ij = phi(q_i) . phi(k_j) / sum over allowed j' of the same, from
// the products themselves (O(Lq Lk F)). FAVOR+ keys of a (b, kv head) pair
// share one constant, their largest logit, found by a first pass.
absl::Status LinearKernel::RunWeights(absl::Span<Workspace* const> ws,
                                      int threads) {
  const int64_t pairs = s_.batch * s_.kv_heads;
  std::vector<float> key_max(static_cast<size_t>(pairs), 0.0f);
  if (favor_) {
    RETURN_IF_ERROR(ParallelFor(
        threads, ws, pairs, [&](Workspace* w, int64_t pair) -> absl::Status {
          const int64_t b = pair / s_.kv_heads, g = pair % s_.kv_heads;
          float m = kNegInf;
          const int64_t len = KeyLength(b);
          for (int64_t j0 = 0; j0 < len; j0 += block_) {
            RETURN_IF_ERROR(KeyFeatures(w, b, g, j0, std::min(block_, len - j0),
                                        block_, &m, false)
                                .status());
          }
          key_max[pair] = m;
          return absl::OkStatus();
        }));
  }
  const int64_t q_blocks = (s_.q_len + block_ - 1) / block_;
  return ParallelFor(
      threads, ws, s_.batch * s_.q_heads * q_blocks,
      [&](Workspace* w, int64_t item) -> absl::Status {
        const int64_t bh = item / q_blocks;
        const int64_t b = bh / s_.q_heads, h = bh % s_.q_heads;
        const int64_t g = h / p_.group;
        const int64_t i0 = item % q_blocks * block_;
        const int64_t n = std::min(block_, s_.q_len - i0);
        ASSIGN_OR_RETURN(const float* phi,
                         QueryFeatures(w, b, h, i0, n, block_));
        float* scores = w->scores.Get<float>(block_ * block_);
        std::vector<double> den(static_cast<size_t>(n), 0.0);
        float m = key_max[b * s_.kv_heads + g];
        const int64_t keys_end = KeyEnd(b, i0 + n - 1);
        MatmulShape qk{block_, block_, f_, f_, block_, block_};
        for (int64_t j0 = 0; j0 < keys_end; j0 += block_) {
          const int64_t cols = std::min(block_, keys_end - j0);
          RETURN_IF_ERROR(
              KeyFeatures(w, b, g, j0, cols, block_, &m, true).status());
          RETURN_IF_ERROR(w->matmul->Run(qk, phi, w->k.Get<float>(0), scores));
          for (int64_t r = 0; r < n; ++r) {
            const int64_t allowed =
                std::clamp<int64_t>(KeyEnd(b, i0 + r) - j0, 0, cols);
            float* dst = weights_ + (bh * s_.q_len + i0 + r) * s_.k_len + j0;
            const float* src = scores + r * block_;
            double sum = 0.0;
            for (int64_t c = 0; c < allowed; ++c) {
              dst[c] = src[c];
              sum += src[c];
            }
            std::fill(dst + allowed, dst + cols, 0.0f);
            den[r] += sum;
          }
        }
        for (int64_t r = 0; r < n; ++r) {
          float* row = weights_ + (bh * s_.q_len + i0 + r) * s_.k_len;
          std::fill(row + keys_end, row + s_.k_len, 0.0f);
          if (den[r] == 0.0) {
            std::fill(row, row + keys_end, 0.0f);
          } else {
            ops_.scale(row, keys_end, static_cast<float>(1.0 / den[r]));
          }
        }
        return absl::OkStatus();
      });
}

}  // namespace

absl::Status CheckLinear(const Problem& p) {
  if (p.linear.feature_map == FeatureMap::kFavorPlus &&
      (p.linear.num_features < 1 || p.linear.num_features > 4096)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear.num_features: must be in [1, 4096] for FAVOR+, got ",
        p.linear.num_features));
  }
  if (p.scale < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scale: must be >= 0 for linear attention (its features take "
        "sqrt(scale) * q and sqrt(scale) * k), got ",
        p.scale));
  }
  const char* why =
      " cannot be linearised: linear attention sums phi(k) v^T over the keys "
      "once, so only causal and key_lengths can restrict them";
  return CheckOnlyCausalAndPadding(p, why);
}

double LinearFlops(const Problem& p) {
  const AttentionShape& s = p.shape;
  const bool favor = p.linear.feature_map == FeatureMap::kFavorPlus;
  const double f = favor ? double(p.linear.num_features) : double(s.head_dim);
  // Per kv head: the keys' random features and S = phi(K)^T V (and z); per
  // query head: the queries' features and phi(q) . S (and the denominator).
  const double per_kv_head = (favor ? 2.0 * s.k_len * f * s.head_dim : 0.0) +
                             2.0 * s.k_len * f * (s.value_dim + 1);
  const double per_q_head = (favor ? 2.0 * s.q_len * f * s.head_dim : 0.0) +
                            2.0 * s.q_len * f * (s.value_dim + 1);
  return double(s.batch) * (s.kv_heads * per_kv_head + s.q_heads * per_q_head);
}

absl::Status RunLinear(const Problem& p, const AttentionOutputs& outputs,
                       const Strides4& out_strides,
                       const VariantContext& context) {
  const AttentionShape& s = p.shape;
  if (s.batch == 0 || s.q_heads == 0 || s.q_len == 0) return absl::OkStatus();
  std::shared_ptr<const std::vector<float>> omega;
  if (IsFavor(p)) {
    omega = CachedFavorMatrix(p.linear.num_features, s.head_dim, p.linear.seed);
  }
  // Products are f32 (bf16 inputs are widened: the features are f32).
  const int threads = context.num_threads();
  const absl::Span<Workspace* const> ws = context.ws;
  LinearKernel kernel(p, outputs, out_strides, *context.ops,
                      omega ? omega->data() : nullptr);
  RETURN_IF_ERROR(p.causal ? kernel.RunCausal(ws, threads)
                           : kernel.RunFull(ws, threads));
  if (outputs.weights) RETURN_IF_ERROR(kernel.RunWeights(ws, threads));
  return absl::OkStatus();
}

absl::Status ReferenceLinear(const Problem& p, const AttentionOutputs& outputs,
                             const Strides4& out_strides) {
  const AttentionShape& s = p.shape;
  const bool favor = IsFavor(p);
  const int64_t f = FeatureCount(p), d = s.head_dim, dv = s.value_dim;
  const std::vector<double> omega =
      favor ? FavorMatrix(f, d, p.linear.seed) : std::vector<double>();
  const double sqrt_scale = std::sqrt(static_cast<double>(p.scale));
  const double inv_sqrt_m = 1.0 / std::sqrt(static_cast<double>(f));

  // Features of one row of q or k (x = sqrt(scale) * row). FAVOR+ features
  // are exp(w_r . x - |x|^2 / 2 - c) / sqrt(m), the logits returned in
  // `logits` so the caller can pick c: keys share one c per (b, kv head),
  // queries take their own (both cancel in the ratio).
  std::vector<double> x(d);
  auto logits_of = [&](const void* base, int64_t offset,
                       std::vector<double>* out) {
    for (int64_t c = 0; c < d; ++c) {
      x[c] = sqrt_scale * LoadAsFloat(base, p.dtype, offset + c);
    }
    out->assign(f, 0.0);
    if (!favor) {
      for (int64_t c = 0; c < d; ++c) {
        (*out)[c] = p.linear.feature_map == FeatureMap::kRelu
                        ? std::max(x[c], 0.0)
                        : (x[c] > 0.0 ? x[c] + 1.0 : std::exp(x[c]));
      }
      return;
    }
    double half_sq = 0.0;
    for (int64_t c = 0; c < d; ++c) half_sq += 0.5 * x[c] * x[c];
    for (int64_t r = 0; r < f; ++r) {
      double dot = 0.0;
      for (int64_t c = 0; c < d; ++c) dot += omega[r * d + c] * x[c];
      (*out)[r] = dot - half_sq;
    }
  };

  std::vector<double> key_phi;  // [Lk x F] of one (b, kv head)
  std::vector<double> row, q_phi(f), num(dv), dots(s.k_len);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t g = 0; g < s.kv_heads; ++g) {
      const int64_t len = p.key_lengths != nullptr ? p.key_lengths[b] : s.k_len;
      key_phi.assign(static_cast<size_t>(len * f), 0.0);
      double c_key = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        logits_of(p.k, p.k_strides.offset(b, g, j), &row);
        std::copy(row.begin(), row.end(), key_phi.begin() + j * f);
        for (double l : row) c_key = std::max(c_key, l);
      }
      if (favor) {
        for (double& l : key_phi) l = std::exp(l - c_key) * inv_sqrt_m;
      }
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        for (int64_t i = 0; i < s.q_len; ++i) {
          logits_of(p.q, p.q_strides.offset(b, h, i), &row);
          if (favor) {
            double c_query = -std::numeric_limits<double>::infinity();
            for (double l : row) c_query = std::max(c_query, l);
            for (int64_t r = 0; r < f; ++r) {
              q_phi[r] = std::exp(row[r] - c_query) * inv_sqrt_m;
            }
          } else {
            q_phi = row;
          }
          int64_t lo, hi;
          p.KeyRange(b, i, &lo, &hi);
          std::fill(num.begin(), num.end(), 0.0);
          double den = 0.0;
          for (int64_t j = std::max<int64_t>(lo, 0); j < hi; ++j) {
            double dot = 0.0;
            for (int64_t r = 0; r < f; ++r)
              dot += q_phi[r] * key_phi[j * f + r];
            dots[j] = dot;
            den += dot;
            const int64_t v_row = p.v_strides.offset(b, g, j);
            for (int64_t c = 0; c < dv; ++c) {
              num[c] += dot * LoadAsFloat(p.v, p.dtype, v_row + c);
            }
          }
          const int64_t out_row = out_strides.offset(b, h, i);
          for (int64_t c = 0; c < dv; ++c) {
            const double value = den == 0.0 ? 0.0 : num[c] / den;
            StoreFromFloat(outputs.output.data, outputs.output.dtype,
                           out_row + c, static_cast<float>(value));
          }
          if (outputs.weights) {
            float* w = static_cast<float*>(outputs.weights->data) +
                       ((b * s.q_heads + h) * s.q_len + i) * s.k_len;
            for (int64_t j = 0; j < s.k_len; ++j) {
              const bool allowed = lo <= j && j < hi && den != 0.0;
              w[j] = allowed ? static_cast<float>(dots[j] / den) : 0.0f;
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
