// The AVX-512 table's operations that AVX512-BF16 makes cheaper: the bf16 exp
// pass with its rounding instruction (one vcvtneps2bf16 for 16 values instead
// of eight integer operations), and the paged decode's scores over bf16 keys
// with its dot product (vdpbf16ps: 32 products per instruction, no widening).
// Runs only where HasAvx512Bf16() (Avx512VecOps() picks them).

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "core/limits.h"
#include "core/target_region.h"
#include "core/vec_ops.h"

ATTNSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512bf16,fma")

#include "core/kv_rows.h"
#include "core/vec_ops_avx512_inl.h"

namespace attnserve {
namespace {

// Rounds to nearest even like ToBFloat16; NaN stays NaN.
inline void StoreBf16Native(__m512 p, uint16_t* dst, int64_t count) {
  StoreHalves(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)), dst, count);
}

// Scores of R bf16 query rows (ld d) against n bf16 key rows of d elements,
// d a multiple of 32, four keys at a time.
template <int R>
void DotRowsBf16(const uint16_t* q, int64_t d, const uint16_t* k, int64_t n,
                 float* s, int64_t lds) {
  const int64_t row_bytes = d * int64_t{sizeof(uint16_t)};
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const uint16_t* rows = k + t * d;
    for (int i = 0; i < 4; ++i) {
      PrefetchRow(reinterpret_cast<const char*>(rows + i * d), row_bytes, t + i,
                  n);
    }
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < d; c += 32) {
      __m512bh kv[4];
      for (int i = 0; i < 4; ++i) {
        kv[i] =
            reinterpret_cast<__m512bh>(_mm512_loadu_si512(rows + i * d + c));
      }
      for (int r = 0; r < R; ++r) {
        const __m512bh qv =
            reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + r * d + c));
        for (int i = 0; i < 4; ++i) {
          acc[r][i] = _mm512_dpbf16_ps(acc[r][i], qv, kv[i]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      ReduceAdd4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], s + r * lds + t);
    }
  }
  for (; t < n; ++t) {
    for (int r = 0; r < R; ++r) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t c = 0; c < d; c += 32) {
        acc = _mm512_dpbf16_ps(
            acc, reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + r * d + c)),
            reinterpret_cast<__m512bh>(_mm512_loadu_si512(k + t * d + c)));
      }
      s[r * lds + t] = _mm512_reduce_add_ps(acc);
    }
  }
}

inline __m512i LoadBf16Row(const uint16_t* p) { return _mm512_loadu_si512(p); }

// acc[r][c0, c0 + 32·C) += Σ_t p[r][t] · v_t for R rows: two tokens per
// vdpbf16ps, their probabilities a bf16 pair at pb[r·ldpb + t] (ldpb even,
// zero past n).
template <int R, int C>
void AccumulateRowsBf16(const uint16_t* pb, int64_t ldpb, const uint16_t* v,
                        int64_t n, int64_t dv, int64_t c0, float* acc,
                        int64_t ldacc) {
  __m512 lo[R][C], hi[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      const float* at = acc + r * ldacc + c0 + 32 * j;
      ToPairOrder(_mm512_loadu_ps(at), _mm512_loadu_ps(at + 16), &lo[r][j],
                  &hi[r][j]);
    }
  }
  for (int64_t t = 0; t < n; t += 2) {
    __m512i even[C], odd[C];
    LoadTokenPair<C, uint16_t, LoadBf16Row>(v, dv, t, n, c0, even, odd);
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, pb + r * ldpb + t, sizeof pair);
      const __m512bh w =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
      for (int j = 0; j < C; ++j) {
        lo[r][j] =
            _mm512_dpbf16_ps(lo[r][j], w, reinterpret_cast<__m512bh>(even[j]));
        hi[r][j] =
            _mm512_dpbf16_ps(hi[r][j], w, reinterpret_cast<__m512bh>(odd[j]));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      float* at = acc + r * ldacc + c0 + 32 * j;
      __m512 a0, a1;
      FromPairOrder(lo[r][j], hi[r][j], &a0, &a1);
      _mm512_storeu_ps(at, a0);
      _mm512_storeu_ps(at + 16, a1);
    }
  }
}

template <int R>
void AccumulateColumnsBf16(const uint16_t* pb, int64_t ldpb, const uint16_t* v,
                           int64_t n, int64_t dv, float* acc, int64_t ldacc) {
  int64_t c0 = 0;
  for (; c0 + 64 <= dv; c0 += 64) {
    AccumulateRowsBf16<R, 2>(pb, ldpb, v, n, dv, c0, acc, ldacc);
  }
  if (c0 < dv) AccumulateRowsBf16<R, 1>(pb, ldpb, v, n, dv, c0, acc, ldacc);
}

}  // namespace

