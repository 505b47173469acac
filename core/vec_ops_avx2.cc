#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/vec_ops.h"

// Everything below is compiled for AVX2 + FMA + F16C; it runs only after
// DetectIsa() said so (or when the AVX2 path is forced).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "core/kv_rows_inl.h"

namespace attnserve {
namespace {

constexpr int kLanes = 8;
constexpr float kNegInf = -__builtin_inff();

// exp(x) as in the AVX-512 table: ~1 ulp, below ln(FLT_MIN) (and -inf) exactly
// 0.
inline __m256 Exp(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_max_ps(min_x, x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  // 2^n from the exponent bits; n >= -126 after the clamp above.
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// f32 -> bf16 bits (round to nearest even, NaN kept quiet), 8 values.
inline __m128i ToBFloat16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb =
      _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded =
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  rounded = _mm256_srli_epi32(rounded, 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
  // Values fit in 16 bits, so unsigned saturation packs them unchanged.
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(rounded),
                                          _mm256_extracti128_si256(rounded, 1));
  return packed;
}

// Loads count (< 8 allowed) floats, padding with `pad`.
inline __m256 LoadPartial(const float* src, int64_t count, float pad) {
  if (count == kLanes) return _mm256_loadu_ps(src);
  alignas(32) float tmp[kLanes];
  for (int i = 0; i < kLanes; ++i) tmp[i] = i < count ? src[i] : pad;
  return _mm256_load_ps(tmp);
}

inline void StorePartial(float* dst, __m256 v, int64_t count) {
  if (count == kLanes) {
    _mm256_storeu_ps(dst, v);
    return;
  }
  alignas(32) float tmp[kLanes];
  _mm256_store_ps(tmp, v);
  std::memcpy(dst, tmp, count * sizeof(float));
}

float ScaleMaskMax(float* s, int64_t n, float scale, int64_t lo, int64_t hi,
                   const float* bias) {
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  if (hi <= lo) {
    for (int64_t c = 0; c < n; ++c) s[c] = kNegInf;
    return kNegInf;
  }
  for (int64_t c = 0; c < lo; ++c) s[c] = kNegInf;
  for (int64_t c = hi; c < n; ++c) s[c] = kNegInf;
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(kNegInf);
  for (int64_t c = lo; c < hi; c += kLanes) {
    const int64_t count = hi - c < kLanes ? hi - c : kLanes;
    // Padding with 0, not -inf: -inf * scale is NaN for scale 0 and +inf for
    // a negative scale. The padded lanes are set to -inf after scaling.
    __m256 v = _mm256_mul_ps(LoadPartial(s + c, count, 0.0f), vscale);
    if (bias != nullptr)
      v = _mm256_add_ps(v, LoadPartial(bias + c, count, 0.0f));
    StorePartial(s + c, v, count);
    if (count < kLanes) {
      const __m256 lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 valid = _mm256_cmp_ps(
          lanes, _mm256_set1_ps(static_cast<float>(count)), _CMP_LT_OQ);
      v = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), v, valid);
    }
    vmax = _mm256_max_ps(vmax, v);
  }
  return ReduceMax(vmax);
}

// Stores the 8 (or the first `count`) values of p as bf16 at dst + c.
inline void StoreBf16(__m256 p, uint16_t* dst, int64_t c, int64_t count) {
  const __m128i h = ToBFloat16(p);
  if (count == kLanes) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c), h);
  } else {
    alignas(16) uint16_t tmp[kLanes];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
    std::memcpy(dst + c, tmp, count * sizeof(uint16_t));
  }
}

// s[c..c+8) * scale (+ bias) for the first `count` lanes, -inf for the rest.
inline __m256 ScaledScores(const float* s, const float* bias, int64_t c,
                           int64_t count, __m256 scale) {
  const __m256 raw = LoadPartial(s + c, count, 0.0f);
  __m256 v =
      bias == nullptr
          ? _mm256_mul_ps(raw, scale)
          : _mm256_fmadd_ps(raw, scale, LoadPartial(bias + c, count, 0.0f));
  if (count < kLanes) {
    const __m256 lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 valid = _mm256_cmp_ps(
        lanes, _mm256_set1_ps(static_cast<float>(count)), _CMP_LT_OQ);
    v = _mm256_blendv_ps(_mm256_set1_ps(kNegInf), v, valid);
  }
  return v;
}

float ScaledMax(const float* s, int64_t n, float scale, int64_t lo, int64_t hi,
                const float* bias) {
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(kNegInf);
  for (int64_t c = lo; c < hi; c += kLanes) {
    const int64_t count = hi - c < kLanes ? hi - c : kLanes;
    vmax = _mm256_max_ps(vmax, ScaledScores(s, bias, c, count, vscale));
  }
  return ReduceMax(vmax);
}

