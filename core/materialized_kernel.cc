// The materialized kernel (weights requested). A block of query rows at a
// time: the scores of each key block are multiplied into a tile and copied
// into the rows of the weights tensor, the exact softmax runs in place there,
// and P·V follows per key block from the weights copied back into a tile.
// The products keep the flash kernel's tile shapes (kernel_common.h, "Tile
// shapes": row groups of kRowGranule rows, key blocks of k_block keys or
// multiples of kKeyGranule, tiles of row stride k_block), and ragged row
// groups and key blocks are multiplied from zero-padded copies, so that a new
// Lq or Lk creates no product primitive (AttentionEngine::Prepare makes them
// all) where k_block is a multiple of kKeyGranule.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/kernel_common.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One key block's K or V rows as the products read them.
struct KeyOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  int64_t keys = 0;  // multiplied: the block's n, or n padded with zero rows
};

// Keys [k0, k0 + n) of `src` (row stride ld, rows of `width` elements) as the
// product operand type: in place where n is a tile width (k_block, or a
// multiple of kKeyGranule), else from a copy zero-padded to PaddedKeys(n)
// rows where the flash kernel pads too (PadsKeys), else the exact length.
KeyOperand KeyRows(const KernelArgs& args, const void* src, int64_t ld,
                   int64_t n, int64_t width, ScratchBuffer* converted,
                   ScratchBuffer* padded) {
  KeyOperand op;
  op.data = OperandRows(args, src, ld, n, width, converted, &op.ld);
  op.keys = n;
  if (PadsKeys(n, args.k_block)) {
    op.keys = PaddedKeys(n);
    op.data = PaddedCopy(op.data, op.ld, n, op.keys, width,
                         DTypeSize(args.gemm_dtype), padded);
    op.ld = width;
  }
  return op;
}

// Row group [g0, g0 + count) of a block's query rows (q, row stride ldq):
// whole groups in place, the last, shorter one from its zero-padded copy.
struct RowGroup {
  const void* q = nullptr;
  int64_t ldq = 0;
  int64_t count = 0;  // the block's rows in the group
  int64_t rows = 0;   // multiplied: count, or padded to PaddedRows(count)
};

int64_t QueryBlocks(const KernelArgs& args) {
  return (args.p->shape.q_len + args.q_block - 1) / args.q_block;
}

int64_t Blocks(const KernelArgs& args) {
  return args.p->shape.batch * args.p->shape.q_heads * QueryBlocks(args);
}

