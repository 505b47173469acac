#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/vec_ops.h"

// Everything below is compiled for AVX-512F; it runs only after DetectIsa()
// said so.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#endif

#include "core/kv_rows_inl.h"
#include "core/vec_ops_avx512_inl.h"

namespace attnserve {
namespace {

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
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vmax = _mm512_set1_ps(kNegInf);
  int64_t c = lo;
  for (; c + kLanes <= hi; c += kLanes) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + c), vscale);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + c));
    _mm512_storeu_ps(s + c, v);
    vmax = _mm512_max_ps(vmax, v);
  }
  if (c < hi) {
    const __mmask16 m = TailMask(hi - c);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + c), vscale);
    if (bias != nullptr)
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
    _mm512_mask_storeu_ps(s + c, m, v);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, v);
  }
  return _mm512_reduce_max_ps(vmax);
}

void Scale(float* x, int64_t n, float a) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    _mm512_storeu_ps(x + c, _mm512_mul_ps(_mm512_loadu_ps(x + c), va));
  }
  if (c < n) {
    const __mmask16 m = TailMask(n - c);
    _mm512_mask_storeu_ps(x + c, m,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), va));
  }
}

// Stores 16 (or the first `count`) values of v as dtype at dst.
inline void StoreAs(__m512 v, void* dst, DType dtype, int64_t count) {
  if (dtype == DType::kFloat32) {
    _mm512_mask_storeu_ps(dst, TailMask(count), v);
    return;
  }
  const __m256i h =
      dtype == DType::kBFloat16
          ? ToBFloat16(v)
          : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  StoreHalves(h, static_cast<uint16_t*>(dst), count);
}

void StoreScaled(const float* src, int64_t n, float a, void* dst, DType dtype) {
  const __m512 va = _mm512_set1_ps(a);
  char* out = static_cast<char*>(dst);
  const int64_t esize = dtype == DType::kFloat32 ? 4 : 2;
  for (int64_t c = 0; c < n; c += kLanes) {
    const int64_t count = n - c < kLanes ? n - c : kLanes;
    const __m512 v =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(TailMask(count), src + c), va);
    StoreAs(v, out + c * esize, dtype, count);
  }
}

void LoadRow(const void* src, DType dtype, int64_t n, float* dst) {
  const char* in = static_cast<const char*>(src);
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  int64_t c = 0;
  alignas(32) uint16_t tmp[kLanes];
  for (; c < n; c += kLanes) {
    const int64_t count = n - c < kLanes ? n - c : kLanes;
    __m256i h;
    if (count == kLanes) {
      h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * c));
    } else {
      std::memset(tmp, 0, sizeof tmp);
      std::memcpy(tmp, in + 2 * c, count * sizeof(uint16_t));
      h = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
    }
    const __m512 v = dtype == DType::kBFloat16
                         ? _mm512_castsi512_ps(
                               _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                         : _mm512_cvtph_ps(h);
    _mm512_mask_storeu_ps(dst + c, TailMask(count), v);
  }
}

void ToBFloat16Row(const float* src, int64_t n, uint16_t* dst) {
  StoreScaled(src, n, 1.0f, dst, DType::kBFloat16);
}

// tanh (vec_ops.h, kTanhP / kTanhQ); NaN stays NaN (max and min return their
// second operand when one is NaN).
inline __m512 Tanh(__m512 x) {
  const __m512 limit = _mm512_set1_ps(kTanhLimit);
  x = _mm512_min_ps(limit, _mm512_max_ps(_mm512_set1_ps(-kTanhLimit), x));
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(kTanhP[0]);
  __m512 q = _mm512_set1_ps(kTanhQ[0]);
  for (int i = 1; i < 5; ++i) {
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kTanhP[i]));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(kTanhQ[i]));
  }
  // 1/q: a 14-bit estimate and one Newton step (about 2^-23).
  __m512 inv = _mm512_rcp14_ps(q);
  inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(q, inv, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(_mm512_mul_ps(x, p), inv);
}

void SoftCap(float* s, int64_t n, float scale, float cap) {
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512 inv = _mm512_set1_ps(std::min(1.0f / cap, FLT_MAX));
  const __m512 vcap = _mm512_set1_ps(cap);
  for (int64_t c = 0; c < n; c += kLanes) {
    const __mmask16 mask = TailMask(std::min<int64_t>(kLanes, n - c));
    const __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s + c), vs);
    _mm512_mask_storeu_ps(s + c, mask,
                          _mm512_mul_ps(vcap, Tanh(_mm512_mul_ps(t, inv))));
  }
}

void AddGathered(float* x, const float* table, const int32_t* index,
                 int64_t n) {
  for (int64_t c = 0; c < n; c += kLanes) {
    const __mmask16 mask = TailMask(std::min<int64_t>(kLanes, n - c));
    const __m512i idx = _mm512_maskz_loadu_epi32(mask, index + c);
    const __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx,
                                              table, sizeof(float));
    _mm512_mask_storeu_ps(x + c, mask,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(mask, x + c), g));
  }
}

float TanhDot(const float* a, const float* b, const float* v, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += kLanes) {
    const __mmask16 mask = n - c >= kLanes
                               ? __mmask16(0xFFFF)
                               : static_cast<__mmask16>((1u << (n - c)) - 1);
    const __m512 x = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, a + c),
                                   _mm512_maskz_loadu_ps(mask, b + c));
    // Masked-off lanes have v = 0 and x = 0 (tanh 0 = 0): they add nothing.
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, v + c), Tanh(x), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

float ScaledMax(const float* s, int64_t n, float scale, int64_t lo, int64_t hi,
                const float* bias) {
  return ScaledMaxImpl(s, n, scale, lo, hi, bias);
}

