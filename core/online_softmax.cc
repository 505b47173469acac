// The online softmax of a row set over a range of keys (online_softmax.h):
// the per-block products (oneDNN, or AMX tiles interleaved with the softmax),
// the softmax update of each row, block-sparse layouts' gathered blocks.

#include "core/online_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/amx_products.h"
#include "core/kernel_common.h"
#include "core/status_macros.h"

namespace attnserve {
namespace {

// Sets each row's allowed key interval from causal/window/key_lengths
// (Problem::KeyRange), or with `sink_part` its second one, the kept first
// keys (Problem::SinkEnd), clipped to [k_begin, k_end), and returns the
// union's bounds.
void RowRanges(const Problem& p, const RowSet& rows, Workspace* ws,
               int64_t k_begin, int64_t k_end, bool sink_part, int64_t* lo_all,
               int64_t* hi_all) {
  *lo_all = k_end;
  *hi_all = k_begin;
  for (int64_t r = 0; r < rows.count; ++r) {
    int64_t lo, hi;
    p.KeyRange(rows.batch, ws->row_index[r], &lo, &hi);
    if (sink_part) {
      hi = p.SinkEnd(lo, hi);
      lo = 0;
    }
    lo = std::max(lo, k_begin);
    hi = std::min(hi, k_end);
    ws->row_lo[r] = lo;
    ws->row_hi[r] = hi;
    if (lo < hi) {
      *lo_all = std::min(*lo_all, lo);
      *hi_all = std::max(*hi_all, hi);
    }
  }
}

// The online-softmax state of a row set and the operands of one key block.
struct BlockContext {
  const KernelArgs& args;
  const RowSet& rows;
  Workspace* ws;
  float* row_max;
  float* row_sum;
  float* row_u;  // with row statistics (KernelArgs::row_stats), else null
  float* acc;
  float* scores;
  uint16_t* probs16;  // bf16 products only
  float* bias;        // elementwise masks only
  int64_t lds = 0;    // row strides of scores and probs16
  int64_t ldp = 0;
  // Ragged edges padded (kernel_common.h, "Tile shapes"): flash and decode
  // pad keys; flash pads its last row group, whose rows (padded, ld = D) are
  // in q_tail from row q_tail_row on. Block-sparse tiles are the layout's.
  bool pad_rows = false;
  bool pad_keys = false;
  // The products on AMX tiles (KernelArgs::amx, where this row set's tiles
  // allow it): every block's rows a multiple of 16.
  bool amx = false;
  const void* q_tail = nullptr;
  int64_t q_tail_row = 0;
};

// The keys of one span: n_full of them read in place (kp, vp) and the rest
// (fewer than kKeyGranule) from zero-padded copies of kKeyGranule rows
// (k_tail, v_tail); or, for a small span, all of them from one zero-padded
// copy (whole_copy).
struct SpanOperands {
  const void* kp = nullptr;
  int64_t ldk = 0;
  const void* vp = nullptr;
  int64_t ldv = 0;
  int64_t n_full = 0;
  const void* k_tail = nullptr;  // ld = D, or null when nothing is padded
  const void* v_tail = nullptr;  // ld = Dv
  // kp and vp are zero-padded copies of the whole span (ld = D, Dv), to
  // PaddedKeys(n) rows.
  bool whole_copy = false;
  // The AMX path: the span's K and V packed for the tiles (amx_products.h),
  // packed_n keys of them (a row group may use fewer), read instead of all of
  // the above.
  const uint16_t* packed_k = nullptr;
  const uint16_t* packed_v = nullptr;
  int64_t packed_n = 0;
  // KernelArgs::kv_rows: kp and vp are the cache's rows (ld = D, Dv) in its
  // stored dtype, with a scale per row for int8 (else null).
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// A span this small (K and V bytes) is copied whole when it needs padding:
// one product instead of a full part and a tail costs less than the copy.
constexpr size_t kWholeSpanCopyBytes = 32 << 10;

// Row r's running max becomes new_max (its acc, sum and entropy sum
// rescaled when it grew), and `sum` (of probabilities relative to new_max)
// and `u` (their entropy sum: VecOps::scaled_exp_entropy_f32) are added.
void AddToRow(const BlockContext& c, int64_t r, float new_max, float sum,
              float u) {
  if (new_max != c.row_max[r]) {
    if (c.row_max[r] != kNegInf) {
      const int64_t dv = c.args.p->shape.value_dim;
      const float shift = c.row_max[r] - new_max;
      const float alpha = std::exp(shift);
      c.args.ops->scale(c.acc + r * dv, dv, alpha);
      // p·(t - old) becomes alpha·p·(t - old + shift).
      if (c.row_u != nullptr) {
        c.row_u[r] = alpha * (c.row_u[r] + shift * c.row_sum[r]);
      }
      c.row_sum[r] *= alpha;
    }
    c.row_max[r] = new_max;
  }
  c.row_sum[r] += sum;
  if (c.row_u != nullptr) c.row_u[r] += u;
}

// The online-softmax update of row r of the set by its scores against keys
// [k0, k0 + n) (in c.scores): p into the row's probabilities (c.probs16 for
// bf16 products, else the scores in place), zeros from n to cols; the row's
// max and sum updated and its acc rescaled when the max grew. With
// `use_bias`, the elementwise mask parts (FillBias) apply; with
// `all_allowed` the row's interval is not consulted.
void SoftmaxRow(const BlockContext& c, int64_t r, int64_t k0, int64_t n,
                int64_t cols, bool use_bias, bool all_allowed) {
  const KernelArgs& args = c.args;
  const Problem& p = *args.p;
  const VecOps& ops = *args.ops;
  Workspace* ws = c.ws;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  float* s = c.scores + r * c.lds;
  uint16_t* probs16 = bf16 ? c.probs16 + r * c.ldp : nullptr;
  const int64_t lo = all_allowed ? 0 : ws->row_lo[r] - k0;
  const int64_t hi = all_allowed ? n : ws->row_hi[r] - k0;
  float* bias = use_bias ? c.bias : nullptr;
  // A bias that is one value over the row's allowed keys here: no bias row,
  // the passes run against max - shift (exp(t + shift - max)).
  float shift = 0.0f;
  if (bias != nullptr) {
    const int64_t a = std::max<int64_t>(lo, 0), z = std::min(hi, n);
    if (UniformBias(args, ws->row_head[r], ws->row_index[r], k0 + a, z - a,
                    &shift)) {
      bias = nullptr;
    } else {
      FillBias(args, c.rows.batch, ws->row_head[r], ws->row_index[r], k0, n,
               bias);
    }
  }
  if (p.softcap > 0) ops.soft_cap(s, n, p.scale, p.softcap);
  // Two passes over the raw scores: the row's maximum, then the
  // probabilities (written once, over the n real keys; the padding keys'
  // are zeros).
  float tile_max = ops.scaled_max(s, n, p.pass_scale(), lo, hi, bias);
  if (tile_max != kNegInf) tile_max += shift;
  if (tile_max == kNegInf) {
    // Nothing allowed in this block: it adds nothing to the row.
    if (bf16) {
      std::memset(probs16, 0, cols * sizeof(uint16_t));
    } else {
      std::memset(s, 0, cols * sizeof(float));
    }
    return;
  }
  const float new_max = std::max(c.row_max[r], tile_max);
  const float pass_max = new_max - shift;
  float sum, u = 0.0f;
  if (c.row_u != nullptr) {
    // With row statistics the accurate f32 pass, which also sums p·(t - max),
    // in place (bf16 products: then rounded into their row).
    sum = ops.scaled_exp_entropy_f32(s, n, p.pass_scale(), lo, hi, bias,
                                     pass_max, s, &u);
    if (bf16) {
      ops.to_bf16(s, n, probs16);
      std::memset(probs16 + n, 0, (cols - n) * sizeof(uint16_t));
    } else {
      std::memset(s + n, 0, (cols - n) * sizeof(float));
    }
  } else if (bf16) {
    sum = ops.scaled_exp_sum_bf16(s, n, p.pass_scale(), lo, hi, bias, pass_max,
                                  probs16);
    std::memset(probs16 + n, 0, (cols - n) * sizeof(uint16_t));
  } else {
    sum =
        ops.scaled_exp_sum_f32(s, n, p.pass_scale(), lo, hi, bias, pass_max, s);
    std::memset(s + n, 0, (cols - n) * sizeof(float));
  }
  AddToRow(c, r, new_max, sum, u);
}

// The softmax of queued rows (bf16 products), run in small units between
// the tile steps of the AMX products of other rows (amx_products.h,
// AmxInterleave), so that the core's vector units work while the tiles
// compute. A row is one unit for its maximum, then one per kExpChunk keys of
// its exp pass: small units, because the core looks only a few hundred
// instructions ahead, so the tiles idle behind a long stretch of vector work
// (B1 H16 L2048 D64, one thread: 256 keys a unit beat 128 by 3 %, and whole
// rows a unit, 32-row groups otherwise the same, were 17 % slower). After a
// row's first key block its max pass is skipped ("lazy"): exp runs against
// the running max, and a chunk whose sum shows a score far above it makes the
// row take this block's max and start over; the result is the same softmax.
// Rows from r1 on are padding rows: their probabilities are zeroed.
class InterleavedRows final : public AmxInterleave {
 public:
  InterleavedRows(const BlockContext& c, int64_t r1, int64_t k0, int64_t n,
                  int64_t cols, bool use_bias, bool all_allowed)
      : c_(c),
        r1_(r1),
        k0_(k0),
        n_(n),
        cols_(cols),
        use_bias_(use_bias),
        all_allowed_(all_allowed) {}

