// The vector-op tables (vec_ops.h), written once with Highway's portable
// vector operations and compiled for each target this file names: AVX2 and
// AVX-512 on x86-64, NEON and SVE on arm64. Highway's foreach_target.h
// includes this file again for each target, with that target's namespace
// (N_AVX2, N_AVX3, N_NEON, N_SVE) and compiler attributes; nothing here runs
// before the CPU has been checked to support its target (vec_ops.cc).

// SSSE3 and SSE4 are below what the kernels need; SVE2 and the fixed-width
// SVE targets would add nothing the SVE one lacks.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/vec_ops_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/kv_rows.h"
#include "core/vec_ops.h"

// The targets the tables are for; Highway also compiles its baseline (static)
// target, for which this file has nothing.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || \
    HWY_TARGET == HWY_NEON || HWY_TARGET == HWY_SVE

// SVE's vectors are sizeless: they cannot be held in the arrays the decode
// products keep their accumulators in, so the SVE table takes NEON's
// products (SveVecOps, below).
#define ATTNSERVE_KV_PRODUCTS (HWY_TARGET != HWY_SVE)

HWY_BEFORE_NAMESPACE();
namespace attnserve {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DH = hn::Rebind<uint16_t, DF>;  // a vector's lanes as 16-bit halves
using DF16 = hn::Rebind<hwy::float16_t, DF>;
using DB = hn::Rebind<int8_t, DF>;

constexpr float kNegInf = -__builtin_inff();

// The most floats a vector of this target holds (the size of the buffers that
// partial vectors go through).
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Whether this target's masked loads and stores of 32-bit lanes touch only
// the lanes the mask selects (AVX2's vmaskmov, AVX-512's masks, SVE's
// predicates); elsewhere (NEON) a partial vector goes through a buffer, so
// that no byte past a row is read or written.
constexpr bool kMaskedIo =
    HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_SVE;

// The paged decode's register blocking: vectors of a value row per row in
// kv_accumulate, query rows per pass in kv_scores (AVX2 has 16 vector
// registers, the others 32).
constexpr int kChunks = HWY_TARGET == HWY_AVX2 ? 2 : 4;
constexpr int kScoreRows = HWY_TARGET == HWY_AVX2 ? 2 : 4;

inline int64_t Lanes() { return static_cast<int64_t>(hn::Lanes(DF())); }

// p[0, count) (count < Lanes()), zeros after.
inline VF LoadN(const float* p, int64_t count) {
  const DF d;
  if constexpr (kMaskedIo) {
    return hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(count)), d, p);
  } else {
    HWY_ALIGN float tmp[kMaxLanes] = {};
    std::memcpy(tmp, p, static_cast<size_t>(count) * sizeof(float));
    return hn::Load(d, tmp);
  }
}

// The first count lanes of v to p[0, count).
inline void StoreN(VF v, float* p, int64_t count) {
  const DF d;
  if constexpr (kMaskedIo) {
    hn::BlendedStore(v, hn::FirstN(d, static_cast<size_t>(count)), d, p);
  } else {
    HWY_ALIGN float tmp[kMaxLanes];
    hn::Store(v, d, tmp);
    std::memcpy(p, tmp, static_cast<size_t>(count) * sizeof(float));
  }
}

// Lanes [0, count) of v, the rest -inf.
inline VF KeepFirst(VF v, int64_t count) {
  const DF d;
  return hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(count)), v,
                        hn::Set(d, kNegInf));
}

// r, or x where x is NaN: r = max(a, x) or min(a, x) then keeps x's NaN.
// x86's max and min return their second operand when one is NaN, so r has
// it already; NEON's return the number.
inline VF KeepNaN(VF x, VF r) {
#if HWY_ARCH_X86
  return r;
#else
  return hn::IfThenElse(hn::IsNaN(x), x, r);
#endif
}
inline VF MaxKeepNaN(VF a, VF x) { return KeepNaN(x, hn::Max(a, x)); }
inline VF MinKeepNaN(VF a, VF x) { return KeepNaN(x, hn::Min(a, x)); }

inline float ReduceMax(VF v) { return hn::GetLane(hn::MaxOfLanes(DF(), v)); }
inline float ReduceAdd(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

#if ATTNSERVE_KV_PRODUCTS
// The four lanes of each 128-bit block of z added across blocks, to out[4].
template <class D>
inline void StoreBlockSums(D d, hn::Vec<D> z, float* out) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    StoreBlockSums(dh, hn::Add(hn::LowerHalf(dh, z), hn::UpperHalf(dh, z)),
                   out);
  } else {
    hn::StoreU(z, d, out);
  }
}

