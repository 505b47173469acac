#ifndef ATTNSERVE_CORE_AMX_PRODUCTS_H_
#define ATTNSERVE_CORE_AMX_PRODUCTS_H_

// Internal: the flash kernel's two bf16 products on AMX tiles (Intel's
// Advanced Matrix Extensions), with the B operands packed by the kernel once
// per key span instead of by oneDNN inside every product:
//   S[m × n]   = Q[m × d] · Kᵀ   (AmxScores; K packed by AmxPackKeys)
//   acc[m × dv] += P[m × n] · V  (AmxAccumulate; V packed by AmxPackValues)
// Operands are bf16 (uint16_t bits), results f32, row-major with leading
// dimensions in elements. Shapes: m a multiple of 16, d of 32, dv of 16; any
// n (keys are padded with zeros: to 16 for K, to 32 for V).
//
// Everything here runs only where AmxUsable(); the code is compiled for AMX
// alone (a target attribute, no global -march).

#include <cstdint>

namespace attnserve {

// True when the CPU has AMX-TILE and AMX-BF16, the OS enabled their register
// state, and the kernel granted this process the tile data (requested on the
// first call, as oneDNN does). Thread-safe.
bool AmxUsable();

inline int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Elements AmxPackKeys writes for n keys of d: RoundUp(n, 16) · d.
inline int64_t AmxPackedKeysSize(int64_t n, int64_t d) {
  return RoundUp(n, 16) * d;
}
// Elements AmxPackValues writes for n keys of dv: RoundUp(n, 32) · dv.
inline int64_t AmxPackedValuesSize(int64_t n, int64_t dv) {
  return RoundUp(n, 32) * dv;
}

// n key rows of d (row stride ldk) as Kᵀ in tile layout: per 16 keys, per
// pair of dimensions, the 16 keys' pairs side by side. Rows past n are zeros.
void AmxPackKeys(const uint16_t* k, int64_t ldk, int64_t n, int64_t d,
                 uint16_t* out);

// n value rows of dv (row stride ldv) in tile layout: per 16 columns, per
// pair of keys, the 16 columns' pairs side by side. Rows past n are zeros.
void AmxPackValues(const uint16_t* v, int64_t ldv, int64_t n, int64_t dv,
                   uint16_t* out);

// Work the products run between their tile steps (a step: up to four tile
// products of one 32-wide slice of a 2 × 2 block of output tiles). The tiles
// compute asynchronously from the core's vector units, so vector work placed
// between the steps (the flash kernel's softmax of other rows) runs while
// they compute. Step must not touch the product's operands or results.
class AmxInterleave {
 public:
  virtual void Step() = 0;

 protected:
  ~AmxInterleave() = default;
};

// The steps AmxScores / AmxAccumulate take for these sizes: blocks (2 × 2
// tiles, 1-wide at odd edges) times the 32-wide slices of the reduced
// dimension.
inline int64_t AmxScoresSteps(int64_t m, int64_t n, int64_t d) {
  return (RoundUp(m, 32) / 32) * (RoundUp(n, 32) / 32) * (d / 32);
}
inline int64_t AmxAccumulateSteps(int64_t m, int64_t n, int64_t dv) {
  return (RoundUp(m, 32) / 32) * (RoundUp(dv, 32) / 32) * (RoundUp(n, 32) / 32);
}

// s[m × RoundUp(n, 16)] (row stride lds) = q[m × d] · Kᵀ; the columns past n
// are the zero keys' scores, 0. between->Step() after each step.
void AmxScores(const uint16_t* q, int64_t ldq, int64_t m,
               const uint16_t* packed_k, int64_t n, int64_t d, float* s,
               int64_t lds, AmxInterleave* between);

// acc[m × dv] (row stride ldacc) += p[m × RoundUp(n, 32)] · V, V's first n
// keys of the packed_n (>= n) AmxPackValues packed; the caller zeroes p's
// columns past n. between->Step() after each step.
void AmxAccumulate(const uint16_t* p, int64_t ldp, int64_t m,
                   const uint16_t* packed_v, int64_t packed_n, int64_t n,
                   int64_t dv, float* acc, int64_t ldacc,
                   AmxInterleave* between);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_AMX_PRODUCTS_H_
