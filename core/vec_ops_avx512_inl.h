#ifndef ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_
#define ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_

// Internal: the AVX-512 helpers that the AVX-512 extensions' operations share
// (vec_ops_avx512_bf16.cc and vec_ops_avx512_vnni.cc). Include it only inside
// an AVX-512F target region (the including file's pragma compiles these for its
// ISA); everything here has internal linkage, one copy per including file.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/kv_rows.h"

namespace attnserve {
namespace {

constexpr int kLanes = 16;

inline __mmask16 TailMask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
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

// Tokens t and t + 1 of the value rows at `rows` (dv elements a row), 32·C
// columns from c0, widened to 16 bits by Load (32 lanes a vector) and
// interleaved as the pair products take them: even[j] and odd[j] hold vector
// j's pairs (token t, token t + 1) in ToPairOrder's lo and hi column order.
// When t + 1 == n the second token is zeros, not the block's next row
// (unwritten memory). At c0 == 0 the rows PrefetchRow's distance ahead are
// prefetched.
template <int C, typename T, __m512i (*Load)(const T*)>
inline void LoadTokenPair(const T* rows, int64_t dv, int64_t t, int64_t n,
                          int64_t c0, __m512i* even, __m512i* odd) {
  const T* row = rows + t * dv;
  if (c0 == 0) {
    const int64_t row_bytes = dv * int64_t{sizeof(T)};
    PrefetchRow(reinterpret_cast<const char*>(row), row_bytes, t, n);
    PrefetchRow(reinterpret_cast<const char*>(row + dv), row_bytes, t + 1, n);
  }
  for (int j = 0; j < C; ++j) {
    const __m512i x0 = Load(row + c0 + 32 * j);
    const __m512i x1 =
        t + 1 < n ? Load(row + dv + c0 + 32 * j) : _mm512_setzero_si512();
    even[j] = _mm512_unpacklo_epi16(x0, x1);
    odd[j] = _mm512_unpackhi_epi16(x0, x1);
  }
}

}  // namespace
}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VEC_OPS_AVX512_INL_H_