void KvAccumulateAvx512Bf16(const float* p, int64_t ldp, int64_t m,
                            const void* v, DType vd, const float* scales,
                            int64_t n, int64_t dv, float* acc, int64_t ldacc) {
  constexpr int64_t kMaxRows = 16;
  if (vd != DType::kBFloat16 || dv % 32 != 0 || m > kMaxRows) {
    Avx512FVecOps().kv_accumulate(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
    return;
  }
  // The probabilities rounded to bf16, in pairs of tokens (zero-padded to an
  // even count).
  const int64_t ldpb = (n + 1) / 2 * 2;
  thread_local std::vector<uint16_t> pb;
  pb.resize(static_cast<size_t>(m * ldpb));
  for (int64_t r = 0; r < m; ++r) {
    uint16_t* out = pb.data() + r * ldpb;
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(
                              _mm512_loadu_ps(p + r * ldp + t))));
    }
    for (; t < n; ++t) out[t] = FloatToBFloat16(p[r * ldp + t]);
    if (ldpb > n) out[n] = 0;
  }
  const uint16_t* vp = static_cast<const uint16_t*>(v);
  ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
    AccumulateColumnsBf16<decltype(rows)::value>(
        pb.data() + r0 * ldpb, ldpb, vp, n, dv, acc + r0 * ldacc, ldacc);
  });
}

void KvScoresAvx512Bf16(const float* q, int64_t ldq, int64_t m, int64_t d,
                        const void* k, DType kd, const float* scales, int64_t n,
                        float* s, int64_t lds) {
  constexpr int64_t kMaxRows = 16, kMaxDim = kMaxHeadDim;
  if (kd != DType::kBFloat16 || d % 32 != 0 || m > kMaxRows || d > kMaxDim) {
    Avx512FVecOps().kv_scores(q, ldq, m, d, k, kd, scales, n, s, lds);
    return;
  }
  // The queries rounded to bf16 (a bf16 cache's queries are bf16 already).
  alignas(64) uint16_t qb[kMaxRows * kMaxDim];
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < d; c += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + r * d + c),
                          reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(
                              _mm512_loadu_ps(q + r * ldq + c))));
    }
  }
  const uint16_t* kp = static_cast<const uint16_t*>(k);
  ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
    DotRowsBf16<decltype(rows)::value>(qb + r0 * d, d, kp, n, s + r0 * lds,
                                       lds);
  });
}

// The bf16 exp pass (VecOps::scaled_exp_sum_bf16, as the portable tables
// compute it in vec_ops_hwy.cc, whose comments explain the steps): 2^y with
// a degree-4 polynomial for the fraction and scalef for the whole part; the
// scale, log2 e and the maximum folded into one multiply-add while |row_max|
// <= 1024.
float ScaledExpSumBf16Avx512Bf16(const float* s, int64_t n, float scale,
                                 int64_t lo, int64_t hi, const float* bias,
                                 float row_max, uint16_t* dst) {
  lo = std::clamp<int64_t>(lo, 0, n);
  hi = std::clamp<int64_t>(hi, lo, n);
  std::memset(dst, 0, lo * sizeof(uint16_t));
  std::memset(dst + hi, 0, (n - hi) * sizeof(uint16_t));
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 log2e = _mm512_set1_ps(kLog2e);
  const __m512 scale_log2e = _mm512_set1_ps(scale * kLog2e);
  const __m512 max_log2e = _mm512_set1_ps(-row_max * kLog2e);
  const bool fold = std::fabs(row_max) <= 1024.0f;
  const auto exp = [&](int64_t c, __mmask16 m) {
    const __m512 raw = _mm512_maskz_loadu_ps(m, s + c);
    __m512 y;
    if (fold && bias == nullptr) {
      // Finite (products of finite inputs); scalef takes any exponent.
      y = _mm512_fmadd_ps(raw, scale_log2e, max_log2e);
    } else {
      const __m512 t =
          bias == nullptr ? _mm512_mul_ps(raw, vscale)
                          : _mm512_fmadd_ps(raw, vscale,
                                            _mm512_maskz_loadu_ps(m, bias + c));
      y = fold
              ? _mm512_fmadd_ps(t, log2e, max_log2e)
              : _mm512_mul_ps(_mm512_sub_ps(t, _mm512_set1_ps(row_max)), log2e);
      // A bias's -inf gives exactly 0 (2^-150 rounds to 0); NaN propagates.
      y = _mm512_max_ps(_mm512_set1_ps(-150.0f), y);
    }
    const __m512 whole =
        _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(y, whole);
    __m512 p = _mm512_set1_ps(9.57007e-3f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.591781e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024744e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9312185e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(m, _mm512_scalef_ps(p, whole));
  };
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  int64_t c = lo;
  for (; c + 2 * kLanes <= hi; c += 2 * kLanes) {
    const __m512 p0 = exp(c, __mmask16(0xFFFF));
    const __m512 p1 = exp(c + kLanes, __mmask16(0xFFFF));
    StoreBf16Native(p0, dst + c, kLanes);
    StoreBf16Native(p1, dst + c + kLanes, kLanes);
    sum0 = _mm512_add_ps(sum0, p0);
    sum1 = _mm512_add_ps(sum1, p1);
  }
  for (; c < hi; c += kLanes) {
    const int64_t count = hi - c < kLanes ? hi - c : kLanes;
    const __m512 p = exp(c, TailMask(count));
    StoreBf16Native(p, dst + c, count);
    sum0 = _mm512_add_ps(sum0, p);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

}  // namespace attnserve

ATTNSERVE_TARGET_END()