// The exp pass (VecOps::scaled_exp_sum_*): [0, lo) and [hi, n) are zeros;
// [lo, hi) in vectors of 8 from lo. Store(p, dst, c, count) writes.
template <typename Dst, void (*Store)(__m256, Dst*, int64_t, int64_t)>
float ScaledExpSum(const float* s, int64_t n, float scale, int64_t lo,
                   int64_t hi, const float* bias, float row_max, Dst* dst) {
  lo = std::clamp<int64_t>(lo, 0, n);
  hi = std::clamp<int64_t>(hi, lo, n);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t c = 0; c < lo; c += kLanes) {
    Store(zero, dst, c, lo - c < kLanes ? lo - c : kLanes);
  }
  for (int64_t c = hi; c < n; c += kLanes) {
    Store(zero, dst, c, n - c < kLanes ? n - c : kLanes);
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 vmax = _mm256_set1_ps(row_max);
  __m256 vsum = zero;
  for (int64_t c = lo; c < hi; c += kLanes) {
    const int64_t count = hi - c < kLanes ? hi - c : kLanes;
    // Lanes past count are -inf, whose exp is exactly 0.
    const __m256 p =
        Exp(_mm256_sub_ps(ScaledScores(s, bias, c, count, vscale), vmax));
    Store(p, dst, c, count);
    vsum = _mm256_add_ps(vsum, p);
  }
  return ReduceAdd(vsum);
}

inline void StoreF32(__m256 p, float* dst, int64_t c, int64_t count) {
  StorePartial(dst + c, p, count);
}

// The plain exp passes (VecOps::exp_sum_*): the scaled pass at scale 1 over
// the whole row.
float ExpSumF32(const float* s, int64_t n, float m, float* dst) {
  return ScaledExpSum<float, StoreF32>(s, n, 1.0f, 0, n, nullptr, m, dst);
}

float ExpSumBFloat16(const float* s, int64_t n, float m, uint16_t* dst) {
  return ScaledExpSum<uint16_t, StoreBf16>(s, n, 1.0f, 0, n, nullptr, m, dst);
}

float ScaledExpSumF32(const float* s, int64_t n, float scale, int64_t lo,
                      int64_t hi, const float* bias, float row_max,
                      float* dst) {
  return ScaledExpSum<float, StoreF32>(s, n, scale, lo, hi, bias, row_max, dst);
}

float ScaledExpSumBf16(const float* s, int64_t n, float scale, int64_t lo,
                       int64_t hi, const float* bias, float row_max,
                       uint16_t* dst) {
  return ScaledExpSum<uint16_t, StoreBf16>(s, n, scale, lo, hi, bias, row_max,
                                           dst);
}

void Scale(float* x, int64_t n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  for (int64_t c = 0; c < n; c += kLanes) {
    const int64_t count = n - c < kLanes ? n - c : kLanes;
    StorePartial(x + c, _mm256_mul_ps(LoadPartial(x + c, count, 0.0f), va),
                 count);
  }
}

void StoreScaled(const float* src, int64_t n, float a, void* dst, DType dtype) {
  const __m256 va = _mm256_set1_ps(a);
  char* out = static_cast<char*>(dst);
  for (int64_t c = 0; c < n; c += kLanes) {
    const int64_t count = n - c < kLanes ? n - c : kLanes;
    const __m256 v = _mm256_mul_ps(LoadPartial(src + c, count, 0.0f), va);
    if (dtype == DType::kFloat32) {
      if (count == kLanes) {
        _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * c), v);
      } else {
        alignas(32) float tmp[kLanes];
        _mm256_store_ps(tmp, v);
        std::memcpy(out + 4 * c, tmp, count * sizeof(float));
      }
      continue;
    }
    const __m128i h =
        dtype == DType::kBFloat16
            ? ToBFloat16(v)
            : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (count == kLanes) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * c), h);
    } else {
      alignas(16) uint16_t tmp[kLanes];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
      std::memcpy(out + 2 * c, tmp, count * sizeof(uint16_t));
    }
  }
}

void LoadRow(const void* src, DType dtype, int64_t n, float* dst) {
  const char* in = static_cast<const char*>(src);
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  alignas(16) uint16_t tmp[kLanes];
  for (int64_t c = 0; c < n; c += kLanes) {
    const int64_t count = n - c < kLanes ? n - c : kLanes;
    __m128i h;
    if (count == kLanes) {
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * c));
    } else {
      std::memset(tmp, 0, sizeof tmp);
      std::memcpy(tmp, in + 2 * c, count * sizeof(uint16_t));
      h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    const __m256 v = dtype == DType::kBFloat16
                         ? _mm256_castsi256_ps(
                               _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                         : _mm256_cvtph_ps(h);
    StorePartial(dst + c, v, count);
  }
}

void ToBFloat16Row(const float* src, int64_t n, uint16_t* dst) {
  StoreScaled(src, n, 1.0f, dst, DType::kBFloat16);
}

