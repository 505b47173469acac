// RunLsh: LSH attention on oneDNN matmuls and the engine's vectorized row
// operations.
//
// A call runs as a few parallel regions over all (b, h) at once:
//   1. hash: per block of positions, |q_i| and one product [rows x D] x
//      [D x rounds*num_buckets/2] against the rotations, then the argmax of
//      [xR, -xR] of every round;
//   2. sort: per (b, h, round), a counting sort by bucket (stable, so
//      positions stay in order within a bucket);
//   3. attend, once per round: per (b, h, chunk, block of the chunk's rows),
//      gather the rows' queries and the two chunks' normalised keys and values
//      into dense tiles, S = Q.K^T, mask (causal, key_lengths, self), online
//      softmax and acc += P.V over blocks of keys, then fold the round's
//      (o_r, lse_r) into every position's running log-sum-exp combination;
//   4. write: out_i = the combination normalised, in the output dtype;
//   5. weights, when asked: w_ij = sum over rounds of exp(s_ij - LSE_i) over
//      the round's allowed keys, recomputing the same score tiles.
// Within one round every position is in exactly one chunk, so items never
// write the same position; rounds follow each other. Extra memory is
// O(L * (Dv + 2 * rounds + 3)) floats per (b, h), never O(L^2).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/convert.h"
#include "core/kernel_common.h"
#include "core/matmul.h"
#include "core/status_macros.h"
#include "core/variants/lsh.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Positions per hashing item.
constexpr int64_t kHashRows = 256;
// Product columns per hashing matmul (rounds are grouped up to this many).
constexpr int64_t kHashColumns = 1024;
// Query rows per score tile (a chunk's rows are cut into such blocks).
constexpr int64_t kQueryRows = 128;
// Keys per score tile.
constexpr int64_t kKeyBlock = 512;
// Chunks up to this size are attended in spans of consecutive chunks of about
// kSpanRows sorted positions whose queries, keys and values are gathered once
// per span (each key then serves two chunks from one copy); larger chunks
// gather per score tile.
constexpr int64_t kMaxSpanChunk = kKeyBlock / 2;
constexpr int64_t kSpanRows = 1024;

// What one call shares across its regions. Per-position arrays are indexed
// [bh][position] (bh = b * Hq + h), per-round ones [bh][round][...].
class LshCall {
 public:
  LshCall(const Problem& p, const AttentionOutputs& outputs,
          const Strides4& out_strides, const VecOps& ops, DType gemm,
          int threads)
      : p_(p),
        ops_(ops),
        gemm_(gemm),
        gemm_size_(static_cast<int64_t>(DTypeSize(gemm))),
        out_(outputs.output.data),
        out_dtype_(outputs.output.dtype),
        out_strides_(out_strides),
        weights_(outputs.weights ? static_cast<float*>(outputs.weights->data)
                                 : nullptr),
        threads_(threads),
        heads_(p.shape.q_heads),
        bh_count_(p.shape.batch * p.shape.q_heads),
        length_(p.shape.q_len),
        dim_(p.shape.head_dim),
        dv_(p.shape.value_dim),
        rounds_(p.lsh.num_hashes),
        half_(p.lsh.num_buckets / 2),
        chunk_(p.lsh.chunk_size),
        chunks_((length_ + chunk_ - 1) / chunk_),
        row_blocks_((std::min(chunk_, length_) + kQueryRows - 1) / kQueryRows),
        query_rows_(std::min(chunk_, kQueryRows)),
        span_chunks_(SpanChunks()) {}