// The sums of a, b, c and d into out[0..3]: per 128-bit block [a0+a2, b0+b2,
// a1+a3, b1+b3], then [a, b, c, d] per block, then the blocks added.
inline void ReduceAdd4(VF a, VF b, VF c, VF d, float* out) {
  const DF df;
  const hn::Repartition<uint64_t, DF> d64;
  const VF x =
      hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));
  const VF y =
      hn::Add(hn::InterleaveLower(df, c, d), hn::InterleaveUpper(df, c, d));
  const auto x64 = hn::BitCast(d64, x);
  const auto y64 = hn::BitCast(d64, y);
  const VF z = hn::Add(hn::BitCast(df, hn::InterleaveLower(d64, x64, y64)),
                       hn::BitCast(df, hn::InterleaveUpper(d64, x64, y64)));
  StoreBlockSums(df, z, out);
}
#endif  // ATTNSERVE_KV_PRODUCTS

// 2^e for whole e in [-126, 127]: the exponent bits.
inline VF Pow2Normal(hn::Vec<DI> e) {
  const DI di;
  return hn::BitCast(DF(), hn::ShiftLeft<23>(hn::Add(e, hn::Set(di, 127))));
}

// p · 2^n for whole n >= -126 (kDenormals: n >= -252, results below FLT_MIN
// coming out as denormals), n <= 127. AVX-512 has an instruction for it
// (vscalefps, which takes any n); elsewhere the exponent bits of 2^n, in two
// factors for kDenormals.
template <bool kDenormals>
inline VF MulPow2(VF p, VF n) {
#if HWY_TARGET == HWY_AVX3
  return VF{_mm512_scalef_ps(p.raw, n.raw)};
#else
  const auto ni = hn::NearestInt(n);
  if constexpr (!kDenormals) return hn::Mul(p, Pow2Normal(ni));
  const auto half = hn::ShiftRight<1>(ni);
  return hn::Mul(hn::Mul(p, Pow2Normal(half)), Pow2Normal(hn::Sub(ni, half)));
#endif
}

// exp(x) with ~1 ulp error (Cody-Waite reduction, Cephes polynomial). Inputs
// below ln(FLT_MIN), -inf included, give exactly 0; NaN propagates.
inline VF Exp(VF x) {
  const DF d;
  const VF min_x = hn::Set(d, -87.33654f);
  const auto underflow = hn::Lt(x, min_x);
  x = MaxKeepNaN(min_x, x);
  const VF n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  VF p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), r);
  p = hn::Add(p, hn::Set(d, 1.0f));
  // n >= -126 after the clamp above.
  return hn::IfThenZeroElse(underflow, MulPow2<false>(p, n));
}

// 2^y for probabilities that are rounded to bf16 next (relative error below
// 4e-6, far under bf16's 2^-9): 2^n · 2^f with |f| <= 1/2, a degree-4
// polynomial for 2^f; half of Exp's instructions (the exp pass is bound by
// them). y is clamped to -150 first (2^-150 rounds to 0, so -inf and
// anything below give exactly 0); NaN propagates; +inf gives NaN.
inline VF Exp2ForBf16(VF y) {
  const DF d;
  y = MaxKeepNaN(hn::Set(d, -150.0f), y);
  const VF n = hn::Round(y);
  const VF f = hn::Sub(y, n);
  // Near-minimax for 2^f on [-1/2, 1/2] (relative error 3.7e-6 in f32
  // arithmetic), 2^0 exactly 1.
  VF p = hn::Set(d, 9.57007e-3f);
  p = hn::MulAdd(p, f, hn::Set(d, 5.591781e-2f));
  p = hn::MulAdd(p, f, hn::Set(d, 2.4024744e-1f));
  p = hn::MulAdd(p, f, hn::Set(d, 6.9312185e-1f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  return MulPow2<true>(p, n);
}

// f32 -> bf16 bits (round to nearest even, NaN kept quiet).
inline hn::Vec<DH> ToBFloat16(VF v) {
  const DU du;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  auto rounded = hn::ShiftRight<16>(
      hn::Add(bits, hn::Add(lsb, hn::Set(du, uint32_t{0x7fff}))));
  rounded = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)),
                           hn::Set(du, uint32_t{0x7fc0}), rounded);
  // The values fit in 16 bits: the saturating demotion keeps them.
  return hn::DemoteTo(DH(), hn::BitCast(DI(), rounded));
}

// f32 -> f16 bits (round to nearest even).
inline hn::Vec<DH> ToFloat16(VF v) {
  return hn::BitCast(DH(), hn::DemoteTo(DF16(), v));
}

// Stores the first count (at most Lanes()) halves of h at dst.
inline void StoreHalves(hn::Vec<DH> h, uint16_t* dst, int64_t count) {
  const DH dh;
  if (count == Lanes()) {
    hn::StoreU(h, dh, dst);
  } else {
    HWY_ALIGN uint16_t tmp[kMaxLanes];
    hn::Store(h, dh, tmp);
    std::memcpy(dst, tmp, static_cast<size_t>(count) * sizeof(uint16_t));
  }
}

