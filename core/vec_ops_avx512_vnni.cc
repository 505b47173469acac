// The paged decode's products over int8 rows with AVX512-VNNI's dot product
// of 16-bit pairs (vpdpwssd: 32 products per instruction, summed exactly in
// 32-bit integers), where widening each int8 to f32 and one FMA per product
// would bind the step to the FMA units instead of to reading memory:
// - scores: the query rows rounded to 16-bit integers (a scale per row,
//   max|q|/32767), the keys sign-extended to 16 bits;
// - values: the weights p_t · scale_t of up to kInt8WeightRun tokens rounded to
//   16-bit integers (a scale per row and run of tokens), two tokens' values
//   interleaved per product.
// Either rounding is below 2^-16 of its row's largest element (the bounds in
// vec_ops.h); non-finite inputs, rows too small to round (Roundable), other
// dtypes and shapes go to
// Avx512FVecOps()'s. Runs only where HasAvx512Vnni() (Avx512VecOps() picks
// them for int8 rows).

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/target_region.h"
#include "core/vec_ops.h"

ATTNSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512vnni,fma")

#include "core/kv_rows.h"
#include "core/vec_ops_avx512_inl.h"

namespace attnserve {
namespace {

constexpr int64_t kMaxRows = 16;
// Rows of up to this many elements keep every score's 32-bit sum exact
// (|q| ≤ 32767, |k| ≤ 127: 32767 · 127 · 512 < 2^31).
constexpr int64_t kMaxDim = 512;
constexpr float kInt16Max = 32767.0f;

// The largest |x[i] · (scale ? scale[i] : 1)| of n values, the products
// stored at dst when it is given; NaN or inf when one is not finite.
float MaxAbs(const float* x, const float* scale, int64_t n, float* dst) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 lanes = TailMask(std::min<int64_t>(kLanes, n - i));
    __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
    if (scale != nullptr) {
      v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(lanes, scale + i));
    }
    if (dst != nullptr) _mm512_mask_storeu_ps(dst + i, lanes, v);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
  }
  return nan != 0 ? std::nanf("") : _mm512_reduce_max_ps(m);
}

// Whether values of this largest magnitude round to int16 (RoundToInt16 with
// 32767 / max_abs): not when it is not finite (NaN or inf among them), nor so
// small (below about 1e-34) that 32767 / max_abs is not.
bool Roundable(float max_abs) {
  return max_abs == 0.0f ||
         (std::isfinite(max_abs) && std::isfinite(kInt16Max / max_abs));
}

// dst[i] = round(x[i] / scale) as int16, for |x| ≤ 32767 · scale.
void RoundToInt16(const float* x, int64_t n, float inv_scale, int16_t* dst) {
  const __m512 vs = _mm512_set1_ps(inv_scale);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512i r =
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtsepi32_epi16(r));
  }
  for (; i < n; ++i) {
    dst[i] = static_cast<int16_t>(std::nearbyint(x[i] * inv_scale));
  }
}

// The sums of a, b, c and d (as ReduceAdd4, in 32-bit integers).
inline __m128i ReduceAdd4Epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b),
                                     _mm512_unpackhi_epi32(a, b));
  const __m512i y = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d),
                                     _mm512_unpackhi_epi32(c, d));
  const __m512i z = _mm512_add_epi32(_mm512_unpacklo_epi64(x, y),
                                     _mm512_unpackhi_epi64(x, y));
  const __m256i w = _mm256_add_epi32(_mm512_castsi512_si256(z),
                                     _mm512_extracti64x4_epi64(z, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(w),
                       _mm256_extracti128_si256(w, 1));
}

// acc + the sums of the products of a's and b's 16-bit pairs (vpdpwssd).
// GCC 12 copies the accumulator of _mm512_dpwssd_epi32 to a new register
// around every use inside a loop (half of the loop's instructions, measured);
// the instruction written out keeps it in place.
inline __m512i Dpwssd(__m512i acc, __m512i a, __m512i b) {
#if defined(__clang__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#endif
}

