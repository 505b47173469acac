#ifndef ATTNSERVE_CORE_VEC_OPS_H_
#define ATTNSERVE_CORE_VEC_OPS_H_

// Internal: the vectorized row operations of the kernels, one table per ISA.
// Each table's functions are compiled for that ISA only (Highway's per-target
// attributes or a target pragma, no global -march), and a table is used only
// after the CPU has been checked to support it.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attention.h"
#include "core/tensor.h"

namespace attnserve {

struct VecOps {
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
  // The two passes of the flash kernels' online softmax over a row of raw
  // scores s (not written): t[c] = s[c] * scale (+ bias[c] with a bias), for
  // c in [lo, hi) (clipped to [0, n)); elsewhere t[c] = -inf.
  // scaled_max: the maximum of the t (-inf when none is larger).
  float (*scaled_max)(const float* s, int64_t n, float scale, int64_t lo,
                      int64_t hi, const float* bias);
  // p[c] = exp(t[c] - row_max) for c in [0, n), written as f32 (dst may alias
  // s); returns the sum of the p. Outside [lo, hi) p is exactly 0, and the
  // maximum gives exactly 1 (t is rounded as scaled_max rounds it).
  // row_max must be finite.
  float (*scaled_exp_sum_f32)(const float* s, int64_t n, float scale,
                              int64_t lo, int64_t hi, const float* bias,
                              float row_max, float* dst);
  // As scaled_exp_sum_f32, p rounded to bf16 (nearest even) into dst; the sum
  // is of the unrounded p, whose exp may be a cheaper one (relative error
  // below 4e-6, plus up to 1.3e-4 near the max where |row_max| is up to
  // 1024; bf16 keeps 2^-9). Without a bias, scores of +-inf (only from
  // infinite inputs) may give NaN.
  float (*scaled_exp_sum_bf16)(const float* s, int64_t n, float scale,
                               int64_t lo, int64_t hi, const float* bias,
                               float row_max, uint16_t* dst);
  // x[c] *= a.
  void (*scale)(float* x, int64_t n, float a);
  // dst[c] = src[c] * a, rounded to dtype (a float dtype); dst may be
  // unaligned.
  void (*store_scaled)(const float* src, int64_t n, float a, void* dst,
                       DType dtype);
  // dst[c] = src[c] widened from dtype (a float dtype); src may be unaligned.
  void (*load)(const void* src, DType dtype, int64_t n, float* dst);
  // dst[c] = src[c] * scale (an int8 row of a paged cache); both may be
  // unaligned.
  void (*dequant_int8)(const int8_t* src, int64_t n, float scale, float* dst);
  // The products of the paged decode with few rows, reading a cache's rows
  // in their stored dtype (f32, bf16, f16, or int8 with `scales`, one per
  // row; null for the float dtypes). kv_scores: s[r·lds + t] = q_r · k_t ·
  // scale_t for r < m, t < n (q f32, ld ldq; k n dense rows of d); with bf16
  // keys the queries may be rounded to bf16 (a bf16 cache's queries are);
  // with int8 keys each query row may be rounded to 16-bit integers times
  // max|q_r|/32767 (an error of at most max|q_r|/65534 · Σ_c |k_t[c]| ·
  // scale_t in a score, k_t[c] the stored integers).
  void (*kv_scores)(const float* q, int64_t ldq, int64_t m, int64_t d,
                    const void* k, DType kd, const float* scales, int64_t n,
                    float* s, int64_t lds);
  // kv_accumulate: acc[r·ldacc + c] += Σ_{t < n} p[r·ldp + t] · scale_t ·
  // v_t[c] for r < m, c < dv (v n dense rows of dv); with bf16 values the
  // probabilities may be rounded to bf16 (as the bf16 GEMMs round them);
  // with int8 values the weights p[r·ldp + t] · scale_t of each run of
  // kInt8WeightRun tokens may be rounded to 16-bit integers times their
  // largest/32767 (an error of at most that largest/65534 · Σ_t |v_t[c]| in a
  // sum, v_t[c] the stored integers).
  void (*kv_accumulate)(const float* p, int64_t ldp, int64_t m, const void* v,
                        DType vd, const float* scales, int64_t n, int64_t dv,
                        float* acc, int64_t ldacc);
  // dst[c] = src[c] rounded to bf16; dst may be unaligned.
  void (*to_bf16)(const float* src, int64_t n, uint16_t* dst);
  // Sum over c in [0, n) of v[c] * tanh(a[c] + b[c]) (additive scoring);
  // tanh within a few 1e-7 relative (±(1 − 6e-8) past |x| = 9).
  float (*tanh_dot)(const float* a, const float* b, const float* v, int64_t n);
  // Logit soft-capping of a row of raw scores: s[c] = cap · tanh(t / cap)
  // with t = s[c] · scale (t / cap as t times 1/cap, at most FLT_MAX: a
  // denormal cap caps like the smallest normal one), within a few 1e-7
  // relative; the passes that follow then take scale 1. NaN stays NaN.
  void (*soft_cap)(float* s, int64_t n, float scale, float cap);
  // x[c] += table[index[c]] for c < n (T5's relative bias of a row).
  void (*add_gathered)(float* x, const float* table, const int32_t* index,
                       int64_t n);
  // As scaled_exp_sum_f32, and *u = the sum over [lo, hi) of p[c] · (t[c] -
  // row_max) (p = 0 adds 0, whatever t is): with the sum and the row's
  // normalizer, the entropy of its weights (StoreRowStats in
  // kernel_common.h).
  float (*scaled_exp_entropy_f32)(const float* s, int64_t n, float scale,
                                  int64_t lo, int64_t hi, const float* bias,
                                  float row_max, float* dst, float* u);
};

// The tokens whose int8 values one run of KvAccumulateAvx512Vnni's 32-bit
// sums holds (2 · 32767 · 128 per product of a pair, 128 products: below
// 2^31), each run's weights rounded with a scale of their own.
inline constexpr int64_t kInt8WeightRun = 256;

// The tables' tanh: x·P(z)/Q(z), z = x², for |x| ≤ kTanhLimit (x clamped to
// it: past it tanh is ±1 in f32), with no exp and no division (a reciprocal
// estimate and a Newton step). P and Q (coefficients from the highest
// degree) are a least-squares fit of the relative error, reweighted toward
// its maximum: 2e-8 in exact arithmetic, below 4e-7 evaluated in f32.
inline constexpr float kTanhLimit = 9.0f;
inline constexpr float kTanhP[5] = {1.335465161e-08f, 2.060907354e-05f,
                                    3.495587502e-03f, 1.338102520e-01f,
                                    1.000000000e+00f};
inline constexpr float kTanhQ[5] = {7.776553730e-07f, 3.285633866e-04f,
                                    2.587698027e-02f, 4.671434164e-01f,
                                    1.000000000e+00f};

// The tables. vec_ops_hwy.cc writes each operation once (Highway) and
// compiles it for every target below; a table may be taken only where
// RunnableIsas() lists its ISA.
#if defined(__x86_64__)
// AVX2 needs AVX2, FMA and F16C; AVX-512 needs AVX512F, BW, DQ and VL.
// Avx512VecOps() is the best of AVX-512 for this CPU: it rounds bf16 with
// AVX512-BF16's instruction where the CPU has it, and reads bf16 and int8
// rows with AVX512-BF16's and AVX512-VNNI's dot products where it has those
// (vec_ops_avx512_bf16.cc, vec_ops_avx512_vnni.cc); Avx512FVecOps() never
// does (what CPUs without them run; tests check both).
const VecOps& Avx512VecOps();
const VecOps& Avx512FVecOps();
const VecOps& Avx2VecOps();

// kv_scores with AVX512-BF16's dot product for bf16 keys (queries rounded to
// bf16; other dtypes go to Avx512FVecOps()'s); needs HasAvx512Bf16().
void KvScoresAvx512Bf16(const float* q, int64_t ldq, int64_t m, int64_t d,
                        const void* k, DType kd, const float* scales, int64_t n,
                        float* s, int64_t lds);

// kv_accumulate with AVX512-BF16's dot product for bf16 values (two tokens
// per product, the probabilities rounded to bf16 as the bf16 GEMMs round
// them; other dtypes go to Avx512FVecOps()'s); needs HasAvx512Bf16().
void KvAccumulateAvx512Bf16(const float* p, int64_t ldp, int64_t m,
                            const void* v, DType vd, const float* scales,
                            int64_t n, int64_t dv, float* acc, int64_t ldacc);

// kv_scores and kv_accumulate with AVX512-VNNI's dot product of 16-bit pairs
// for int8 rows (vec_ops_avx512_vnni.cc: the queries, and the weights, rounded
// to 16-bit integers; other dtypes go to Avx512FVecOps()'s); need
// HasAvx512Vnni().
void KvScoresAvx512Vnni(const float* q, int64_t ldq, int64_t m, int64_t d,
                        const void* k, DType kd, const float* scales, int64_t n,
                        float* s, int64_t lds);
void KvAccumulateAvx512Vnni(const float* p, int64_t ldp, int64_t m,
                            const void* v, DType vd, const float* scales,
                            int64_t n, int64_t dv, float* acc, int64_t ldacc);

// scaled_exp_sum_bf16 with AVX512-BF16's rounding (vec_ops_avx512_bf16.cc);
// needs HasAvx512Bf16().
float ScaledExpSumBf16Avx512Bf16(const float* s, int64_t n, float scale,
                                 int64_t lo, int64_t hi, const float* bias,
                                 float row_max, uint16_t* dst);
#elif defined(__aarch64__)
// NEON (Advanced SIMD), which every arm64 CPU has; SVE, whose table takes
// NEON's paged-decode products (kv_scores, kv_accumulate).
const VecOps& NeonVecOps();
const VecOps& SveVecOps();
#endif

// True when the CPU has AVX512-BF16 (vcvtneps2bf16, vdpbf16ps) and the
// AVX-512 table's ISA; false off x86-64.
bool HasAvx512Bf16();

// True when the CPU has AVX512-VNNI (vpdpwssd) and the AVX-512 table's ISA;
// false off x86-64.
bool HasAvx512Vnni();

// The best ISA this CPU supports (kAmx, kAvx512 or kAvx2 on x86-64, kSve or
// kNeon on arm64), or kAuto when it has none of them.
Isa DetectIsa();

// The ISAs this CPU runs, best first (empty when it runs none).
std::vector<Isa> RunnableIsas();

// The ISA that an engine asked for at most `max_isa` runs here: the best
// one for kAuto, else max_isa itself when this CPU runs it. Errors name
// what is missing.
absl::StatusOr<Isa> ResolveIsa(Isa max_isa);

// The table an engine of a runnable ISA uses (kAmx: the AVX-512 one, whose
// rows the tile products feed).
const VecOps& VecOpsFor(Isa isa);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VEC_OPS_H_