// Widens bf16 or f16 bits to f32.
inline VF FromBFloat16(hn::Vec<DH> h) {
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), h)));
}
inline VF FromFloat16(hn::Vec<DH> h) {
  return hn::PromoteTo(DF(), hn::BitCast(DF16(), h));
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
  const DF d;
  const int64_t lanes = Lanes();
  const VF vscale = hn::Set(d, scale);
  VF vmax = hn::Set(d, kNegInf);
  int64_t c = lo;
  for (; c + lanes <= hi; c += lanes) {
    VF v = hn::Mul(hn::LoadU(d, s + c), vscale);
    if (bias != nullptr) v = hn::Add(v, hn::LoadU(d, bias + c));
    hn::StoreU(v, d, s + c);
    vmax = hn::Max(vmax, v);
  }
  if (c < hi) {
    // Padding with 0, not -inf: -inf * scale is NaN for scale 0 and +inf
    // for a negative scale. The padded lanes are set to -inf after scaling.
    VF v = hn::Mul(LoadN(s + c, hi - c), vscale);
    if (bias != nullptr) v = hn::Add(v, LoadN(bias + c, hi - c));
    StoreN(v, s + c, hi - c);
    vmax = hn::Max(vmax, KeepFirst(v, hi - c));
  }
  return ReduceMax(vmax);
}

// The scaled scores of s[c, c + Lanes()) (or of its first count lanes, zeros
// loaded past them): s * scale (+ bias, in the same rounding), computed the
// same way by every pass over a row.
inline VF ScaledScores(const float* s, const float* bias, int64_t c,
                       int64_t count, VF scale) {
  const DF d;
  const bool full = count == Lanes();
  const VF v = full ? hn::LoadU(d, s + c) : LoadN(s + c, count);
  if (bias == nullptr) return hn::Mul(v, scale);
  return hn::MulAdd(v, scale,
                    full ? hn::LoadU(d, bias + c) : LoadN(bias + c, count));
}

// max over c in [lo, hi) of ScaledScores; -inf when empty. Reads only. Four
// accumulators (max's latency, not its throughput, would bound one). Without
// a bias and with scale > 0 the maximum of s is scaled once: rounding is
// monotonic, so that is the maximum of the scaled scores.
float ScaledMax(const float* s, int64_t n, float scale, int64_t lo, int64_t hi,
                const float* bias) {
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  if (hi <= lo) return kNegInf;
  const DF d;
  const int64_t lanes = Lanes();
  const bool raw = bias == nullptr && scale > 0.0f;
  const VF vscale = hn::Set(d, scale);
  const auto load = [&](int64_t c, int64_t count) {
    if (!raw) return ScaledScores(s, bias, c, count, vscale);
    return count == lanes ? hn::LoadU(d, s + c) : LoadN(s + c, count);
  };
  VF m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int64_t c = lo;
  for (; c + 4 * lanes <= hi; c += 4 * lanes) {
    m0 = hn::Max(m0, load(c, lanes));
    m1 = hn::Max(m1, load(c + lanes, lanes));
    m2 = hn::Max(m2, load(c + 2 * lanes, lanes));
    m3 = hn::Max(m3, load(c + 3 * lanes, lanes));
  }
  for (; c + lanes <= hi; c += lanes) m0 = hn::Max(m0, load(c, lanes));
  if (c < hi) m1 = hn::Max(m1, KeepFirst(load(c, hi - c), hi - c));
  const float top = ReduceMax(hn::Max(hn::Max(m0, m1), hn::Max(m2, m3)));
  return raw && top != kNegInf ? top * scale : top;
}

inline void StoreF32(VF p, float* dst, int64_t count) {
  if (count == Lanes()) {
    hn::StoreU(p, DF(), dst);
  } else {
    StoreN(p, dst, count);
  }
}

inline void StoreBf16(VF p, uint16_t* dst, int64_t count) {
  StoreHalves(ToBFloat16(p), dst, count);
}

// The exp passes' interval [lo, hi) clipped to [0, n), and dst zeroed
// outside it.
template <typename Dst>
void ZeroOutside(int64_t n, int64_t* lo, int64_t* hi, Dst* dst) {
  *lo = std::clamp<int64_t>(*lo, 0, n);
  *hi = std::clamp<int64_t>(*hi, *lo, n);
  std::memset(dst, 0, static_cast<size_t>(*lo) * sizeof(Dst));
  std::memset(dst + *hi, 0, static_cast<size_t>(n - *hi) * sizeof(Dst));
}