// 32 int8 elements sign-extended to int16.
inline __m512i LoadInt8AsInt16(const int8_t* p) {
  return _mm512_cvtepi8_epi16(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Scores of R int16 query rows (ld d, scales qs[r]) against n int8 key rows
// of d elements (d a multiple of 32) with their scales, four keys at a time.
template <int R>
void DotRowsInt8(const int16_t* q, const float* qs, int64_t d, const int8_t* k,
                 const float* ks, int64_t n, float* s, int64_t lds) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const int8_t* rows = k + t * d;
    for (int i = 0; i < 4; ++i) {
      PrefetchRow(reinterpret_cast<const char*>(rows + i * d), d, t + i, n);
    }
    __m512i acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_si512();
    }
    for (int64_t c = 0; c < d; c += 32) {
      __m512i kv[4];
      for (int i = 0; i < 4; ++i) kv[i] = LoadInt8AsInt16(rows + i * d + c);
      for (int r = 0; r < R; ++r) {
        const __m512i qv = _mm512_loadu_si512(q + r * d + c);
        for (int i = 0; i < 4; ++i) {
          acc[r][i] = Dpwssd(acc[r][i], qv, kv[i]);
        }
      }
    }
    const __m128 k_scales = _mm_loadu_ps(ks + t);
    for (int r = 0; r < R; ++r) {
      const __m128 sums = _mm_cvtepi32_ps(
          ReduceAdd4Epi32(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
      _mm_storeu_ps(s + r * lds + t,
                    _mm_mul_ps(_mm_mul_ps(sums, _mm_set1_ps(qs[r])), k_scales));
    }
  }
  for (; t < n; ++t) {
    for (int r = 0; r < R; ++r) {
      __m512i acc = _mm512_setzero_si512();
      for (int64_t c = 0; c < d; c += 32) {
        acc = Dpwssd(acc, _mm512_loadu_si512(q + r * d + c),
                     LoadInt8AsInt16(k + t * d + c));
      }
      s[r * lds + t] =
          static_cast<float>(_mm512_reduce_add_epi32(acc)) * qs[r] * ks[t];
    }
  }
}

// acc[r][c0, c0 + 32·C) += ws[r] · Σ_t w[r][t] · v_t for R rows and the n ≤
// kInt8WeightRun tokens: two tokens per vpdpwssd, their int16 weights a pair
// at w[r·ldw + t] (ldw even, zero past n).
template <int R, int C>
void AccumulateRowsInt8(const int16_t* w, int64_t ldw, const float* ws,
                        const int8_t* v, int64_t n, int64_t dv, int64_t c0,
                        float* acc, int64_t ldacc) {
  __m512i lo[R][C], hi[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      lo[r][j] = _mm512_setzero_si512();
      hi[r][j] = _mm512_setzero_si512();
    }
  }
  for (int64_t t = 0; t < n; t += 2) {
    __m512i even[C], odd[C];
    LoadTokenPair<C, int8_t, LoadInt8AsInt16>(v, dv, t, n, c0, even, odd);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + r * ldw + t, sizeof pair);
      const __m512i wv = _mm512_set1_epi32(pair);
      for (int j = 0; j < C; ++j) {
        lo[r][j] = Dpwssd(lo[r][j], wv, even[j]);
        hi[r][j] = Dpwssd(hi[r][j], wv, odd[j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 scale = _mm512_set1_ps(ws[r]);
    for (int j = 0; j < C; ++j) {
      float* at = acc + r * ldacc + c0 + 32 * j;
      __m512 a0, a1;
      FromPairOrder(_mm512_mul_ps(_mm512_cvtepi32_ps(lo[r][j]), scale),
                    _mm512_mul_ps(_mm512_cvtepi32_ps(hi[r][j]), scale), &a0,
                    &a1);
      _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), a0));
      _mm512_storeu_ps(at + 16, _mm512_add_ps(_mm512_loadu_ps(at + 16), a1));
    }
  }
}