  // Rows [begin, end), spread evenly over about `steps` tile steps.
  void Queue(int64_t begin, int64_t end, int64_t steps) {
    next_ = begin;
    end_ = end;
    const int64_t units =
        (end - begin) * (1 + (n_ + kExpChunk - 1) / kExpChunk);
    per_step_ =
        std::max<int64_t>(1, (units + steps - 1) / std::max<int64_t>(steps, 1));
  }
  void Step() override {
    for (int64_t u = 0; u < per_step_ && Unit(); ++u) {
    }
  }
  // The queued rows not yet done.
  void Drain() {
    while (Unit()) {
    }
  }

 private:
  static constexpr int64_t kExpChunk = 256;
  // A lazy chunk stands while its sum stays at most e^20, so no score it
  // keeps exceeds the running max by more than 20 (p up to 4.8e8: in the
  // range of f32 and of bf16, which has f32's, at their usual relative
  // precision); past that (or NaN) the row takes the block's max.
  static constexpr float kLazyLimit = 4.8e8f;

  // One unit of work; false when none is left.
  bool Unit() {
    if (next_ >= end_) return false;
    const int64_t r = next_;
    uint16_t* probs = c_.probs16 + r * c_.ldp;
    if (r >= r1_) {
      std::memset(probs, 0, cols_ * sizeof(uint16_t));
      ++next_;
      return true;
    }
    const Problem& p = *c_.args.p;
    const VecOps& ops = *c_.args.ops;
    float* s = c_.scores + r * c_.lds;
    if (pos_ < 0) {
      // The row's maximum (its scores soft-capped first, once).
      if (p.softcap > 0) ops.soft_cap(s, n_, p.scale, p.softcap);
      Workspace* ws = c_.ws;
      bias_ = use_bias_ ? c_.bias : nullptr;
      if (bias_ != nullptr) {
        FillBias(c_.args, c_.rows.batch, ws->row_head[r], ws->row_index[r], k0_,
                 n_, bias_);
      }
      lo_ = all_allowed_ ? 0 : ws->row_lo[r] - k0_;
      hi_ = all_allowed_ ? n_ : ws->row_hi[r] - k0_;
      sum_ = 0.0f;
      pos_ = 0;
      // A row that has a maximum from earlier key blocks skips this block's
      // max pass and takes exp against the running max (each exp chunk checks
      // its sum against kLazyLimit).
      lazy_ = c_.row_max[r] != kNegInf;
      if (lazy_) {
        new_max_ = c_.row_max[r];
        return true;
      }
      return TakeMax(r, s, probs);
    }
    // A chunk of the exp pass.
    const int64_t count = std::min(kExpChunk, n_ - pos_);
    const float sum = ops.scaled_exp_sum_bf16(
        s + pos_, count, p.pass_scale(), lo_ - pos_, hi_ - pos_,
        bias_ != nullptr ? bias_ + pos_ : nullptr, new_max_, probs + pos_);
    if (lazy_ && !(sum <= kLazyLimit)) {
      // A score beyond the running max by more than the margin (or NaN):
      // the row again, with this block's max.
      lazy_ = false;
      sum_ = 0.0f;
      pos_ = 0;
      return TakeMax(r, s, probs);
    }
    sum_ += sum;
    pos_ += count;
    if (pos_ == n_) {
      std::memset(probs + n_, 0, (cols_ - n_) * sizeof(uint16_t));
      // (No row statistics on AMX tiles: ArgsFor.)
      AddToRow(c_, r, new_max_, sum_, /*u=*/0.0f);
      pos_ = -1;
      ++next_;
    }
    return true;
  }