// The exp pass of a row: p = exp(ScaledScores - row_max) on [lo, hi), 0 on
// the rest of [0, n), each vector (or the count < Lanes() of a tail) of p
// stored by Store(p, dst + c, count). Returns the sum of the p (before any
// rounding Store does). kForBf16: the cheaper 2^y (Exp2ForBf16), and while
// |row_max| <= kFoldLimit the scale, log2 e and the maximum folded into one
// multiply-add (its rounding adds at most 1.2e-7 · |row_max| to the
// exponent, where a score near the max matters: below 1.3e-4); past it the
// difference first, so that no exponent is positive however large the
// scores. Else Exp of the difference.
template <bool kForBf16, typename Dst, void (*Store)(VF, Dst*, int64_t)>
float ScaledExpSum(const float* s, int64_t n, float scale, int64_t lo,
                   int64_t hi, const float* bias, float row_max, Dst* dst) {
  ZeroOutside(n, &lo, &hi, dst);
  const DF d;
  const int64_t lanes = Lanes();
  constexpr float kLog2e = 1.44269504088896341f;
  const VF vscale = hn::Set(d, scale);
  const VF vmax = hn::Set(d, row_max);
  const VF log2e = hn::Set(d, kLog2e);
  const VF scale_log2e = hn::Set(d, scale * kLog2e);
  const VF max_log2e = hn::Set(d, -row_max * kLog2e);
  constexpr float kFoldLimit = 1024.0f;
  const bool fold = std::fabs(row_max) <= kFoldLimit;
  const auto exp = [&](int64_t c, int64_t count) {
    if constexpr (kForBf16) {
      if (!fold) {
        return Exp2ForBf16(hn::Mul(
            hn::Sub(ScaledScores(s, bias, c, count, vscale), vmax), log2e));
      }
      // Without a bias the scores are finite (products of finite inputs):
      // the scale folds into the multiply-add too.
      if (bias == nullptr) {
        const VF raw =
            count == lanes ? hn::LoadU(d, s + c) : LoadN(s + c, count);
        return Exp2ForBf16(hn::MulAdd(raw, scale_log2e, max_log2e));
      }
      return Exp2ForBf16(hn::MulAdd(ScaledScores(s, bias, c, count, vscale),
                                    log2e, max_log2e));
    } else {
      return Exp(hn::Sub(ScaledScores(s, bias, c, count, vscale), vmax));
    }
  };
  VF sum0 = hn::Zero(d), sum1 = sum0;
  int64_t c = lo;
  for (; c + 2 * lanes <= hi; c += 2 * lanes) {
    const VF p0 = exp(c, lanes);
    const VF p1 = exp(c + lanes, lanes);
    Store(p0, dst + c, lanes);
    Store(p1, dst + c + lanes, lanes);
    sum0 = hn::Add(sum0, p0);
    sum1 = hn::Add(sum1, p1);
  }
  for (; c < hi; c += lanes) {
    const int64_t count = std::min(lanes, hi - c);
    // Lanes past count were loaded as zeros: their p is dropped.
    const VF p = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(count)),
                                    exp(c, count));
    Store(p, dst + c, count);
    sum0 = hn::Add(sum0, p);
  }
  return ReduceAdd(hn::Add(sum0, sum1));
}

// VecOps::scaled_exp_entropy_f32: ScaledExpSum's f32 pass with the sum of
// p·(t - row_max) beside the sum of p.
float ScaledExpEntropyF32(const float* s, int64_t n, float scale, int64_t lo,
                          int64_t hi, const float* bias, float row_max,
                          float* dst, float* u) {
  ZeroOutside(n, &lo, &hi, dst);
  const DF d;
  const int64_t lanes = Lanes();
  const VF vscale = hn::Set(d, scale);
  const VF vmax = hn::Set(d, row_max);
  const VF zero = hn::Zero(d);
  VF sum0 = zero, sum1 = zero, u0 = zero, u1 = zero;
  // One vector of keys from c: its p stored, added to `sum` and p·(t - max),
  // where p is not 0 (a masked key's t is -inf), to `usum`.
  const auto step = [&](int64_t c, int64_t count, VF& sum, VF& usum) {
    const VF x = hn::Sub(ScaledScores(s, bias, c, count, vscale), vmax);
    // Lanes past count were loaded as zeros: their p is dropped.
    const VF p =
        hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(count)), Exp(x));
    StoreF32(p, dst + c, count);
    sum = hn::Add(sum, p);
    usum = hn::Add(usum, hn::IfThenZeroElse(hn::Eq(p, zero), hn::Mul(p, x)));
  };
  int64_t c = lo;
  for (; c + 2 * lanes <= hi; c += 2 * lanes) {
    step(c, lanes, sum0, u0);
    step(c + lanes, lanes, sum1, u1);
  }
  for (; c < hi; c += lanes) step(c, std::min(lanes, hi - c), sum0, u0);
  *u = ReduceAdd(hn::Add(u0, u1));
  return ReduceAdd(hn::Add(sum0, sum1));
}