// tanh (vec_ops.h, kTanhP / kTanhQ); NaN stays NaN (max and min return their
// second operand when one is NaN).
inline __m256 Tanh(__m256 x) {
  const __m256 limit = _mm256_set1_ps(kTanhLimit);
  x = _mm256_min_ps(limit, _mm256_max_ps(_mm256_set1_ps(-kTanhLimit), x));
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(kTanhP[0]);
  __m256 q = _mm256_set1_ps(kTanhQ[0]);
  for (int i = 1; i < 5; ++i) {
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kTanhP[i]));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(kTanhQ[i]));
  }
  // 1/q: a 12-bit estimate and one Newton step (about 2^-22).
  __m256 inv = _mm256_rcp_ps(q);
  inv = _mm256_mul_ps(inv, _mm256_fnmadd_ps(q, inv, _mm256_set1_ps(2.0f)));
  return _mm256_mul_ps(_mm256_mul_ps(x, p), inv);
}

void AddGathered(float* x, const float* table, const int32_t* index,
                 int64_t n) {
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    const __m256i idx =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + c));
    _mm256_storeu_ps(x + c, _mm256_add_ps(_mm256_loadu_ps(x + c),
                                          _mm256_i32gather_ps(table, idx, 4)));
  }
  for (; c < n; ++c) x[c] += table[index[c]];
}

void SoftCap(float* s, int64_t n, float scale, float cap) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256 inv = _mm256_set1_ps(std::min(1.0f / cap, FLT_MAX));
  const __m256 vcap = _mm256_set1_ps(cap);
  const auto capped = [&](__m256 x) {
    return _mm256_mul_ps(vcap, Tanh(_mm256_mul_ps(_mm256_mul_ps(x, vs), inv)));
  };
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    _mm256_storeu_ps(s + c, capped(_mm256_loadu_ps(s + c)));
  }
  if (c < n) {
    alignas(32) float t[kLanes] = {};
    const size_t rest = static_cast<size_t>(n - c) * sizeof(float);
    std::memcpy(t, s + c, rest);
    _mm256_store_ps(t, capped(_mm256_load_ps(t)));
    std::memcpy(s + c, t, rest);
  }
}

float TanhDot(const float* a, const float* b, const float* v, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    const __m256 x =
        _mm256_add_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(v + c), Tanh(x), acc);
  }
  if (c < n) {
    alignas(32) float ta[kLanes] = {}, tb[kLanes] = {}, tv[kLanes] = {};
    const size_t rest = static_cast<size_t>(n - c) * sizeof(float);
    std::memcpy(ta, a + c, rest);
    std::memcpy(tb, b + c, rest);
    std::memcpy(tv, v + c, rest);
    const __m256 x = _mm256_add_ps(_mm256_load_ps(ta), _mm256_load_ps(tb));
    acc = _mm256_fmadd_ps(_mm256_load_ps(tv), Tanh(x), acc);
  }
  return ReduceAdd(acc);
}

void DequantInt8(const int8_t* src, int64_t n, float scale, float* dst) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    const __m128i q =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + c));
    _mm256_storeu_ps(
        dst + c,
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), vs));
  }
  for (; c < n; ++c) dst[c] = static_cast<float>(src[c]) * scale;
}

// The vector traits of core/kv_rows_inl.h.
struct Avx2Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kChunks = 2;
  static constexpr int kScoreRows = 2;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V LoadPartial(const float* p, int64_t count) {
    return attnserve::LoadPartial(p, count, 0.0f);
  }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StorePartial(float* p, V v, int64_t count) {
    attnserve::StorePartial(p, v, count);
  }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(V v) { return ReduceAdd(v); }
  static void Sum4(V a, V b, V c, V d, float* out) {
    const __m256 z = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(z),
                                  _mm256_extractf128_ps(z, 1)));
  }
  template <DType kD>
  static V LoadKv(const char* row, int64_t c) {
    if constexpr (kD == DType::kBFloat16) {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (kD == DType::kFloat16) {
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    } else if constexpr (kD == DType::kInt8) {
      const __m128i q =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    } else {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
    }
  }
};

void KvScoresAvx2(const float* q, int64_t ldq, int64_t m, int64_t d,
                  const void* k, DType kd, const float* scales, int64_t n,
                  float* s, int64_t lds) {
  KvScores<Avx2Vec>(q, ldq, m, d, k, kd, scales, n, s, lds);
}

void KvAccumulateAvx2(const float* p, int64_t ldp, int64_t m, const void* v,
                      DType vd, const float* scales, int64_t n, int64_t dv,
                      float* acc, int64_t ldacc) {
  KvAccumulate<Avx2Vec>(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
}

}  // namespace

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// The table is built outside the target region: taking it must not need the
// ISA.
const VecOps& Avx2VecOps() {
  static const VecOps ops = {
      ScaleMaskMax,    ExpSumF32,        ExpSumBFloat16, ScaledMax,
      ScaledExpSumF32, ScaledExpSumBf16, Scale,          StoreScaled,
      LoadRow,         DequantInt8,      KvScoresAvx2,   KvAccumulateAvx2,
      ToBFloat16Row,   TanhDot,          SoftCap,        AddGathered};
  return ops;
}

}  // namespace attnserve