  // Row r's max over this block into new_max_; a row with nothing allowed
  // here is done (zeros).
  bool TakeMax(int64_t r, const float* s, uint16_t* probs) {
    const float tile_max = c_.args.ops->scaled_max(
        s, n_, c_.args.p->pass_scale(), lo_, hi_, bias_);
    if (tile_max == kNegInf) {
      std::memset(probs, 0, cols_ * sizeof(uint16_t));
      pos_ = -1;
      ++next_;
      return true;
    }
    new_max_ = std::max(c_.row_max[r], tile_max);
    return true;
  }

  const BlockContext& c_;
  const int64_t r1_, k0_, n_, cols_;
  const bool use_bias_, all_allowed_;
  int64_t next_ = 0, end_ = 0, per_step_ = 1;
  // The row in progress: pos_ = -1 before its maximum, else the next key of
  // its exp pass; lazy_ when new_max_ is the running max, not this block's.
  int64_t pos_ = -1, lo_ = 0, hi_ = 0;
  float* bias_ = nullptr;
  float new_max_ = 0.0f, sum_ = 0.0f;
  bool lazy_ = false;
};

// ProcessBlock on AMX tiles, as a pipeline over groups of 32 rows: while the
// tiles compute the scores of group g and accumulate P·V of group g - 2, the
// vector units run the softmax of group g - 1 (InterleavedRows). `rows` (a
// multiple of 16) from r0, q (ld ldq) at row r0; cols = RoundUp(n, 32).
void ProcessBlockAmx(const BlockContext& c, int64_t r0, int64_t r1,
                     int64_t rows, int64_t k0, int64_t n, int64_t cols,
                     const uint16_t* q, int64_t ldq, const SpanOperands& op,
                     bool use_bias, bool all_allowed) {
  const Problem& p = *c.args.p;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  constexpr int64_t kGroup = 32;
  const int64_t groups = (rows + kGroup - 1) / kGroup;
  const auto group_rows = [&](int64_t g) {
    return std::min(kGroup, rows - g * kGroup);
  };
  InterleavedRows softmax(c, r1, k0, n, cols, use_bias, all_allowed);
  for (int64_t g = 0; g < groups + 2; ++g) {
    const bool scores = g < groups;
    const bool accumulate = g >= 2;
    const int64_t steps =
        (scores ? AmxScoresSteps(group_rows(g), n, dim) : 0) +
        (accumulate ? AmxAccumulateSteps(group_rows(g - 2), n, dv) : 0);
    if (g >= 1 && g - 1 < groups) {
      const int64_t first = r0 + (g - 1) * kGroup;
      softmax.Queue(first, first + group_rows(g - 1), steps);
    }
    if (scores) {
      AmxScores(q + g * kGroup * ldq, ldq, group_rows(g), op.packed_k, n, dim,
                c.scores + (r0 + g * kGroup) * c.lds, c.lds, &softmax);
    }
    if (accumulate) {
      const int64_t first = r0 + (g - 2) * kGroup;
      AmxAccumulate(c.probs16 + first * c.ldp, c.ldp, group_rows(g - 2),
                    op.packed_v, op.packed_n, n, dv, c.acc + first * dv, dv,
                    &softmax);
    }
    softmax.Drain();
  }
}

// Rows [r0, r1) of the set against keys [k0, k0 + n) of `op`; with
// `use_bias`, the elementwise mask parts (FillBias) apply. With `all_allowed`
// (gathered blocks, which every row allows whole) the rows' intervals are not
// consulted.
absl::Status ProcessBlock(const BlockContext& c, int64_t r0, int64_t r1,
                          int64_t k0, int64_t n, const SpanOperands& op,
                          bool use_bias, bool all_allowed = false) {
  const KernelArgs& args = c.args;
  const Problem& p = *args.p;
  Workspace* ws = c.ws;
  const int64_t kb = args.k_block;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  const size_t es = DTypeSize(args.gemm_dtype);
  const int64_t m = r1 - r0;
  // A padded row group (the set's last rows) reads its zero-padded copy.
  const bool padded_rows = c.pad_rows && r0 >= c.q_tail_row &&
                           c.q_tail != nullptr && m != args.q_block &&
                           m != kRowGranule;
  const int64_t rows = padded_rows ? PaddedRows(m) : m;
  const char* q =
      padded_rows ? static_cast<const char*>(c.q_tail)
                  : static_cast<const char*>(c.rows.q) + r0 * c.rows.ldq * es;
  const int64_t ldq = padded_rows ? dim : c.rows.ldq;
  if (op.packed_k != nullptr) {
    // AMX: the packed span, whose keys past n are zeros.
    const int64_t cols = RoundUp(n, 32);
    if (rows % 16 != 0 || cols > kb) {
      return absl::InternalError(absl::StrCat("AMX tile of ", rows,
                                              " rows and ", cols,
                                              " keys in a key block of ", kb));
    }
    ProcessBlockAmx(c, r0, r1, rows, k0, n, cols,
                    reinterpret_cast<const uint16_t*>(q), ldq, op, use_bias,
                    all_allowed);
    return absl::OkStatus();
  }
  if (args.kv_rows) {
    const VecOps& ops = *args.ops;
    const DType kv = p.kv_layout.dtype();
    float* scores = c.scores + r0 * c.lds;
    ops.kv_scores(reinterpret_cast<const float*>(q), ldq, m, dim, op.kp, kv,
                  op.k_scales, n, scores, c.lds);
    for (int64_t r = r0; r < r1; ++r) {
      SoftmaxRow(c, r, k0, n, n, use_bias, all_allowed);
    }
    ops.kv_accumulate(scores, c.lds, m, op.vp, kv, op.v_scales, n, dv,
                      c.acc + r0 * dv, dv);
    return absl::OkStatus();
  }
  // Keys in place, then the padded tail when this block reaches it.
  const bool tail = op.k_tail != nullptr && n > op.n_full;
  const int64_t full = tail ? op.n_full : (op.whole_copy ? PaddedKeys(n) : n);
  const int64_t cols = tail ? full + kKeyGranule : full;
  float* scores = c.scores + r0 * c.lds;
  if (full > 0) {
    const MatmulShape qk{
        rows, full, dim, ldq, op.ldk, c.lds, true, args.gemm_dtype, false};
    RETURN_IF_ERROR(ws->matmul->Run(qk, q, op.kp, scores));
  }
  if (tail) {
    const MatmulShape qk{rows, kKeyGranule,     dim,  ldq, dim, c.lds,
                         true, args.gemm_dtype, false};
    RETURN_IF_ERROR(ws->matmul->Run(qk, q, op.k_tail, scores + full));
  }
  for (int64_t r = r0; r < r1; ++r) {
    SoftmaxRow(c, r, k0, n, cols, use_bias, all_allowed);
  }
  // The padding rows' probabilities: zeros (f32 scores of zero query rows are
  // zeros already).
  if (bf16) {
    for (int64_t r = r1; r < r0 + rows; ++r) {
      std::memset(c.probs16 + r * c.ldp, 0, cols * sizeof(uint16_t));
    }
  }

  const char* probs =
      bf16 ? reinterpret_cast<const char*>(c.probs16 + r0 * c.ldp)
           : reinterpret_cast<const char*>(scores);
  float* acc = c.acc + r0 * dv;
  if (full > 0) {
    const MatmulShape pv{
        rows, dv, full, c.ldp, op.ldv, dv, false, args.gemm_dtype, true};
    RETURN_IF_ERROR(ws->matmul->Run(pv, probs, op.vp, acc));
  }
  if (tail) {
    const MatmulShape pv{rows, dv,    kKeyGranule,     c.ldp, dv,
                         dv,   false, args.gemm_dtype, true};
    RETURN_IF_ERROR(ws->matmul->Run(pv, probs + full * es, op.v_tail, acc));
  }
  return absl::OkStatus();
}

// AMX: keys [k0, k0 + n) of the set's kv head (rows at kp, vp) packed for the
// tiles. A whole key block (k0 on a block, n = all its keys) is packed into
// the thread's copy of the head (Workspace::packed_k) once per Run, when the
// head fits kMaxPackedHeadBytes; anything else into span_k / span_v.
void PackSpan(const KernelArgs& args, const RowSet& rows, int64_t k0, int64_t n,
              int64_t k_end, const void* kp, int64_t ldk, const void* vp,
              int64_t ldv, Workspace* ws, const uint16_t** packed_k,
              const uint16_t** packed_v) {
  const Problem& p = *args.p;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  const int64_t kb = args.k_block;
  const int64_t blocks = (p.shape.k_len + kb - 1) / kb;
  const bool whole = k0 % kb == 0 && n == std::min(kb, k_end - k0);
  const bool fits = blocks * kb * (dim + dv) * 2 <= kMaxPackedHeadBytes;
  const auto pack = [&](uint16_t* pk, uint16_t* pv) {
    AmxPackKeys(static_cast<const uint16_t*>(kp), ldk, n, dim, pk);
    AmxPackValues(static_cast<const uint16_t*>(vp), ldv, n, dv, pv);
    *packed_k = pk;
    *packed_v = pv;
  };
  if (!whole || !fits) {
    pack(ws->span_k.Get<uint16_t>(AmxPackedKeysSize(n, dim)),
         ws->span_v.Get<uint16_t>(AmxPackedValuesSize(n, dv)));
    return;
  }
  if (ws->packed_problem != &p || ws->packed_batch != rows.batch ||
      ws->packed_kv_head != rows.kv_head) {
    ws->packed_problem = &p;
    ws->packed_batch = rows.batch;
    ws->packed_kv_head = rows.kv_head;
    ws->packed_blocks.assign(blocks, false);
    ws->packed_k.Get<uint16_t>(blocks * kb * dim);
    ws->packed_v.Get<uint16_t>(blocks * kb * dv);
  }
  const int64_t block = k0 / kb;
  uint16_t* pk = ws->packed_k.Get<uint16_t>(0) + block * kb * dim;
  uint16_t* pv = ws->packed_v.Get<uint16_t>(0) + block * kb * dv;
  if (ws->packed_blocks[block]) {
    *packed_k = pk;
    *packed_v = pv;
    return;
  }
  pack(pk, pv);
  ws->packed_blocks[block] = true;
}

// Keys [k0, k0 + span) of the set's key range (cut short after hi_all and at
// k_end): one product for every row that needs them, or one per row group
// when the rows need different lengths (the causal diagonal, padding) or the
// set is shorter than a query block.
absl::Status ProcessSpan(const BlockContext& c, int64_t k0, int64_t span,
                         int64_t hi_all, int64_t k_end, bool use_bias) {
  const KernelArgs& args = c.args;
  const Problem& p = *args.p;
  const RowSet& rows = c.rows;
  Workspace* ws = c.ws;
  const int64_t m = rows.count;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  const int64_t n = KeyBlockEnd(k0, span, hi_all, k_end) - k0;
  // Per row group: how far its rows need this block (0 = not at all).
  int64_t group_n[(kMaxQueryBlock + kRowGranule - 1) / kRowGranule];
  const int64_t groups = (m + kRowGranule - 1) / kRowGranule;
  bool any = false, ragged = c.pad_rows && m != args.q_block;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t hi = k0;
    for (int64_t r = g * kRowGranule; r < std::min(m, (g + 1) * kRowGranule);
         ++r) {
      if (ws->row_lo[r] < k0 + n && ws->row_hi[r] > k0) {
        hi = std::max(hi, ws->row_hi[r]);
      }
    }
    group_n[g] = hi > k0 ? KeyBlockEnd(k0, span, hi, k_end) - k0 : 0;
    any |= group_n[g] > 0;
    ragged |= group_n[g] != n;
  }
  if (!any) return absl::OkStatus();