float ScaledExpSumF32(const float* s, int64_t n, float scale, int64_t lo,
                      int64_t hi, const float* bias, float row_max,
                      float* dst) {
  return ScaledExpSumImpl<false, float, StoreF32>(s, n, scale, lo, hi, bias,
                                                  row_max, dst);
}

inline void StoreBf16Rounded(__m512 p, uint16_t* dst, int64_t count) {
  StoreHalves(ToBFloat16(p), dst, count);
}

// The plain exp passes (VecOps::exp_sum_*): the scaled pass at scale 1 over
// the whole row, with the accurate Exp (rows may hold -inf).
float ExpSumF32(const float* s, int64_t n, float m, float* dst) {
  return ScaledExpSumImpl<false, float, StoreF32>(s, n, 1.0f, 0, n, nullptr, m,
                                                  dst);
}

float ExpSumBFloat16(const float* s, int64_t n, float m, uint16_t* dst) {
  return ScaledExpSumImpl<false, uint16_t, StoreBf16Rounded>(s, n, 1.0f, 0, n,
                                                             nullptr, m, dst);
}

float ScaledExpSumBf16(const float* s, int64_t n, float scale, int64_t lo,
                       int64_t hi, const float* bias, float row_max,
                       uint16_t* dst) {
  return ScaledExpSumImpl<true, uint16_t, StoreBf16Rounded>(s, n, scale, lo, hi,
                                                            bias, row_max, dst);
}

void DequantInt8(const int8_t* src, int64_t n, float scale, float* dst) {
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    const __m128i q =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c));
    _mm512_storeu_ps(
        dst + c,
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), vs));
  }
  for (; c < n; ++c) dst[c] = static_cast<float>(src[c]) * scale;
}

// The vector traits of core/kv_rows_inl.h.
struct Avx512Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kChunks = 4;
  static constexpr int kScoreRows = 4;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V LoadPartial(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(TailMask(count), p);
  }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StorePartial(float* p, V v, int64_t count) {
    _mm512_mask_storeu_ps(p, TailMask(count), v);
  }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
  static void Sum4(V a, V b, V c, V d, float* out) {
    ReduceAdd4(a, b, c, d, out);
  }
  template <DType kD>
  static V LoadKv(const char* row, int64_t c) {
    if constexpr (kD == DType::kBFloat16) {
      const __m256i h =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c));
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (kD == DType::kFloat16) {
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
    } else if constexpr (kD == DType::kInt8) {
      const __m128i q =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    } else {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
    }
  }
};

void KvScoresAvx512(const float* q, int64_t ldq, int64_t m, int64_t d,
                    const void* k, DType kd, const float* scales, int64_t n,
                    float* s, int64_t lds) {
  KvScores<Avx512Vec>(q, ldq, m, d, k, kd, scales, n, s, lds);
}

void KvAccumulateAvx512(const float* p, int64_t ldp, int64_t m, const void* v,
                        DType vd, const float* scales, int64_t n, int64_t dv,
                        float* acc, int64_t ldacc) {
  KvAccumulate<Avx512Vec>(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
}

}  // namespace

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// The table is built outside the target region: taking it must not need the
// ISA.
const VecOps& Avx512FVecOps() {
  static const VecOps ops = {
      ScaleMaskMax,    ExpSumF32,        ExpSumBFloat16, ScaledMax,
      ScaledExpSumF32, ScaledExpSumBf16, Scale,          StoreScaled,
      LoadRow,         DequantInt8,      KvScoresAvx512, KvAccumulateAvx512,
      ToBFloat16Row,   TanhDot,          SoftCap,        AddGathered};
  return ops;
}

namespace {

// The extensions past AVX512F that the best table uses, read once.
struct Extensions {
  bool bf16 = HasAvx512Bf16();
  bool vnni = HasAvx512Vnni();
};

const Extensions& CpuExtensions() {
  static const Extensions extensions;
  return extensions;
}

// The best table's products: each stored dtype to the extension that reads
// it fastest.
void KvScoresBest(const float* q, int64_t ldq, int64_t m, int64_t d,
                  const void* k, DType kd, const float* scales, int64_t n,
                  float* s, int64_t lds) {
  if (kd == DType::kInt8 && CpuExtensions().vnni) {
    KvScoresAvx512Vnni(q, ldq, m, d, k, kd, scales, n, s, lds);
  } else if (kd == DType::kBFloat16 && CpuExtensions().bf16) {
    KvScoresAvx512Bf16(q, ldq, m, d, k, kd, scales, n, s, lds);
  } else {
    KvScoresAvx512(q, ldq, m, d, k, kd, scales, n, s, lds);
  }
}

void KvAccumulateBest(const float* p, int64_t ldp, int64_t m, const void* v,
                      DType vd, const float* scales, int64_t n, int64_t dv,
                      float* acc, int64_t ldacc) {
  if (vd == DType::kInt8 && CpuExtensions().vnni) {
    KvAccumulateAvx512Vnni(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  } else if (vd == DType::kBFloat16 && CpuExtensions().bf16) {
    KvAccumulateAvx512Bf16(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  } else {
    KvAccumulateAvx512(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  }
}

}  // namespace

const VecOps& Avx512VecOps() {
  static const VecOps ops = [] {
    VecOps best = Avx512FVecOps();
    if (CpuExtensions().bf16) {
      best.scaled_exp_sum_bf16 = ScaledExpSumBf16Avx512Bf16;
    }
    best.kv_scores = KvScoresBest;
    best.kv_accumulate = KvAccumulateBest;
    return best;
  }();
  return ops;
}

}  // namespace attnserve
