#ifndef ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_
#define ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_

// Internal: the AVX-512 helpers the AVX-512 tables share (vec_ops_avx512.cc,
// vec_ops_avx512_bf16.cc and vec_ops_avx512_vnni.cc). Include it only inside an
// AVX-512F target region (the including file's pragma compiles these for its
// ISA); everything here has internal linkage, one copy per including file.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnserve {
namespace {

constexpr int kLanes = 16;
constexpr float kNegInf = -__builtin_inff();

inline __mmask16 TailMask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x) with ~1 ulp error (Cody-Waite reduction, Cephes polynomial). Inputs
// below ln(FLT_MIN), -inf included, give exactly 0; NaN propagates.
inline __m512 Exp(__m512 x) {
  const __m512 min_x = _mm512_set1_ps(-87.33654f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, min_x, _CMP_LT_OQ);
  x = _mm512_max_ps(min_x, x);
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow),
                             _mm512_scalef_ps(p, n));
}

// 2^y for probabilities that are rounded to bf16 next (relative error below
// 4e-6, far under bf16's 2^-9): 2^n · 2^f with |f| <= 1/2, a degree-4
// polynomial for 2^f and one instruction (scalef) for the 2^n; half of Exp's
// instructions (the exp pass is bound by them). Finite y only: anything below
// -150 gives exactly 0, +-inf give NaN, NaN propagates.
inline __m512 Exp2Finite(__m512 y) {
  const __m512 n =
      _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(y, n);
  // Near-minimax for 2^f on [-1/2, 1/2] (relative error 3.7e-6 in f32
  // arithmetic), 2^0 exactly 1.
  __m512 p = _mm512_set1_ps(9.57007e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.591781e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4024744e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9312185e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Exp2Finite for any y: -inf gives exactly 0 (y is clamped to -150, and
// 2^-150 rounds to 0); NaN propagates (max takes its second operand when one
// is NaN).
inline __m512 Exp2ForBf16(__m512 y) {
  return Exp2Finite(_mm512_max_ps(_mm512_set1_ps(-150.0f), y));
}

// f32 -> bf16 bits (round to nearest even, NaN kept quiet) in the low halves.
inline __m256i ToBFloat16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb =
      _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded =
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  rounded = _mm512_srli_epi32(rounded, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(rounded);
}

// The scaled scores of lanes `m` of s[c..c+16): s * scale (+ bias, in the
// same rounding), computed the same way by every pass over a row.
inline __m512 ScaledScores(const float* s, const float* bias, int64_t c,
                           __m512 scale, __mmask16 m) {
  const __m512 v = _mm512_maskz_loadu_ps(m, s + c);
  return bias == nullptr
             ? _mm512_mul_ps(v, scale)
             : _mm512_fmadd_ps(v, scale, _mm512_maskz_loadu_ps(m, bias + c));
}

constexpr __mmask16 kAllLanes = 0xFFFF;

// max over c in [lo, hi) of ScaledScores; -inf when empty. Reads only. Four
// accumulators (max's latency, not its throughput, would bound one). Without
// a bias and with scale > 0 the maximum of s is scaled once: rounding is
// monotonic, so that is the maximum of the scaled scores.
inline float ScaledMaxImpl(const float* s, int64_t n, float scale, int64_t lo,
                           int64_t hi, const float* bias) {
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  if (hi <= lo) return kNegInf;
  const bool raw = bias == nullptr && scale > 0.0f;
  const __m512 vscale = _mm512_set1_ps(scale);
  const auto load = [&](int64_t c, __mmask16 m) {
    return raw ? _mm512_maskz_loadu_ps(m, s + c)
               : ScaledScores(s, bias, c, vscale, m);
  };
  __m512 m0 = _mm512_set1_ps(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int64_t c = lo;
  for (; c + 4 * kLanes <= hi; c += 4 * kLanes) {
    m0 = _mm512_max_ps(m0, load(c, kAllLanes));
    m1 = _mm512_max_ps(m1, load(c + kLanes, kAllLanes));
    m2 = _mm512_max_ps(m2, load(c + 2 * kLanes, kAllLanes));
    m3 = _mm512_max_ps(m3, load(c + 3 * kLanes, kAllLanes));
  }
  for (; c + kLanes <= hi; c += kLanes) {
    m0 = _mm512_max_ps(m0, load(c, kAllLanes));
  }
  if (c < hi) {
    const __mmask16 m = TailMask(hi - c);
    m1 = _mm512_mask_max_ps(m1, m, m1, load(c, m));
  }
  const float top = _mm512_reduce_max_ps(
      _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  return raw && top != kNegInf ? top * scale : top;
}

// The exp pass of a row: p = exp(ScaledScores - row_max) on [lo, hi), 0 on
// the rest of [0, n), each 16 (or the `count` < 16 of a tail) p stored by
// Store(p, dst + c, count). Returns the sum of the p (before any rounding
// Store does). kForBf16: the cheaper 2^y (Exp2ForBf16), and while |row_max|
// <= kFoldLimit the scale, log2 e and the maximum folded into one
// multiply-add (its rounding adds at most 1.2e-7 · |row_max| to the
// exponent, where a score near the max matters: below 1.3e-4); past it the
// difference first, so that no exponent is positive however large the
// scores. Else Exp of the difference.
template <bool kForBf16, typename Dst, void (*Store)(__m512, Dst*, int64_t)>
inline float ScaledExpSumImpl(const float* s, int64_t n, float scale,
                              int64_t lo, int64_t hi, const float* bias,
                              float row_max, Dst* dst) {
  lo = std::clamp<int64_t>(lo, 0, n);
  hi = std::clamp<int64_t>(hi, lo, n);
  std::memset(dst, 0, lo * sizeof(Dst));
  std::memset(dst + hi, 0, (n - hi) * sizeof(Dst));
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 vmax = _mm512_set1_ps(row_max);
  const __m512 log2e = _mm512_set1_ps(kLog2e);
  const __m512 scale_log2e = _mm512_set1_ps(scale * kLog2e);
  const __m512 max_log2e = _mm512_set1_ps(-row_max * kLog2e);
  constexpr float kFoldLimit = 1024.0f;
  const bool fold = std::fabs(row_max) <= kFoldLimit;
  const auto exp = [&](int64_t c, __mmask16 m) {
    if constexpr (kForBf16) {
      if (!fold) {
        return Exp2ForBf16(_mm512_mul_ps(
            _mm512_sub_ps(ScaledScores(s, bias, c, vscale, m), vmax), log2e));
      }
      // Without a bias the scores are finite (products of finite inputs);
      // a bias may hold -inf.
      if (bias == nullptr) {
        return Exp2Finite(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, s + c),
                                          scale_log2e, max_log2e));
      }
      return Exp2ForBf16(_mm512_fmadd_ps(ScaledScores(s, bias, c, vscale, m),
                                         log2e, max_log2e));
    } else {
      return Exp(_mm512_sub_ps(ScaledScores(s, bias, c, vscale, m), vmax));
    }
  };
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  int64_t c = lo;
  for (; c + 2 * kLanes <= hi; c += 2 * kLanes) {
    const __m512 p0 = exp(c, kAllLanes);
    const __m512 p1 = exp(c + kLanes, kAllLanes);
    Store(p0, dst + c, kLanes);
    Store(p1, dst + c + kLanes, kLanes);
    sum0 = _mm512_add_ps(sum0, p0);
    sum1 = _mm512_add_ps(sum1, p1);
  }
  for (; c < hi; c += kLanes) {
    const int64_t count = hi - c < kLanes ? hi - c : kLanes;
    const __mmask16 m = TailMask(count);
    const __m512 p = _mm512_maskz_mov_ps(m, exp(c, m));
    Store(p, dst + c, count);
    sum0 = _mm512_add_ps(sum0, p);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

inline void StoreF32(__m512 p, float* dst, int64_t count) {
  if (count == kLanes) {
    _mm512_storeu_ps(dst, p);
  } else {
    _mm512_mask_storeu_ps(dst, TailMask(count), p);
  }
}

// Stores the 16 (or the first `count`) halves of h at dst.
inline void StoreHalves(__m256i h, uint16_t* dst, int64_t count) {
  if (count == kLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
  } else {
    alignas(32) uint16_t tmp[kLanes];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), h);
    std::memcpy(dst, tmp, count * sizeof(uint16_t));
  }
}

// The sums of a, b, c and d into out[0..3]: per 128-bit lane [a0+a2, b0+b2,
// a1+a3, b1+b3], then [a, b, c, d] per lane, then the four lanes added.
inline void ReduceAdd4(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
  const __m512d x = _mm512_castps_pd(
      _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)));
  const __m512d y = _mm512_castps_pd(
      _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d)));
  const __m512 z = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  const __m256 w = _mm256_add_ps(
      _mm512_castps512_ps256(z),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
  _mm_storeu_ps(
      out, _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1)));
}

// Accumulators of 32 value columns [c, c + 32) in the order a dot product of
// pairs (vdpbf16ps, vpdpwssd) over interleaved rows (_mm512_unpacklo/hi_epi16)
// produces them: `lo` holds columns 0-3, 8-11, 16-19, 24-27 (one group of four
// per 128-bit lane), `hi` columns 4-7, 12-15, 20-23, 28-31.
inline void ToPairOrder(__m512 a0, __m512 a1, __m512* lo, __m512* hi) {
  *lo = _mm512_shuffle_f32x4(a0, a1, 0x88);
  *hi = _mm512_shuffle_f32x4(a0, a1, 0xDD);
}

inline void FromPairOrder(__m512 lo, __m512 hi, __m512* a0, __m512* a1) {
  const __m512 t0 = _mm512_shuffle_f32x4(lo, hi, 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(lo, hi, 0xEE);
  *a0 = _mm512_shuffle_f32x4(t0, t0, 0xD8);
  *a1 = _mm512_shuffle_f32x4(t1, t1, 0xD8);
}

}  // namespace
}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_