// Block `item` of a call: query block, head and batch row, most significant
// last.
absl::Status RunBlock(const KernelArgs& args, Workspace* w, int64_t item) {
  const Problem& p = *args.p;
  const VecOps& ops = *args.ops;
  const AttentionShape& s = p.shape;
  const int64_t qb = args.q_block;
  const int64_t kb = args.k_block;
  const int64_t lk = s.k_len;
  const int64_t d = s.head_dim;
  const int64_t dv = s.value_dim;
  const int64_t q_blocks = QueryBlocks(args);
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  const size_t es = DTypeSize(args.gemm_dtype);
  const int64_t block = item % q_blocks;
  const int64_t h = (item / q_blocks) % s.q_heads;
  const int64_t b = item / (q_blocks * s.q_heads);
  const int64_t hkv = h / p.group;
  const int64_t i0 = block * qb;
  const int64_t m = std::min(qb, s.q_len - i0);
  float* weights = args.weights + ((b * s.q_heads + h) * s.q_len + i0) * lk;

  // The block-aligned span of keys any row of the block may attend.
  w->row_lo.resize(m);
  w->row_hi.resize(m);
  int64_t* lo = w->row_lo.data();
  int64_t* hi = w->row_hi.data();
  int64_t lo_all = lk, hi_all = 0;
  for (int64_t r = 0; r < m; ++r) {
    p.KeyRange(b, i0 + r, &lo[r], &hi[r]);
    if (lo[r] < hi[r]) {
      lo_all = std::min(lo_all, lo[r]);
      hi_all = std::max(hi_all, hi[r]);
    }
    // The kept first keys (sink_tokens) the window excluded.
    const int64_t sink_end = p.SinkEnd(lo[r], hi[r]);
    if (sink_end > 0) {
      lo_all = 0;
      hi_all = std::max(hi_all, sink_end);
    }
  }
  // Room for the padding rows of the last row group.
  float* acc = w->acc.Get<float>((m + kRowPad) * dv);
  std::fill(acc, acc + (m + kRowPad) * dv, 0.0f);
  if (lo_all >= hi_all) {
    // Lk = 0 leaves weights empty (and possibly null): nothing to clear.
    if (lk > 0) std::memset(weights, 0, m * lk * sizeof(float));
    if (args.row_stats()) {
      for (int64_t r = 0; r < m; ++r) {
        StoreRowStats(args, b, h, i0 + r, 0.0f, 0.0f, 0.0f);
      }
    }
  } else {
    const int64_t span_begin = lo_all / kb * kb;
    const int64_t span_end =
        std::min(lk, (hi_all + kKeyGranule - 1) / kKeyGranule * kKeyGranule);
    const int64_t span = span_end - span_begin;
    int64_t ldq;
    const char* q = static_cast<const char*>(OperandRows(
        args, ElementPtr(p.q, p.q_strides.offset(b, h, i0), p.dtype),
        p.q_strides.row, m, d, &w->q, &ldq));
    const int64_t whole = m / kRowGranule * kRowGranule;
    const void* q_tail =
        whole < m ? PaddedCopy(q + whole * ldq * es, ldq, m - whole,
                               PaddedRows(m - whole), d, es, &w->q_tail)
                  : nullptr;
    const auto group = [&](int64_t g0) {
      const int64_t count = std::min(kRowGranule, m - g0);
      if (count == kRowGranule) {
        return RowGroup{q + g0 * ldq * es, ldq, count, count};
      }
      return RowGroup{q_tail, d, count, PaddedRows(count)};
    };
    float* tile = w->scores.Get<float>(kRowGranule * kb);

    // Scores, through the tile into the weights rows.
    for (int64_t k0 = span_begin; k0 < span_end; k0 += kb) {
      const int64_t n = std::min(kb, span_end - k0);
      const KeyOperand k = KeyRows(
          args, ElementPtr(p.k, p.k_strides.offset(b, hkv, k0), p.dtype),
          p.k_strides.row, n, d, &w->k, &w->k_tail);
      for (int64_t g0 = 0; g0 < m; g0 += kRowGranule) {
        const RowGroup g = group(g0);
        const MatmulShape qk{g.rows, k.keys,          d,    g.ldq, k.ld, kb,
                             true,   args.gemm_dtype, false};
        absl::Status st = w->matmul->Run(qk, g.q, k.data, tile);
        if (!st.ok()) return st;
        for (int64_t r = 0; r < g.count; ++r) {
          std::memcpy(weights + (g0 + r) * lk + k0, tile + r * kb,
                      n * sizeof(float));
        }
      }
    }

    // The exact softmax of each row, in place.
    float* bias = p.has_elementwise_mask() || p.sink_tokens > 0
                      ? w->bias.Get<float>(span)
                      : nullptr;
    for (int64_t r = 0; r < m; ++r) {
      float* row = weights + r * lk;
      std::memset(row, 0, span_begin * sizeof(float));
      std::memset(row + span_end, 0, (lk - span_end) * sizeof(float));
      const float* row_bias = nullptr;
      if (p.has_elementwise_mask()) {
        FillBias(args, b, h, i0 + r, span_begin, span, bias);
        row_bias = bias;
      }
      // With kept first keys [0, sink_end): the interval [0, hi) less the
      // keys between them and the window, masked through the bias (or
      // [0, sink_end) alone when the window is empty).
      int64_t row_lo = lo[r], row_hi = hi[r];
      const int64_t sink_end = p.SinkEnd(lo[r], hi[r]);
      if (sink_end > 0) {
        if (lo[r] < hi[r]) {
          if (row_bias == nullptr) std::fill(bias, bias + span, 0.0f);
          std::fill(bias + (sink_end - span_begin), bias + (lo[r] - span_begin),
                    kNegInf);
          row_bias = bias;
        } else {
          row_hi = sink_end;
        }
        row_lo = 0;
      }
      float* x = row + span_begin;
      if (p.softcap > 0) ops.soft_cap(x, span, p.scale, p.softcap);
      const float max =
          ops.scale_mask_max(x, span, p.pass_scale(), row_lo - span_begin,
                             row_hi - span_begin, row_bias);
      if (max == kNegInf) {
        std::memset(x, 0, span * sizeof(float));
        if (args.row_stats()) {
          StoreRowStats(args, b, h, i0 + r, 0.0f, 0.0f, 0.0f);
        }
        continue;
      }
      // (The masked keys' -inf give p = 0 in either pass.)
      float u = 0.0f;
      const float sum = args.row_stats()
                            ? ops.scaled_exp_entropy_f32(x, span, 1.0f, 0, span,
                                                         nullptr, max, x, &u)
                            : ops.exp_sum_f32(x, span, max, x);
      // Head h's attention sink: a term of the sum with no value.
      const float inv = p.sinks != nullptr
                            ? SinkNormalizer(p.sinks[h], max, sum)
                            : 1.0f / sum;
      ops.scale(x, span, inv);
      if (args.row_stats()) StoreRowStats(args, b, h, i0 + r, inv, sum, u);
    }

    // P·V, the probabilities through a tile (the product operand type,
    // zeros past the block's keys and in the padding rows).
    char* probs = w->probs.Get<char>(kRowGranule * kb * es);
    for (int64_t k0 = span_begin; k0 < span_end; k0 += kb) {
      const int64_t n = std::min(kb, span_end - k0);
      const KeyOperand v = KeyRows(
          args, ElementPtr(p.v, p.v_strides.offset(b, hkv, k0), p.dtype),
          p.v_strides.row, n, dv, &w->v, &w->v_tail);
      for (int64_t g0 = 0; g0 < m; g0 += kRowGranule) {
        const RowGroup g = group(g0);
        for (int64_t r = 0; r < g.rows; ++r) {
          char* dst = probs + r * kb * es;
          int64_t filled = 0;
          if (r < g.count) {
            const float* src = weights + (g0 + r) * lk + k0;
            if (bf16) {
              ops.to_bf16(src, n, reinterpret_cast<uint16_t*>(dst));
            } else {
              std::memcpy(dst, src, n * sizeof(float));
            }
            filled = n;
          }
          std::memset(dst + filled * es, 0, (v.keys - filled) * es);
        }
        const MatmulShape pv{g.rows, dv,    v.keys,          kb,  v.ld,
                             dv,     false, args.gemm_dtype, true};
        absl::Status st = w->matmul->Run(pv, probs, v.data, acc + g0 * dv);
        if (!st.ok()) return st;
      }
    }
  }
  for (int64_t r = 0; r < m; ++r) {
    ops.store_scaled(acc + r * dv, dv, 1.0f,
                     static_cast<char*>(args.out) +
                         args.out_strides.offset(b, h, i0 + r) *
                             static_cast<int64_t>(DTypeSize(args.out_dtype)),
                     args.out_dtype);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunMaterializedBatch(absl::Span<const KernelArgs> calls,
                                  absl::Span<Workspace* const> ws) {
  return ParallelForCalls(calls, ws, Blocks, RunBlock);
}

absl::Status RunMaterialized(const KernelArgs& args,
                             absl::Span<Workspace* const> ws) {
  return RunMaterializedBatch(absl::MakeConstSpan(&args, 1), ws);
}

}  // namespace attnserve
