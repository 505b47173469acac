#ifndef ATTNSERVE_CORE_VEC_OPS_H_
#define ATTNSERVE_CORE_VEC_OPS_H_

// Internal: the hand-vectorized row operations of the kernels, one table per
// ISA. Each table lives in its own file whose functions are compiled for that
// ISA only (a GCC/Clang target pragma, no global -march), and is used only
// after the CPU has been checked to support it.

#include <cstdint>

#include "core/attention.h"
#include "core/tensor.h"

namespace attnserve {

struct VecOps {
  Isa isa;
  // For c in [0, n): s[c] = s[c] * scale + (bias ? bias[c] : 0) when lo <= c <
  // hi, -inf otherwise. Returns the maximum of the result (-inf if none is
  // larger).
  float (*scale_mask_max)(float* s, int64_t n, float scale, int64_t lo,
                          int64_t hi, const float* bias);
  // p[c] = exp(s[c] - m) for c in [0, n), written as f32 (dst may alias s).
  // Returns the sum of the p. exp(-inf) is exactly 0. m must be finite.
  float (*exp_sum_f32)(const float* s, int64_t n, float m, float* dst);
  // As exp_sum_f32, p rounded to bf16 (nearest even) into dst; the sum is of
  // the unrounded p.
  float (*exp_sum_bf16)(const float* s, int64_t n, float m, uint16_t* dst);
  // x[c] *= a.
  void (*scale)(float* x, int64_t n, float a);
  // dst[c] = src[c] * a, rounded to dtype (a float dtype); dst may be
  // unaligned.
  void (*store_scaled)(const float* src, int64_t n, float a, void* dst,
                       DType dtype);
  // dst[c] = src[c] widened from dtype (a float dtype); src may be unaligned.
  void (*load)(const void* src, DType dtype, int64_t n, float* dst);
  // dst[c] = src[c] rounded to bf16; dst may be unaligned.
  void (*to_bf16)(const float* src, int64_t n, uint16_t* dst);
  // Sum over c in [0, n) of v[c] * tanh(a[c] + b[c]) (additive scoring);
  // tanh within a few 1e-7 absolute, exactly ±1 for large arguments.
  float (*tanh_dot)(const float* a, const float* b, const float* v, int64_t n);
};

// The tables; the AVX-512 one needs AVX512F, the AVX2 one AVX2, FMA and F16C.
const VecOps& Avx512VecOps();
const VecOps& Avx2VecOps();

// The best ISA this CPU supports (kAvx512, kAvx2), or kAuto when it has
// neither.
Isa DetectIsa();

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VEC_OPS_H_