// The plain exp passes (VecOps::exp_sum_*): the scaled pass at scale 1 over
// the whole row, with the accurate Exp (rows may hold -inf).
float ExpSumF32(const float* s, int64_t n, float m, float* dst) {
  return ScaledExpSum<false, float, StoreF32>(s, n, 1.0f, 0, n, nullptr, m,
                                              dst);
}

float ExpSumBFloat16(const float* s, int64_t n, float m, uint16_t* dst) {
  return ScaledExpSum<false, uint16_t, StoreBf16>(s, n, 1.0f, 0, n, nullptr, m,
                                                  dst);
}

float ScaledExpSumF32(const float* s, int64_t n, float scale, int64_t lo,
                      int64_t hi, const float* bias, float row_max,
                      float* dst) {
  return ScaledExpSum<false, float, StoreF32>(s, n, scale, lo, hi, bias,
                                              row_max, dst);
}

float ScaledExpSumBf16(const float* s, int64_t n, float scale, int64_t lo,
                       int64_t hi, const float* bias, float row_max,
                       uint16_t* dst) {
  return ScaledExpSum<true, uint16_t, StoreBf16>(s, n, scale, lo, hi, bias,
                                                 row_max, dst);
}

void Scale(float* x, int64_t n, float a) {
  const DF d;
  const int64_t lanes = Lanes();
  const VF va = hn::Set(d, a);
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, x + c), va), d, x + c);
  }
  if (c < n) StoreN(hn::Mul(LoadN(x + c, n - c), va), x + c, n - c);
}

void StoreScaled(const float* src, int64_t n, float a, void* dst, DType dtype) {
  const DF d;
  const int64_t lanes = Lanes();
  const VF va = hn::Set(d, a);
  char* out = static_cast<char*>(dst);
  for (int64_t c = 0; c < n; c += lanes) {
    const int64_t count = std::min(lanes, n - c);
    const VF v = hn::Mul(
        count == lanes ? hn::LoadU(d, src + c) : LoadN(src + c, count), va);
    if (dtype == DType::kFloat32) {
      StoreF32(v, reinterpret_cast<float*>(out + 4 * c), count);
    } else {
      StoreHalves(dtype == DType::kBFloat16 ? ToBFloat16(v) : ToFloat16(v),
                  reinterpret_cast<uint16_t*>(out + 2 * c), count);
    }
  }
}

void LoadRow(const void* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const DH dh;
  const int64_t lanes = Lanes();
  const char* in = static_cast<const char*>(src);
  for (int64_t c = 0; c < n; c += lanes) {
    const int64_t count = std::min(lanes, n - c);
    hn::Vec<DH> h;
    if (count == lanes) {
      h = hn::LoadU(dh, reinterpret_cast<const uint16_t*>(in + 2 * c));
    } else {
      HWY_ALIGN uint16_t tmp[kMaxLanes] = {};
      std::memcpy(tmp, in + 2 * c, static_cast<size_t>(count) * 2);
      h = hn::Load(dh, tmp);
    }
    StoreF32(dtype == DType::kBFloat16 ? FromBFloat16(h) : FromFloat16(h),
             dst + c, count);
  }
}

void ToBFloat16Row(const float* src, int64_t n, uint16_t* dst) {
  StoreScaled(src, n, 1.0f, dst, DType::kBFloat16);
}

// tanh (vec_ops.h, kTanhP / kTanhQ); NaN stays NaN.
inline VF Tanh(VF x) {
  const DF d;
  x = MinKeepNaN(hn::Set(d, kTanhLimit),
                 MaxKeepNaN(hn::Set(d, -kTanhLimit), x));
  const VF z = hn::Mul(x, x);
  VF p = hn::Set(d, kTanhP[0]);
  VF q = hn::Set(d, kTanhQ[0]);
  for (int i = 1; i < 5; ++i) {
    p = hn::MulAdd(p, z, hn::Set(d, kTanhP[i]));
    q = hn::MulAdd(q, z, hn::Set(d, kTanhQ[i]));
  }
#if HWY_ARCH_X86
  // 1/q: a 12-bit (AVX2) or 14-bit (AVX-512) estimate and one Newton step
  // (about 2^-22).
  VF inv = hn::ApproximateReciprocal(q);
  inv = hn::Mul(inv, hn::NegMulAdd(q, inv, hn::Set(d, 2.0f)));
  return hn::Mul(hn::Mul(x, p), inv);
#else
  // The estimate has 8 bits elsewhere: divide.
  return hn::Div(hn::Mul(x, p), q);
#endif
}