  const Strides4& ks = p.k_strides;
  const Strides4& vs = p.v_strides;
  SpanOperands op;
  const auto Multiply = [&]() -> absl::Status {
    if (!ragged) return ProcessBlock(c, 0, m, k0, n, op, use_bias);
    for (int64_t g = 0; g < groups; ++g) {
      if (group_n[g] == 0) continue;
      RETURN_IF_ERROR(ProcessBlock(c, g * kRowGranule,
                                   std::min(m, (g + 1) * kRowGranule), k0,
                                   group_n[g], op, use_bias));
    }
    return absl::OkStatus();
  };
  const bool paged = p.kv_blocks != nullptr;
  if (args.kv_rows) {
    // The cache's rows as they are stored; ProcessBlock reads them.
    const bool int8 = p.kv_layout.dtype() == DType::kInt8;
    op.kp = p.PagedKeys(rows.kv_head, k0);
    op.vp = p.PagedValues(rows.kv_head, k0);
    op.ldk = dim;
    op.ldv = dv;
    op.k_scales = int8 ? p.PagedKeyScales(rows.kv_head, k0) : nullptr;
    op.v_scales = int8 ? p.PagedValueScales(rows.kv_head, k0) : nullptr;
    op.n_full = n;
    return Multiply();
  }
  if (paged && p.kv_layout.dtype() == DType::kInt8) {
    op.kp = DequantizedRows(args, p.PagedKeys(rows.kv_head, k0),
                            p.PagedKeyScales(rows.kv_head, k0), n, dim, &ws->k);
    op.ldk = dim;
    op.vp =
        DequantizedRows(args, p.PagedValues(rows.kv_head, k0),
                        p.PagedValueScales(rows.kv_head, k0), n, dv, &ws->v);
    op.ldv = dv;
  } else {
    op.kp = OperandRows(
        args,
        paged
            ? p.PagedKeys(rows.kv_head, k0)
            : ElementPtr(p.k, ks.offset(rows.batch, rows.kv_head, k0), p.dtype),
        paged ? dim : ks.row, n, dim, &ws->k, &op.ldk);
    op.vp = OperandRows(
        args,
        paged
            ? p.PagedValues(rows.kv_head, k0)
            : ElementPtr(p.v, vs.offset(rows.batch, rows.kv_head, k0), p.dtype),
        paged ? dv : vs.row, n, dv, &ws->v, &op.ldv);
  }
  op.n_full = n;
  if (c.amx) {
    // The span packed once for all of its row groups (and, when it is a
    // whole key block, for the head's other query blocks); padding keys are
    // zeros there, so no padded copies.
    PackSpan(args, rows, k0, n, k_end, op.kp, op.ldk, op.vp, op.ldv, ws,
             &op.packed_k, &op.packed_v);
    op.packed_n = n;
  }
  // A span that ends off the key granule (at Lk or a split's end): its last
  // keys from padded copies, so that the products keep granule shapes, where
  // PadsKeys allows.
  const int64_t rest = n % kKeyGranule;
  if (!c.amx && c.pad_keys && PadsKeys(n, args.k_block)) {
    const size_t es = DTypeSize(args.gemm_dtype);
    if (static_cast<size_t>(n * (dim + dv)) * es <= kWholeSpanCopyBytes) {
      const int64_t padded = PaddedKeys(n);
      op.kp = PaddedCopy(op.kp, op.ldk, n, padded, dim, es, &ws->k_tail);
      op.ldk = dim;
      op.vp = PaddedCopy(op.vp, op.ldv, n, padded, dv, es, &ws->v_tail);
      op.ldv = dv;
      op.whole_copy = true;
      return Multiply();
    }
    op.n_full = n - rest;
    op.k_tail =
        PaddedCopy(static_cast<const char*>(op.kp) + op.n_full * op.ldk * es,
                   op.ldk, rest, kKeyGranule, dim, es, &ws->k_tail);
    op.v_tail =
        PaddedCopy(static_cast<const char*>(op.vp) + op.n_full * op.ldv * es,
                   op.ldv, rest, kKeyGranule, dv, es, &ws->v_tail);
  }
  return Multiply();
}

// `rows` of `block` rows, the start keys of the layout's key blocks in
// `starts`, copied (as the product operand type) into one dense operand.
const void* GatherBlocks(const KernelArgs& args, const RowSet& rows,
                         absl::Span<const int64_t> starts, int64_t block,
                         bool values, ScratchBuffer* buffer) {
  const Problem& p = *args.p;
  const int64_t cols = values ? p.shape.value_dim : p.shape.head_dim;
  const void* base = values ? p.v : p.k;
  const Strides4& st = values ? p.v_strides : p.k_strides;
  const size_t es = DTypeSize(args.gemm_dtype);
  char* out = buffer->Get<char>(starts.size() * block * cols * es);
  char* dst = out;
  for (const int64_t k0 : starts) {
    for (int64_t t = 0; t < block; ++t, dst += cols * es) {
      const char* src = ElementPtr(
          base, st.offset(rows.batch, rows.kv_head, k0 + t), p.dtype);
      if (p.dtype == args.gemm_dtype) {
        std::memcpy(dst, src, cols * es);
      } else {
        args.ops->load(src, p.dtype, cols, reinterpret_cast<float*>(dst));
      }
    }
  }
  return out;
}

// The block-sparse path of Accumulate: the layout's key blocks in order, the
// skipped ones not at all. Kept blocks that every row of the set allows whole
// (inside every row's causal/window/padding interval, no explicit mask,
// ALiBi or T5 bias) are gathered, up to k_block keys, into one product — wide
// products whatever the layout's pattern; the other blocks (global-only ones,
// those on an interval's edge) run one by one with the per-element checks they
// need.
absl::Status AccumulateSparse(const BlockContext& c, const BlockLayout& layout,
                              int64_t k_begin, int64_t first_block,
                              int64_t hi_all, int64_t k_end) {
  const KernelArgs& args = c.args;
  const Problem& p = *args.p;
  const RowSet& rows = c.rows;
  Workspace* ws = c.ws;
  const int64_t bs = layout.block_size();
  const int64_t per_product = std::max<int64_t>(1, args.k_block / bs);
  const bool value_mask = p.mask != nullptr || p.alibi != nullptr ||
                          p.rel_table != nullptr || p.relk_table != nullptr;
  int64_t lo_max = k_begin, hi_min = k_end;
  for (int64_t r = 0; r < rows.count; ++r) {
    lo_max = std::max(lo_max, ws->row_lo[r]);
    hi_min = std::min(hi_min, ws->row_hi[r]);
  }
  std::vector<int64_t>& gathered = ws->block_starts;
  gathered.clear();
  const auto flush = [&]() -> absl::Status {
    if (gathered.empty()) return absl::OkStatus();
    const int64_t count = static_cast<int64_t>(gathered.size());
    absl::Status st;
    if (gathered.back() - gathered.front() == (count - 1) * bs) {
      // Consecutive: read in place.
      st = ProcessSpan(c, gathered.front(), count * bs, hi_all, k_end, false);
    } else {
      SpanOperands op;
      op.kp = GatherBlocks(args, rows, gathered, bs, /*values=*/false, &ws->k);
      op.ldk = p.shape.head_dim;
      op.vp = GatherBlocks(args, rows, gathered, bs, /*values=*/true, &ws->v);
      op.ldv = p.shape.value_dim;
      op.n_full = count * bs;
      st = ProcessBlock(c, 0, rows.count, 0, count * bs, op,
                        /*use_bias=*/false, /*all_allowed=*/true);
    }
    gathered.clear();
    return st;
  };
  for (int64_t k0 = first_block; k0 < hi_all; k0 += bs) {
    const BlockLayout::Tile tile = layout.TileKind(rows.layout_row, k0 / bs);
    if (tile == BlockLayout::Tile::kSkipped) continue;
    const bool whole = tile == BlockLayout::Tile::kKept && !value_mask &&
                       k0 >= lo_max && k0 + bs <= hi_min;
    if (whole) {
      gathered.push_back(k0);
      if (static_cast<int64_t>(gathered.size()) == per_product) {
        RETURN_IF_ERROR(flush());
      }
      continue;
    }
    RETURN_IF_ERROR(flush());
    RETURN_IF_ERROR(ProcessSpan(
        c, k0, bs, hi_all, k_end,
        /*use_bias=*/value_mask || tile == BlockLayout::Tile::kPartial));
  }
  return flush();
}

void* OutputRow(const KernelArgs& args, int64_t b, int64_t h, int64_t i) {
  return static_cast<char*>(args.out) +
         args.out_strides.offset(b, h, i) *
             static_cast<int64_t>(DTypeSize(args.out_dtype));
}

}  // namespace

absl::Status Accumulate(const KernelArgs& args, const RowSet& rows,
                        int64_t k_begin, int64_t k_end, bool pad_rows,
                        Workspace* ws) {
  const Problem& p = *args.p;
  const int64_t m = rows.count;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  const int64_t kb = args.k_block;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  // Block-sparse tiles are the layout's blocks (a fixed set per layout).
  const bool pad = p.block_layout == nullptr;
  pad_rows = pad_rows && pad;
  // Rows the buffers hold: a padded last group runs up to PaddedRows(m).
  const int64_t held = pad_rows ? PaddedRows(m) : m;

  // Row groups are q_block, kRowGranule (64) or padded to 16 rows.
  const bool amx = args.amx && pad_rows && args.q_block % 16 == 0 &&
                   dim % 32 == 0 && dv % 16 == 0 && kb % 32 == 0;
  // On AMX the rows of scores and P are a cache line longer than a key
  // block: tiles store and load 16 rows at once, and at a power-of-two
  // stride those rows share a few L1 sets (1.3x slower products, measured).
  const int64_t lds = amx ? kb + 16 : kb;
  const int64_t ldp = amx ? kb + 32 : kb;
  BlockContext c{args,
                 rows,
                 ws,
                 ws->row_max.Get<float>(m),
                 ws->row_sum.Get<float>(m),
                 args.row_stats() ? ws->row_u.Get<float>(m) : nullptr,
                 ws->acc.Get<float>(held * dv),
                 ws->scores.Get<float>(held * lds),
                 bf16 ? ws->probs.Get<uint16_t>(held * ldp) : nullptr,
                 p.has_elementwise_mask() ? ws->bias.Get<float>(kb) : nullptr};
  c.lds = lds;
  c.ldp = ldp;
  c.pad_rows = pad_rows;
  c.pad_keys = pad;
  c.amx = amx;
  if (pad_rows && m != args.q_block) {
    // The last row group, when it is not a full one: its rows zero-padded.
    const int64_t first = (m - 1) / kRowGranule * kRowGranule;
    const int64_t last = m - first;
    if (last != kRowGranule && last != args.q_block) {
      const size_t es = DTypeSize(args.gemm_dtype);
      c.q_tail =
          PaddedCopy(static_cast<const char*>(rows.q) + first * rows.ldq * es,
                     rows.ldq, last, PaddedRows(last), dim, es, &ws->q_tail);
      c.q_tail_row = first;
    }
  }
  std::fill(c.row_max, c.row_max + m, kNegInf);
  std::fill(c.row_sum, c.row_sum + m, 0.0f);
  if (c.row_u != nullptr) std::fill(c.row_u, c.row_u + m, 0.0f);
  std::fill(c.acc, c.acc + held * dv, 0.0f);

  // The kept first keys (sink_tokens) the window excluded, then the window's
  // keys: two disjoint intervals per row, into one softmax state.
  for (const bool sink_part : {true, false}) {
    if (sink_part && p.sink_tokens == 0) continue;
    int64_t lo_all, hi_all;
    RowRanges(p, rows, ws, k_begin, k_end, sink_part, &lo_all, &hi_all);
    if (lo_all >= hi_all) continue;
    const int64_t first_block = k_begin + (lo_all - k_begin) / kb * kb;
    if (rows.layout_row >= 0) {
      return AccumulateSparse(c, *p.block_layout, k_begin, first_block, hi_all,
                              k_end);
    }
    for (int64_t k0 = first_block; k0 < hi_all; k0 += kb) {
      RETURN_IF_ERROR(ProcessSpan(c, k0, kb, hi_all, k_end,
                                  /*use_bias=*/c.bias != nullptr));
    }
  }
  return absl::OkStatus();
}

void StoreRow(const KernelArgs& args, const float* acc, float max, float sum,
              float u, int64_t b, int64_t h, int64_t i) {
  float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  if (args.p->sinks != nullptr)
    inv = SinkNormalizer(args.p->sinks[h], max, sum);
  args.ops->store_scaled(acc, args.p->shape.value_dim, inv,
                         OutputRow(args, b, h, i), args.out_dtype);
  if (args.row_stats()) StoreRowStats(args, b, h, i, inv, sum, u);
}

}  // namespace attnserve