  absl::Status Run(absl::Span<Workspace* const> scratch) {
    const size_t positions = static_cast<size_t>(bh_count_ * length_);
    PrepareRotations();
    norm_.resize(positions);
    bucket_.resize(positions * rounds_);
    order_.resize(positions * rounds_);
    run_max_.assign(positions, kNegInf);
    run_sum_.assign(positions, 0.0f);
    // Written before it is read (a position's first round with keys copies
    // its o_r), so it needs no clearing.
    acc_.reset(new float[positions * dv_]);

    const int64_t hash_blocks = (length_ + kHashRows - 1) / kHashRows;
    RETURN_IF_ERROR(ParallelFor(threads_, scratch, bh_count_ * hash_blocks,
                                [&](Workspace* s, int64_t item) {
                                  return Hash(s, item / hash_blocks,
                                              item % hash_blocks);
                                }));
    RETURN_IF_ERROR(ParallelFor(threads_, scratch, bh_count_ * rounds_,
                                [&](Workspace* s, int64_t item) {
                                  Sort(s, item / rounds_, item % rounds_);
                                  return absl::OkStatus();
                                }));
    const int64_t per_bh = AttendItems();
    for (int64_t r = 0; r < rounds_; ++r) {
      RETURN_IF_ERROR(ParallelFor(threads_, scratch, bh_count_ * per_bh,
                                  [&](Workspace* s, int64_t item) {
                                    return Attend(s, item / per_bh, r,
                                                  item % per_bh,
                                                  /*weights=*/false);
                                  }));
    }
    RETURN_IF_ERROR(ParallelFor(threads_, scratch, bh_count_ * hash_blocks,
                                [&](Workspace* s, int64_t item) {
                                  Write(s, item / hash_blocks,
                                        item % hash_blocks);
                                  return absl::OkStatus();
                                }));
    if (weights_ == nullptr) return absl::OkStatus();

    RETURN_IF_ERROR(ParallelFor(
        threads_, scratch, bh_count_ * length_, [&](Workspace*, int64_t row) {
          std::memset(weights_ + row * length_, 0, length_ * sizeof(float));
          return absl::OkStatus();
        }));
    for (int64_t r = 0; r < rounds_; ++r) {
      RETURN_IF_ERROR(ParallelFor(threads_, scratch, bh_count_ * per_bh,
                                  [&](Workspace* s, int64_t item) {
                                    return Attend(s, item / per_bh, r,
                                                  item % per_bh,
                                                  /*weights=*/true);
                                  }));
    }
    return absl::OkStatus();
  }

 private:
  // Chunks per span (0: chunks too large, gathered per score tile). Spans are
  // kept small enough that every thread has several items; the grouping
  // changes no arithmetic, only where operands are copied to.
  int64_t SpanChunks() const {
    if (chunk_ > kMaxSpanChunk) return 0;
    const int64_t wanted = std::max<int64_t>(1, kSpanRows / chunk_);
    const int64_t spread =
        std::max<int64_t>(1, bh_count_ * chunks_ / (4 * threads_));
    return std::min(wanted, spread);
  }

  // Attention items per (b, h) and round.
  int64_t AttendItems() const {
    if (span_chunks_ > 0) return (chunks_ + span_chunks_ - 1) / span_chunks_;
    return chunks_ * row_blocks_;
  }

  // The rotations as one f32 [D x rounds*half] matrix: column r*half + c is
  // round r's column c.
  void PrepareRotations() {
    if (half_ == 0) return;
    const std::vector<double> r = LshRotations(p_.lsh, dim_);
    const int64_t cols = rounds_ * half_;
    rotations_.resize(dim_ * cols);
    for (int64_t round = 0; round < rounds_; ++round) {
      for (int64_t d = 0; d < dim_; ++d) {
        for (int64_t c = 0; c < half_; ++c) {
          rotations_[d * cols + round * half_ + c] =
              static_cast<float>(r[(round * dim_ + d) * half_ + c]);
        }
      }
    }
  }

  const char* QueryRow(int64_t bh, int64_t i) const {
    return ElementPtr(p_.q, p_.q_strides.offset(bh / heads_, bh % heads_, i),
                      p_.dtype);
  }
  const char* ValueRow(int64_t bh, int64_t i) const {
    return ElementPtr(p_.v, p_.v_strides.offset(bh / heads_, bh % heads_, i),
                      p_.dtype);
  }
  int64_t KeyLength(int64_t bh) const {
    return p_.key_lengths != nullptr ? p_.key_lengths[bh / heads_] : length_;
  }