void AddGathered(float* x, const float* table, const int32_t* index,
                 int64_t n) {
  const DF d;
  const DI di;
  const int64_t lanes = Lanes();
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    const VF g = hn::GatherIndex(d, table, hn::LoadU(di, index + c));
    hn::StoreU(hn::Add(hn::LoadU(d, x + c), g), d, x + c);
  }
  for (; c < n; ++c) x[c] += table[index[c]];
}

void SoftCap(float* s, int64_t n, float scale, float cap) {
  const DF d;
  const int64_t lanes = Lanes();
  const VF vs = hn::Set(d, scale);
  const VF inv = hn::Set(d, std::min(1.0f / cap, FLT_MAX));
  const VF vcap = hn::Set(d, cap);
  const auto capped = [&](VF x) {
    return hn::Mul(vcap, Tanh(hn::Mul(hn::Mul(x, vs), inv)));
  };
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    hn::StoreU(capped(hn::LoadU(d, s + c)), d, s + c);
  }
  if (c < n) StoreN(capped(LoadN(s + c, n - c)), s + c, n - c);
}

float TanhDot(const float* a, const float* b, const float* v, int64_t n) {
  const DF d;
  const int64_t lanes = Lanes();
  VF acc = hn::Zero(d);
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    const VF x = hn::Add(hn::LoadU(d, a + c), hn::LoadU(d, b + c));
    acc = hn::MulAdd(hn::LoadU(d, v + c), Tanh(x), acc);
  }
  if (c < n) {
    // Lanes past n have v = 0 and x = 0 (tanh 0 = 0): they add nothing.
    const VF x = hn::Add(LoadN(a + c, n - c), LoadN(b + c, n - c));
    acc = hn::MulAdd(LoadN(v + c, n - c), Tanh(x), acc);
  }
  return ReduceAdd(acc);
}

inline VF FromInt8(hn::Vec<DB> q) {
  return hn::ConvertTo(DF(), hn::PromoteTo(DI(), q));
}

void DequantInt8(const int8_t* src, int64_t n, float scale, float* dst) {
  const DF d;
  const int64_t lanes = Lanes();
  const VF vs = hn::Set(d, scale);
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    hn::StoreU(hn::Mul(FromInt8(hn::LoadU(DB(), src + c)), vs), d, dst + c);
  }
  for (; c < n; ++c) dst[c] = static_cast<float>(src[c]) * scale;
}

#if ATTNSERVE_KV_PRODUCTS
// The paged decode's products (VecOps::kv_scores and kv_accumulate) read a
// cache's key and value rows in their stored dtype — f32, bf16, f16, or int8
// with a scale per row — widening each vector in registers, so a decode step
// reads the cache once, at its own width, with no converted copy and no GEMM
// call per block.

// Elements [c, c + Lanes()) of a row widened to f32.
template <DType kD>
inline VF LoadKv(const char* row, int64_t c) {
  if constexpr (kD == DType::kBFloat16) {
    return FromBFloat16(
        hn::LoadU(DH(), reinterpret_cast<const uint16_t*>(row) + c));
  } else if constexpr (kD == DType::kFloat16) {
    return FromFloat16(
        hn::LoadU(DH(), reinterpret_cast<const uint16_t*>(row) + c));
  } else if constexpr (kD == DType::kInt8) {
    return FromInt8(hn::LoadU(DB(), reinterpret_cast<const int8_t*>(row) + c));
  } else {
    return hn::LoadU(DF(), reinterpret_cast<const float*>(row) + c);
  }
}

// Elements [c, c + count) of a row (count < Lanes()), zeros after.
template <DType kD>
inline VF LoadKvPartial(const char* row, int64_t c, int64_t count) {
  HWY_ALIGN char tmp[HWY_MAX_BYTES] = {};
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  std::memcpy(tmp, row + c * es, static_cast<size_t>(count * es));
  return LoadKv<kD>(tmp, 0);
}

