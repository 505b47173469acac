// The materialized kernel (weights requested): the scores of a block of query
// rows are written straight into their rows of the weights tensor, the exact
// softmax runs in place there, and one P·V product per key block follows while
// the rows are hot.

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/kernel_common.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

absl::Status RunMaterialized(const KernelArgs& args,
                             absl::Span<Workspace* const> ws) {
  const Problem& p = *args.p;
  const VecOps& ops = *args.ops;
  const AttentionShape& s = p.shape;
  const int64_t qb = args.q_block;
  const int64_t kb = args.k_block;
  const int64_t lk = s.k_len;
  const int64_t dv = s.value_dim;
  const int64_t q_blocks = (s.q_len + qb - 1) / qb;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  const int64_t items = s.batch * s.q_heads * q_blocks;

  return ParallelFor(
      args.num_threads, ws, items, [&](Workspace* w, int64_t item) {
        const int64_t block = item % q_blocks;
        const int64_t h = (item / q_blocks) % s.q_heads;
        const int64_t b = item / (q_blocks * s.q_heads);
        const int64_t hkv = h / p.group;
        const int64_t i0 = block * qb;
        const int64_t m = std::min(qb, s.q_len - i0);
        float* weights =
            args.weights + ((b * s.q_heads + h) * s.q_len + i0) * lk;

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
        }
        float* acc = w->acc.Get<float>(m * dv);
        std::fill(acc, acc + m * dv, 0.0f);
        if (lo_all >= hi_all) {
          // Lk = 0 leaves weights empty (and possibly null): nothing to clear.
          if (lk > 0) std::memset(weights, 0, m * lk * sizeof(float));
        } else {
          const int64_t span_begin = lo_all / kb * kb;
          const int64_t span_end = std::min(
              lk, (hi_all + kKeyGranule - 1) / kKeyGranule * kKeyGranule);
          const int64_t span = span_end - span_begin;
          int64_t ldq;
          const void* q = OperandRows(
              args, ElementPtr(p.q, p.q_strides.offset(b, h, i0), p.dtype),
              p.q_strides.row, m, s.head_dim, &w->q, &ldq);
          for (int64_t k0 = span_begin; k0 < span_end; k0 += kb) {
            const int64_t n = std::min(kb, span_end - k0);
            int64_t ldk;
            const void* kp = OperandRows(
                args, ElementPtr(p.k, p.k_strides.offset(b, hkv, k0), p.dtype),
                p.k_strides.row, n, s.head_dim, &w->k, &ldk);
            MatmulShape qk{m,  n,    s.head_dim,      ldq,  ldk,
                           lk, true, args.gemm_dtype, false};
            absl::Status st = w->matmul->Run(qk, q, kp, weights + k0);
            if (!st.ok()) return st;
          }
          float* bias =
              p.has_elementwise_mask() ? w->bias.Get<float>(span) : nullptr;
          for (int64_t r = 0; r < m; ++r) {
            float* row = weights + r * lk;
            std::memset(row, 0, span_begin * sizeof(float));
            std::memset(row + span_end, 0, (lk - span_end) * sizeof(float));
            if (bias != nullptr)
              FillBias(p, b, h, i0 + r, span_begin, span, bias);
            float* x = row + span_begin;
            const float max = ops.scale_mask_max(
                x, span, p.scale, lo[r] - span_begin, hi[r] - span_begin, bias);
            if (max == kNegInf) {
              std::memset(x, 0, span * sizeof(float));
              continue;
            }
            const float sum = ops.exp_sum_f32(x, span, max, x);
            ops.scale(x, span, 1.0f / sum);
          }
          uint16_t* probs16 = bf16 ? w->probs.Get<uint16_t>(m * kb) : nullptr;
          for (int64_t k0 = span_begin; k0 < span_end; k0 += kb) {
            const int64_t n = std::min(kb, span_end - k0);
            int64_t ldv;
            const void* vp = OperandRows(
                args, ElementPtr(p.v, p.v_strides.offset(b, hkv, k0), p.dtype),
                p.v_strides.row, n, dv, &w->v, &ldv);
            const void* probs = weights + k0;
            int64_t ldp = lk;
            if (bf16) {
              for (int64_t r = 0; r < m; ++r) {
                ops.to_bf16(weights + r * lk + k0, n, probs16 + r * kb);
              }
              probs = probs16;
              ldp = kb;
            }
            MatmulShape pv{m,   dv, n, ldp, ldv, dv, false, args.gemm_dtype,
                           true};
            absl::Status st = w->matmul->Run(pv, probs, vp, acc);
            if (!st.ok()) return st;
          }
        }
        for (int64_t r = 0; r < m; ++r) {
          ops.store_scaled(
              acc + r * dv, dv, 1.0f,
              static_cast<char*>(args.out) +
                  args.out_strides.offset(b, h, i0 + r) *
                      static_cast<int64_t>(DTypeSize(args.out_dtype)),
              args.out_dtype);
        }
        return absl::OkStatus();
      });
}

}  // namespace attnserve