  // Norms and buckets of positions [block * kHashRows, ...) of one (b, h).
  absl::Status Hash(Workspace* s, int64_t bh, int64_t block) {
    const int64_t i0 = block * kHashRows;
    const int64_t m = std::min(kHashRows, length_ - i0);
    const float* x;
    int64_t ldx;
    if (p_.dtype == DType::kFloat32 && p_.q_strides.row >= dim_) {
      x = reinterpret_cast<const float*>(QueryRow(bh, i0));
      ldx = p_.q_strides.row;
    } else {
      float* rows = s->q.Get<float>(m * dim_);
      for (int64_t r = 0; r < m; ++r) {
        ops_.load(QueryRow(bh, i0 + r), p_.dtype, dim_, rows + r * dim_);
      }
      x = rows;
      ldx = dim_;
    }
    float* norm = norm_.data() + bh * length_ + i0;
    for (int64_t r = 0; r < m; ++r) {
      const float* row = x + r * ldx;
      double sum = 0.0;
      for (int64_t d = 0; d < dim_; ++d) sum += double(row[d]) * row[d];
      norm[r] = static_cast<float>(std::sqrt(sum));
    }
    if (half_ == 0) {
      for (int64_t round = 0; round < rounds_; ++round) {
        std::fill_n(BucketsOf(bh, round) + i0, m, 0);
      }
      return absl::OkStatus();
    }
    const int64_t cols = rounds_ * half_;
    const int64_t group = std::max<int64_t>(1, kHashColumns / half_);
    for (int64_t r0 = 0; r0 < rounds_; r0 += group) {
      const int64_t n_rounds = std::min(group, rounds_ - r0);
      const int64_t n = n_rounds * half_;
      float* proj = s->scores.Get<float>(m * n);
      const MatmulShape shape{
          m, n, dim_, ldx, cols, n, false, DType::kFloat32, false};
      RETURN_IF_ERROR(
          s->matmul->Run(shape, x, rotations_.data() + r0 * half_, proj));
      for (int64_t round = r0; round < r0 + n_rounds; ++round) {
        int32_t* bucket = BucketsOf(bh, round) + i0;
        for (int64_t r = 0; r < m; ++r) {
          bucket[r] = ArgmaxSigned(proj + r * n + (round - r0) * half_);
        }
      }
    }
    return absl::OkStatus();
  }

  // The index of the largest of [v, -v] (2 * half_ values), the lowest on
  // ties; overwrites v with -v. The two maxima come from the vectorized row
  // max, the index from a scan for the first value equal to the winner.
  int32_t ArgmaxSigned(float* v) const {
    const float top = ops_.scale_mask_max(v, half_, 1.0f, 0, half_, nullptr);
    const float neg_top =
        ops_.scale_mask_max(v, half_, -1.0f, 0, half_, nullptr);  // v = -v
    // Ties between the halves go to the first half (the lower indices).
    const bool first_half = top >= neg_top;
    const float want = first_half ? -top : neg_top;
    for (int64_t c = 0; c < half_; ++c) {
      if (v[c] == want) return static_cast<int32_t>(first_half ? c : half_ + c);
    }
    return 0;  // only with NaN values
  }

  int32_t* BucketsOf(int64_t bh, int64_t round) {
    return bucket_.data() + (bh * rounds_ + round) * length_;
  }
  int32_t* OrderOf(int64_t bh, int64_t round) {
    return order_.data() + (bh * rounds_ + round) * length_;
  }

  // Positions sorted by (bucket, position).
  void Sort(Workspace* s, int64_t bh, int64_t round) {
    const int32_t* bucket = BucketsOf(bh, round);
    int32_t* order = OrderOf(bh, round);
    std::vector<int32_t>& start = s->offsets;
    start.assign(2 * half_ + 2, 0);
    for (int64_t i = 0; i < length_; ++i) ++start[bucket[i] + 1];
    for (size_t c = 1; c < start.size(); ++c) start[c] += start[c - 1];
    for (int64_t i = 0; i < length_; ++i) {
      order[start[bucket[i]]++] = static_cast<int32_t>(i);
    }
  }

