// The AVX-512 table's bf16 exp pass with AVX512-BF16's rounding instruction:
// one vcvtneps2bf16 for 16 values instead of eight integer operations. Runs
// only where HasAvx512Bf16() (Avx512VecOps() picks it).

#include <immintrin.h>

#include <cstdint>

#include "core/vec_ops.h"

#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bf16,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16,fma")
#endif

#include "core/vec_ops_avx512_inl.h"

namespace attnserve {
namespace {

// Rounds to nearest even like ToBFloat16; NaN stays NaN.
inline void StoreBf16Native(__m512 p, uint16_t* dst, int64_t count) {
  StoreHalves(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)), dst, count);
}

}  // namespace

float ScaledExpSumBf16Avx512Bf16(const float* s, int64_t n, float scale,
                                 int64_t lo, int64_t hi, const float* bias,
                                 float row_max, uint16_t* dst) {
  return ScaledExpSumImpl<true, uint16_t, StoreBf16Native>(s, n, scale, lo, hi,
                                                           bias, row_max, dst);
}

}  // namespace attnserve

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