// Scores of R query rows (f32, ld ldq) against n key rows of d elements,
// four keys at a time (their R × 4 sums reduced together by ReduceAdd4).
template <DType kD, int R>
void KvScoresRows(const float* q, int64_t ldq, int64_t d, const char* k,
                  const float* k_scales, int64_t n, float* s, int64_t lds) {
  const DF df;
  const int64_t lanes = Lanes();
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  const int64_t row_bytes = d * es;
  const int64_t full = d / lanes * lanes;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const char* rows = k + t * row_bytes;
    for (int i = 0; i < 4; ++i) {
      PrefetchRow(rows + i * row_bytes, row_bytes, t + i, n);
    }
    VF acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < 4; ++i) acc[r][i] = hn::Zero(df);
    }
    for (int64_t c = 0; c < full; c += lanes) {
      VF kv[4];
      for (int i = 0; i < 4; ++i) kv[i] = LoadKv<kD>(rows + i * row_bytes, c);
      for (int r = 0; r < R; ++r) {
        const VF qv = hn::LoadU(df, q + r * ldq + c);
        for (int i = 0; i < 4; ++i)
          acc[r][i] = hn::MulAdd(qv, kv[i], acc[r][i]);
      }
    }
    if (full < d) {
      VF kv[4];
      for (int i = 0; i < 4; ++i) {
        kv[i] = LoadKvPartial<kD>(rows + i * row_bytes, full, d - full);
      }
      for (int r = 0; r < R; ++r) {
        const VF qv = LoadN(q + r * ldq + full, d - full);
        for (int i = 0; i < 4; ++i)
          acc[r][i] = hn::MulAdd(qv, kv[i], acc[r][i]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float sums[4];
      ReduceAdd4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], sums);
      for (int i = 0; i < 4; ++i) {
        s[r * lds + t + i] =
            sums[i] * (k_scales != nullptr ? k_scales[t + i] : 1.0f);
      }
    }
  }
  for (; t < n; ++t) {
    const char* row = k + t * row_bytes;
    VF acc[R];
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
    for (int64_t c = 0; c < full; c += lanes) {
      const VF kv = LoadKv<kD>(row, c);
      for (int r = 0; r < R; ++r) {
        acc[r] = hn::MulAdd(hn::LoadU(df, q + r * ldq + c), kv, acc[r]);
      }
    }
    if (full < d) {
      const VF kv = LoadKvPartial<kD>(row, full, d - full);
      for (int r = 0; r < R; ++r) {
        acc[r] = hn::MulAdd(LoadN(q + r * ldq + full, d - full), kv, acc[r]);
      }
    }
    const float scale = k_scales != nullptr ? k_scales[t] : 1.0f;
    for (int r = 0; r < R; ++r) s[r * lds + t] = ReduceAdd(acc[r]) * scale;
  }
}

template <DType kD>
void KvScoresOf(const float* q, int64_t ldq, int64_t m, int64_t d,
                const char* k, const float* k_scales, int64_t n, float* s,
                int64_t lds) {
  ForRowGroups<kScoreRows>(m, [&](auto rows, int64_t r0) {
    KvScoresRows<kD, decltype(rows)::value>(q + r0 * ldq, ldq, d, k, k_scales,
                                            n, s + r0 * lds, lds);
  });
}

// s[r·lds + t] = q_r · k_t (times k_scales[t] when given) for r < m, t < n.
void KvScores(const float* q, int64_t ldq, int64_t m, int64_t d, const void* k,
              DType kd, const float* k_scales, int64_t n, float* s,
              int64_t lds) {
  const char* kp = static_cast<const char*>(k);
  switch (kd) {
    case DType::kBFloat16:
      return KvScoresOf<DType::kBFloat16>(q, ldq, m, d, kp, k_scales, n, s,
                                          lds);
    case DType::kFloat16:
      return KvScoresOf<DType::kFloat16>(q, ldq, m, d, kp, k_scales, n, s, lds);
    case DType::kInt8:
      return KvScoresOf<DType::kInt8>(q, ldq, m, d, kp, k_scales, n, s, lds);
    default:
      return KvScoresOf<DType::kFloat32>(q, ldq, m, d, kp, k_scales, n, s, lds);
  }
}

// acc[r][c0, c0 + C·Lanes()) += Σ_t p[r][t] · scale_t · v_t for R rows (the
// last `count` < Lanes() columns only when kTail, then C = 1). R and C are
// constants, so the R × C accumulators stay in registers.
template <DType kD, int R, int C, bool kTail>
void KvAccumulateRows(const float* p, int64_t ldp, const char* v,
                      const float* v_scales, int64_t n, int64_t dv, int64_t c0,
                      int64_t count, float* acc, int64_t ldacc) {
  const DF df;
  const int64_t lanes = Lanes();
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  VF a[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      const float* at = acc + r * ldacc + c0 + j * lanes;
      a[r][j] = kTail ? LoadN(at, count) : hn::LoadU(df, at);
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    const char* row = v + t * dv * es;
    if (c0 == 0) PrefetchRow(row, dv * es, t, n);
    VF vv[C];
    for (int j = 0; j < C; ++j) {
      vv[j] = kTail ? LoadKvPartial<kD>(row, c0, count)
                    : LoadKv<kD>(row, c0 + j * lanes);
    }
    const float scale = v_scales != nullptr ? v_scales[t] : 1.0f;
    for (int r = 0; r < R; ++r) {
      const VF w = hn::Set(df, p[r * ldp + t] * scale);
      for (int j = 0; j < C; ++j) a[r][j] = hn::MulAdd(w, vv[j], a[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      float* at = acc + r * ldacc + c0 + j * lanes;
      if (kTail) {
        StoreN(a[r][j], at, count);
      } else {
        hn::StoreU(a[r][j], df, at);
      }
    }
  }
}

// R rows over every column: kChunks vectors at a time, then single vectors,
// then the partial last one.
template <DType kD, int R>
void KvAccumulateColumns(const float* p, int64_t ldp, const char* v,
                         const float* v_scales, int64_t n, int64_t dv,
                         float* acc, int64_t ldacc) {
  const int64_t lanes = Lanes();
  const int64_t wide = kChunks * lanes;
  int64_t c0 = 0;
  for (; c0 + wide <= dv; c0 += wide) {
    KvAccumulateRows<kD, R, kChunks, false>(p, ldp, v, v_scales, n, dv, c0, 0,
                                            acc, ldacc);
  }
  for (; c0 + lanes <= dv; c0 += lanes) {
    KvAccumulateRows<kD, R, 1, false>(p, ldp, v, v_scales, n, dv, c0, 0, acc,
                                      ldacc);
  }
  if (c0 < dv) {
    KvAccumulateRows<kD, R, 1, true>(p, ldp, v, v_scales, n, dv, c0, dv - c0,
                                     acc, ldacc);
  }
}

template <DType kD>
void KvAccumulateOf(const float* p, int64_t ldp, int64_t m, const char* v,
                    const float* v_scales, int64_t n, int64_t dv, float* acc,
                    int64_t ldacc) {
  ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
    KvAccumulateColumns<kD, decltype(rows)::value>(
        p + r0 * ldp, ldp, v, v_scales, n, dv, acc + r0 * ldacc, ldacc);
  });
}