  // Rows `positions` of q (normalised to unit length when `unit`) or of v
  // (`value`), as dense gemm-dtype rows.
  void Gather(Workspace* s, int64_t bh, const int32_t* positions, int64_t n,
              bool value, bool unit, void* dst) const {
    const int64_t cols = value ? dv_ : dim_;
    const float* norm = norm_.data() + bh * length_;
    char* out = static_cast<char*>(dst);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = positions[r];
      const char* src = value ? ValueRow(bh, i) : QueryRow(bh, i);
      char* row = out + r * cols * gemm_size_;
      if (!unit && gemm_ == p_.dtype) {
        std::memcpy(row, src, cols * gemm_size_);
        continue;
      }
      float* f = gemm_ == DType::kFloat32 ? reinterpret_cast<float*>(row)
                                          : s->row.Get<float>(cols);
      ops_.load(src, p_.dtype, cols, f);
      if (unit) ops_.scale(f, cols, norm[i] > 0.0f ? 1.0f / norm[i] : 0.0f);
      if (gemm_ == DType::kBFloat16) {
        ops_.to_bf16(f, cols, reinterpret_cast<uint16_t*>(row));
      }
    }
  }

  // dst = the dense gemm-dtype query rows `src` of `positions` divided by
  // their norms (the same values Gather with `unit` gives).
  void Normalize(Workspace* s, int64_t bh, const int32_t* positions, int64_t n,
                 const void* src, void* dst) const {
    const float* norm = norm_.data() + bh * length_;
    for (int64_t r = 0; r < n; ++r) {
      const float ni = norm[positions[r]];
      const float inv = ni > 0.0f ? 1.0f / ni : 0.0f;
      if (gemm_ == DType::kFloat32) {
        const float* x = static_cast<const float*>(src) + r * dim_;
        float* y = static_cast<float*>(dst) + r * dim_;
        for (int64_t d = 0; d < dim_; ++d) y[d] = x[d] * inv;
        continue;
      }
      float* f = s->row.Get<float>(dim_);
      ops_.load(static_cast<const uint16_t*>(src) + r * dim_, gemm_, dim_, f);
      ops_.scale(f, dim_, inv);
      ops_.to_bf16(f, dim_, static_cast<uint16_t*>(dst) + r * dim_);
    }
  }

  // Item `item` of (b, h) in round `round`: a span of chunks, or one block
  // of a large chunk's rows (AttendItems).
  absl::Status Attend(Workspace* s, int64_t bh, int64_t round, int64_t item,
                      bool weights) {
    const int32_t* order = OrderOf(bh, round);
    if (span_chunks_ == 0) {
      const int64_t chunk = item / row_blocks_;
      const int64_t t0 = chunk * chunk_ + (item % row_blocks_) * query_rows_;
      const int64_t t1 =
          std::min({t0 + query_rows_, (chunk + 1) * chunk_, length_});
      if (t0 >= t1) return absl::OkStatus();
      void* q = s->q.Get<char>((t1 - t0) * dim_ * gemm_size_);
      Gather(s, bh, order + t0, t1 - t0, /*value=*/false, /*unit=*/false, q);
      return AttendRows(s, bh, round, chunk, t0, t1, q, {}, weights);
    }
    // The span's chunks [c0, c1) read keys from sorted positions [k0, k1).
    const int64_t c0 = item * span_chunks_;
    const int64_t c1 = std::min(chunks_, c0 + span_chunks_);
    const int64_t q0 = c0 * chunk_;
    const int64_t k0 = std::max<int64_t>(0, q0 - chunk_);
    const int64_t k1 = std::min(length_, c1 * chunk_);
    // The queries of every row of the span's keys, then the keys normalised
    // from that copy: each row is read from the input once.
    void* q = s->q.Get<char>((k1 - k0) * dim_ * gemm_size_);
    Gather(s, bh, order + k0, k1 - k0, /*value=*/false, /*unit=*/false, q);
    void* k = s->k.Get<char>((k1 - k0) * dim_ * gemm_size_);
    Normalize(s, bh, order + k0, k1 - k0, q, k);
    void* v = nullptr;
    if (!weights) {
      v = s->v.Get<char>((k1 - k0) * dv_ * gemm_size_);
      Gather(s, bh, order + k0, k1 - k0, /*value=*/true, /*unit=*/false, v);
    }
    const SpanKeys keys{k0, k, v};
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t end = std::min(length_, (chunk + 1) * chunk_);
      for (int64_t t0 = chunk * chunk_; t0 < end; t0 += query_rows_) {
        const int64_t t1 = std::min(t0 + query_rows_, end);
        RETURN_IF_ERROR(AttendRows(
            s, bh, round, chunk, t0, t1,
            static_cast<const char*>(q) + (t0 - k0) * dim_ * gemm_size_, keys,
            weights));
      }
    }
    return absl::OkStatus();
  }

  // A span's gathered keys (normalised) and values, rows from sorted
  // position `begin`; k null when keys are gathered per score tile.
  struct SpanKeys {
    int64_t begin = 0;
    const void* k = nullptr;
    const void* v = nullptr;
  };

  // Sorted rows [t0, t1) of chunk `chunk` in round `round` (queries `q`,
  // dense gemm-dtype rows): their attention over the chunk and the previous
  // one. Without `weights`, folds (o_r, lse_r) into the running combination;
  // with it, adds exp(s_ij - LSE_i) to w_ij (the combination being complete).
  absl::Status AttendRows(Workspace* s, int64_t bh, int64_t round,
                          int64_t chunk, int64_t t0, int64_t t1, const void* q,
                          const SpanKeys& keys, bool weights) {
    const int32_t* order = OrderOf(bh, round);
    const int64_t m = t1 - t0;
    const int64_t k_begin = std::max<int64_t>(0, (chunk - 1) * chunk_);
    const int64_t k_end = std::min(length_, (chunk + 1) * chunk_);
    const int64_t key_length = KeyLength(bh);
    const float* norm = norm_.data() + bh * length_;
    const float* run_max = run_max_.data() + bh * length_;
    const float* run_sum = run_sum_.data() + bh * length_;
    const bool bf16 = gemm_ == DType::kBFloat16;

    const int64_t kb = std::min(kKeyBlock, k_end - k_begin);
    const bool span = keys.k != nullptr;
    void* k_tile = span ? nullptr : s->k.Get<char>(kb * dim_ * gemm_size_);
    void* v_tile =
        span || weights ? nullptr : s->v.Get<char>(kb * dv_ * gemm_size_);
    float* scores = s->scores.Get<float>(m * kb);
    uint16_t* probs16 = bf16 ? s->probs.Get<uint16_t>(m * kb) : nullptr;
    float* row_max = s->row_max.Get<float>(m);
    float* row_sum = s->row_sum.Get<float>(m);
    float* acc = weights ? nullptr : s->acc.Get<float>(m * dv_);
    float* bias = s->bias.Get<float>(kb);
    std::fill_n(row_max, m, kNegInf);
    std::fill_n(row_sum, m, 0.0f);
    if (acc != nullptr) std::fill_n(acc, m * dv_, 0.0f);
    // Keys j < limit are allowed for row r (causal: j <= i).
    std::vector<int32_t>& limit = s->limits;
    limit.resize(m);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = order[t0 + r];
      limit[r] = static_cast<int32_t>(p_.causal ? std::min(key_length, i + 1)
                                                : key_length);
    }

    for (int64_t k0 = k_begin; k0 < k_end; k0 += kb) {
      const int64_t n = std::min(kb, k_end - k0);
      const int32_t* key_pos = order + k0;
      const void* k = k_tile;
      if (span) {
        k = static_cast<const char*>(keys.k) +
            (k0 - keys.begin) * dim_ * gemm_size_;
      } else {
        Gather(s, bh, key_pos, n, /*value=*/false, /*unit=*/true, k_tile);
      }
      const MatmulShape qk{m, n, dim_, dim_, dim_, kb, true, gemm_, false};
      RETURN_IF_ERROR(s->matmul->Run(qk, q, k, scores));
      for (int64_t r = 0; r < m; ++r) {
        const int32_t i = order[t0 + r];
        const int32_t lim = limit[r];
        for (int64_t c = 0; c < n; ++c) {
          const int32_t j = key_pos[c];
          bias[c] = (j < lim) & (j != i) ? 0.0f : kNegInf;
        }
        float* srow = scores + r * kb;
        const float tile_max =
            ops_.scale_mask_max(srow, n, p_.scale, 0, n, bias);
        if (weights) {
          if (tile_max != kNegInf) row_max[r] = tile_max;  // any key allowed
          if (run_sum[i] == 0.0f || tile_max == kNegInf) continue;
          const float lse = run_max[i] + std::log(run_sum[i]);
          ops_.exp_sum_f32(srow, n, lse, srow);
          float* w = weights_ + (bh * length_ + i) * length_;
          for (int64_t c = 0; c < n; ++c) w[key_pos[c]] += srow[c];
          continue;
        }
        const float new_max = std::max(row_max[r], tile_max);
        if (new_max == kNegInf) {
          if (bf16) {
            std::memset(probs16 + r * kb, 0, n * sizeof(uint16_t));
          } else {
            std::memset(srow, 0, n * sizeof(float));
          }
          continue;
        }
        const float sum =
            bf16 ? ops_.exp_sum_bf16(srow, n, new_max, probs16 + r * kb)
                 : ops_.exp_sum_f32(srow, n, new_max, srow);
        if (new_max != row_max[r]) {
          if (row_max[r] != kNegInf) {
            const float alpha = std::exp(row_max[r] - new_max);
            ops_.scale(acc + r * dv_, dv_, alpha);
            row_sum[r] *= alpha;
          }
          row_max[r] = new_max;
        }
        row_sum[r] += sum;
      }
      if (weights) continue;
      const void* v = v_tile;
      if (span) {
        v = static_cast<const char*>(keys.v) +
            (k0 - keys.begin) * dv_ * gemm_size_;
      } else {
        Gather(s, bh, key_pos, n, /*value=*/true, /*unit=*/false, v_tile);
      }
      const MatmulShape pv{m, dv_, n, kb, dv_, dv_, false, gemm_, true};
      const void* probs = bf16 ? static_cast<const void*>(probs16) : scores;
      RETURN_IF_ERROR(s->matmul->Run(pv, probs, v, acc));
    }

    for (int64_t r = 0; r < m; ++r) {
      const int32_t i = order[t0 + r];
      // Nothing but itself allowed: the position attends itself, whose score
      // is scale * q_i . q_i / |q_i| = scale * |q_i|.
      const bool self_only = row_max[r] == kNegInf && i < key_length;
      if (weights) {
        if (self_only && run_sum[i] != 0.0f) {
          const float lse = run_max[i] + std::log(run_sum[i]);
          weights_[(bh * length_ + i) * length_ + i] +=
              std::exp(p_.scale * norm[i] - lse);
        }
        continue;
      }
      float* o = acc + r * dv_;
      float lse;
      if (row_max[r] != kNegInf) {
        ops_.scale(o, dv_, 1.0f / row_sum[r]);
        lse = row_max[r] + std::log(row_sum[r]);
      } else if (self_only) {
        ops_.load(ValueRow(bh, i), p_.dtype, dv_, o);
        lse = p_.scale * norm[i];
      } else {
        continue;
      }
      Combine(bh * length_ + i, o, lse);
    }
    return absl::OkStatus();
  }

  // Folds one round's (o, lse) of position `pos` into its running
  // combination: M = the largest lse so far, S = sum exp(lse_r - M),
  // acc = sum exp(lse_r - M) * o_r.
  void Combine(int64_t pos, const float* o, float lse) {
    float& max = run_max_[pos];
    float& sum = run_sum_[pos];
    float* acc = acc_.get() + pos * dv_;
    if (sum == 0.0f) {
      std::memcpy(acc, o, dv_ * sizeof(float));
      max = lse;
      sum = 1.0f;
    } else if (lse > max) {
      const float f = std::exp(max - lse);
      for (int64_t d = 0; d < dv_; ++d) acc[d] = acc[d] * f + o[d];
      sum = sum * f + 1.0f;
      max = lse;
    } else {
      const float f = std::exp(lse - max);
      for (int64_t d = 0; d < dv_; ++d) acc[d] += f * o[d];
      sum += f;
    }
  }

  // out_i = acc_i / S_i for positions [block * kHashRows, ...) of one (b, h);
  // zeros where no round had an allowed key.
  void Write(Workspace* s, int64_t bh, int64_t block) {
    const int64_t i0 = block * kHashRows;
    const int64_t i1 = std::min(length_, i0 + kHashRows);
    const int64_t size = static_cast<int64_t>(DTypeSize(out_dtype_));
    float* zeros = nullptr;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t pos = bh * length_ + i;
      void* dst = static_cast<char*>(out_) +
                  out_strides_.offset(bh / heads_, bh % heads_, i) * size;
      if (run_sum_[pos] > 0.0f) {
        ops_.store_scaled(acc_.get() + pos * dv_, dv_, 1.0f / run_sum_[pos],
                          dst, out_dtype_);
      } else {
        if (zeros == nullptr) {
          zeros = s->row.Get<float>(dv_);
          std::fill_n(zeros, dv_, 0.0f);
        }
        ops_.store_scaled(zeros, dv_, 1.0f, dst, out_dtype_);
      }
    }
  }

  const Problem& p_;
  const VecOps& ops_;
  const DType gemm_;
  const int64_t gemm_size_;
  void* const out_;
  const DType out_dtype_;
  const Strides4 out_strides_;
  float* const weights_;
  const int64_t threads_;
  const int64_t heads_, bh_count_, length_, dim_, dv_, rounds_, half_, chunk_,
      chunks_, row_blocks_, query_rows_, span_chunks_;

  std::vector<float> rotations_;
  std::vector<float> norm_;
  std::vector<int32_t> bucket_, order_;
  std::vector<float> run_max_, run_sum_;
  std::unique_ptr<float[]> acc_;
};

}  // namespace

absl::Status RunLsh(const Problem& p, const AttentionOutputs& outputs,
                    const Strides4& out_strides,
                    const VariantContext& context) {
  const AttentionShape& s = p.shape;
  if (s.batch == 0 || s.q_heads == 0 || s.q_len == 0) return absl::OkStatus();
  LshCall call(p, outputs, out_strides, *context.ops, context.gemm_dtype,
               context.num_threads());
  return call.Run(context.ws);
}

}  // namespace attnserve