template <int R>
void AccumulateColumnsInt8(const int16_t* w, int64_t ldw, const float* ws,
                           const int8_t* v, int64_t n, int64_t dv, float* acc,
                           int64_t ldacc) {
  int64_t c0 = 0;
  for (; c0 + 64 <= dv; c0 += 64) {
    AccumulateRowsInt8<R, 2>(w, ldw, ws, v, n, dv, c0, acc, ldacc);
  }
  if (c0 < dv) AccumulateRowsInt8<R, 1>(w, ldw, ws, v, n, dv, c0, acc, ldacc);
}

}  // namespace

void KvScoresAvx512Vnni(const float* q, int64_t ldq, int64_t m, int64_t d,
                        const void* k, DType kd, const float* scales, int64_t n,
                        float* s, int64_t lds) {
  const VecOps& fallback = Avx512FVecOps();
  if (kd != DType::kInt8 || d % 32 != 0 || d > kMaxDim || m > kMaxRows) {
    fallback.kv_scores(q, ldq, m, d, k, kd, scales, n, s, lds);
    return;
  }
  alignas(64) int16_t q16[kMaxRows * kMaxDim];
  float qs[kMaxRows];
  for (int64_t r = 0; r < m; ++r) {
    const float max_abs = MaxAbs(q + r * ldq, nullptr, d, nullptr);
    if (!Roundable(max_abs)) {
      fallback.kv_scores(q, ldq, m, d, k, kd, scales, n, s, lds);
      return;
    }
    qs[r] = max_abs / kInt16Max;
    RoundToInt16(q + r * ldq, d, max_abs > 0 ? kInt16Max / max_abs : 0.0f,
                 q16 + r * d);
  }
  const int8_t* kp = static_cast<const int8_t*>(k);
  ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
    DotRowsInt8<decltype(rows)::value>(q16 + r0 * d, qs + r0, d, kp, scales, n,
                                       s + r0 * lds, lds);
  });
}

void KvAccumulateAvx512Vnni(const float* p, int64_t ldp, int64_t m,
                            const void* v, DType vd, const float* scales,
                            int64_t n, int64_t dv, float* acc, int64_t ldacc) {
  const VecOps& fallback = Avx512FVecOps();
  if (vd != DType::kInt8 || dv % 32 != 0 || m > kMaxRows) {
    fallback.kv_accumulate(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
    return;
  }
  const int8_t* vp = static_cast<const int8_t*>(v);
  // Per run of tokens: the weights p · scale, rounded to int16 with a scale
  // per row (pairs of tokens, zero-padded to an even count).
  thread_local std::vector<float> weights;
  thread_local std::vector<int16_t> w16;
  for (int64_t t0 = 0; t0 < n; t0 += kInt8WeightRun) {
    const int64_t run = std::min(kInt8WeightRun, n - t0);
    const int64_t ldw = (run + 1) / 2 * 2;
    weights.resize(static_cast<size_t>(run));
    w16.resize(static_cast<size_t>(m * ldw));
    float ws[kMaxRows];
    for (int64_t r = 0; r < m; ++r) {
      const float max_abs =
          MaxAbs(p + r * ldp + t0, scales + t0, run, weights.data());
      if (!Roundable(max_abs)) {
        fallback.kv_accumulate(p + t0, ldp, m, vp + t0 * dv, vd, scales + t0,
                               n - t0, dv, acc, ldacc);
        return;
      }
      ws[r] = max_abs / kInt16Max;
      int16_t* out = w16.data() + r * ldw;
      RoundToInt16(weights.data(), run,
                   max_abs > 0 ? kInt16Max / max_abs : 0.0f, out);
      if (ldw > run) out[run] = 0;
    }
    ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
      AccumulateColumnsInt8<decltype(rows)::value>(w16.data() + r0 * ldw, ldw,
                                                   ws + r0, vp + t0 * dv, run,
                                                   dv, acc + r0 * ldacc, ldacc);
    });
  }
}

}  // namespace attnserve

ATTNSERVE_TARGET_END()