// acc[r·ldacc + c] += Σ_{t < n} p[r·ldp + t] · v_t[c] (times v_scales[t]
// when given) for r < m, c < dv.
void KvAccumulate(const float* p, int64_t ldp, int64_t m, const void* v,
                  DType vd, const float* v_scales, int64_t n, int64_t dv,
                  float* acc, int64_t ldacc) {
  const char* vp = static_cast<const char*>(v);
  switch (vd) {
    case DType::kBFloat16:
      return KvAccumulateOf<DType::kBFloat16>(p, ldp, m, vp, v_scales, n, dv,
                                              acc, ldacc);
    case DType::kFloat16:
      return KvAccumulateOf<DType::kFloat16>(p, ldp, m, vp, v_scales, n, dv,
                                             acc, ldacc);
    case DType::kInt8:
      return KvAccumulateOf<DType::kInt8>(p, ldp, m, vp, v_scales, n, dv, acc,
                                          ldacc);
    default:
      return KvAccumulateOf<DType::kFloat32>(p, ldp, m, vp, v_scales, n, dv,
                                             acc, ldacc);
  }
}
#endif  // ATTNSERVE_KV_PRODUCTS

}  // namespace
}  // namespace HWY_NAMESPACE
}  // namespace attnserve
HWY_AFTER_NAMESPACE();

// Each target's table, built outside its target region: taking it must not
// need the ISA.
namespace attnserve {
namespace HWY_NAMESPACE {

// Without ATTNSERVE_KV_PRODUCTS the products are null, for another target's.
const VecOps& Table() {
#if ATTNSERVE_KV_PRODUCTS
  constexpr auto kv_scores = KvScores;
  constexpr auto kv_accumulate = KvAccumulate;
#else
  constexpr decltype(VecOps::kv_scores) kv_scores = nullptr;
  constexpr decltype(VecOps::kv_accumulate) kv_accumulate = nullptr;
#endif
  static const VecOps ops = {ScaleMaskMax,
                             ExpSumF32,
                             ExpSumBFloat16,
                             ScaledMax,
                             ScaledExpSumF32,
                             ScaledExpSumBf16,
                             Scale,
                             StoreScaled,
                             LoadRow,
                             DequantInt8,
                             kv_scores,
                             kv_accumulate,
                             ToBFloat16Row,
                             TanhDot,
                             SoftCap,
                             AddGathered,
                             ScaledExpEntropyF32};
  return ops;
}

}  // namespace HWY_NAMESPACE
}  // namespace attnserve

#endif  // HWY_TARGET is one of the tables' targets

#if HWY_ONCE
namespace attnserve {

#if HWY_ARCH_X86
const VecOps& Avx2VecOps() { return N_AVX2::Table(); }
const VecOps& Avx512FVecOps() { return N_AVX3::Table(); }
#elif HWY_ARCH_ARM_A64
const VecOps& NeonVecOps() { return N_NEON::Table(); }
const VecOps& SveVecOps() {
  static const VecOps ops = [] {
    VecOps sve = N_SVE::Table();
    sve.kv_scores = NeonVecOps().kv_scores;
    sve.kv_accumulate = NeonVecOps().kv_accumulate;
    return sve;
  }();
  return ops;
}
#endif

}  // namespace attnserve
#endif  // HWY_ONCE
