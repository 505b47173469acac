#include "core/amx_products.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "core/target_region.h"

namespace attnserve {
namespace {

// Linux's arch_prctl request for an extended state component (the tile data,
// XFEATURE_XTILEDATA = 18) and its number.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;

bool DetectAmx() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx & (1u << 22)) != 0;
  const bool amx_tile = (edx & (1u << 24)) != 0;
  if (!amx_bf16 || !amx_tile) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & bit_OSXSAVE) == 0) {
    return false;
  }
  // XCR0 bits 17 (tile configuration) and 18 (tile data): the OS saves them.
  uint32_t xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
  // Linux >= 5.16 hands the tile data out per process, on request.
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
}

// The tile configuration every call loads (palette 1): tiles 0-7 all 16 rows
// of 64 bytes. C tiles 0-3 (16 × 16 f32), A tiles 4-5 (16 rows × 32 bf16),
// B tiles 6-7 (16 pairs × 16 columns). A global, so the compiler cannot drop
// its stores (GCC 12 does not see _tile_loadconfig read a local's fields).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

constexpr TileConfig MakeConfig() {
  TileConfig c{};
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}

const TileConfig kConfig = MakeConfig();

}  // namespace

bool AmxUsable() {
  static const bool usable = DetectAmx();
  return usable;
}

ATTNSERVE_TARGET_BEGIN("amx-tile,amx-bf16,avx512f,avx512bw,fma")

namespace {

// The C tiles of an MR × NR block (MR, NR in {1, 2}): tile 0 at c, 1 to its
// right, 2 below it, 3 below and right; ldc in floats.
template <int MR, int NR>
inline void ZeroC() {
  _tile_zero(0);
  if constexpr (NR > 1) _tile_zero(1);
  if constexpr (MR > 1) _tile_zero(2);
  if constexpr (MR > 1 && NR > 1) _tile_zero(3);
}

template <int MR, int NR>
inline void LoadC(const float* c, int64_t ldc) {
  _tile_loadd(0, c, ldc * 4);
  if constexpr (NR > 1) _tile_loadd(1, c + 16, ldc * 4);
  if constexpr (MR > 1) _tile_loadd(2, c + 16 * ldc, ldc * 4);
  if constexpr (MR > 1 && NR > 1) _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}

template <int MR, int NR>
inline void StoreC(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  if constexpr (NR > 1) _tile_stored(1, c + 16, ldc * 4);
  if constexpr (MR > 1) _tile_stored(2, c + 16 * ldc, ldc * 4);
  if constexpr (MR > 1 && NR > 1) _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

// C += A · B over the 32-wide slices t of the reduced dimension [0, k):
// A tiles from a + t (rows, ld lda elements), B tiles from b + 16·t (the
// first column group) and b + b_group + 16·t (the second), packed 64 bytes
// a row; between->Step() after each slice.
template <int MR, int NR>
inline void MultiplyBlock(const uint16_t* a, int64_t lda, const uint16_t* b,
                          int64_t b_group, int64_t k, AmxInterleave* between) {
  for (int64_t t = 0; t < k; t += 32) {
    _tile_loadd(4, a + t, lda * 2);
    if constexpr (MR > 1) _tile_loadd(5, a + 16 * lda + t, lda * 2);
    _tile_loadd(6, b + 16 * t, 64);
    if constexpr (NR > 1) _tile_loadd(7, b + b_group + 16 * t, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NR > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MR > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MR > 1 && NR > 1) _tile_dpbf16ps(3, 5, 7);
    between->Step();
  }
}

// Calls block.template operator()<MR, NR>(i, j) over an m × cols grid of
// 16 × 16 tiles in 2 × 2 blocks, 1-wide at the odd edges.
template <typename Block>
inline void ForEachBlock(int64_t m, int64_t cols, const Block& block) {
  for (int64_t i = 0; i < m; i += 32) {
    const bool two_rows = i + 32 <= m;
    for (int64_t j = 0; j < cols; j += 32) {
      const bool two_cols = j + 32 <= cols;
      if (two_rows && two_cols) {
        block.template operator()<2, 2>(i, j);
      } else if (two_rows) {
        block.template operator()<2, 1>(i, j);
      } else if (two_cols) {
        block.template operator()<1, 2>(i, j);
      } else {
        block.template operator()<1, 1>(i, j);
      }
    }
  }
}

// One MR × NR block of the scores at row i, key j: q's rows against packed
// K's 16-key groups (d/2 rows of 16 pairs, 16·d elements each).
struct ScoresBlocks {
  const uint16_t* q;
  int64_t ldq;
  const uint16_t* kp;
  int64_t d;
  float* s;
  int64_t lds;
  AmxInterleave* between;
  template <int MR, int NR>
  void operator()(int64_t i, int64_t j) const {
    ZeroC<MR, NR>();
    MultiplyBlock<MR, NR>(q + i * ldq, ldq, kp + (j / 16) * 16 * d, 16 * d, d,
                          between);
    StoreC<MR, NR>(s + i * lds + j, lds);
  }
};

// One MR × NR block of the accumulator at row i, column j: p's rows against
// packed V's 16-column groups, `group` elements apart, over n32 keys.
struct AccumulateBlocks {
  const uint16_t* p;
  int64_t ldp;
  const uint16_t* vp;
  int64_t group;
  int64_t n32;
  float* acc;
  int64_t ldacc;
  AmxInterleave* between;
  template <int MR, int NR>
  void operator()(int64_t i, int64_t j) const {
    float* c = acc + i * ldacc + j;
    LoadC<MR, NR>(c, ldacc);
    MultiplyBlock<MR, NR>(p + i * ldp, ldp, vp + (j / 16) * group, group, n32,
                          between);
    StoreC<MR, NR>(c, ldacc);
  }
};

}  // namespace

void AmxPackKeys(const uint16_t* k, int64_t ldk, int64_t n, int64_t d,
                 uint16_t* out) {
  // Per 16-key group, dimension pair kk: the 16 keys' (2kk, 2kk+1) as one
  // 32-bit gather (index in elements, scale 2 bytes).
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int32_t>(ldk)));
  uint32_t* dst = reinterpret_cast<uint32_t*>(out);
  for (int64_t g = 0; g < n; g += 16) {
    const int64_t valid = n - g < 16 ? n - g : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const uint16_t* base = k + g * ldk;
    for (int64_t kk = 0; kk < d / 2; ++kk, dst += 16) {
      const __m512i pairs = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), mask,
          _mm512_add_epi32(rows,
                           _mm512_set1_epi32(static_cast<int32_t>(2 * kk))),
          base, 2);
      _mm512_storeu_si512(dst, pairs);
    }
  }
}

void AmxPackValues(const uint16_t* v, int64_t ldv, int64_t n, int64_t dv,
                   uint16_t* out) {
  // Per 16-column group, key pair kk: row 2kk's 16 values in the low halves
  // of 16 32-bit lanes, row 2kk+1's in the high halves.
  const int64_t n32 = RoundUp(n, 32);
  for (int64_t c = 0; c < dv; c += 16) {
    uint16_t* dst = out + c * n32;
    for (int64_t r = 0; r < n32; r += 2, dst += 32) {
      const __m256i zero = _mm256_setzero_si256();
      const __m256i even =
          r < n ? _mm256_loadu_si256(
                      reinterpret_cast<const __m256i*>(v + r * ldv + c))
                : zero;
      const __m256i odd =
          r + 1 < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                          v + (r + 1) * ldv + c))
                    : zero;
      const __m512i pairs =
          _mm512_or_si512(_mm512_cvtepu16_epi32(even),
                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
      _mm512_storeu_si512(dst, pairs);
    }
  }
}

void AmxScores(const uint16_t* q, int64_t ldq, int64_t m,
               const uint16_t* packed_k, int64_t n, int64_t d, float* s,
               int64_t lds, AmxInterleave* between) {
  _tile_loadconfig(&kConfig);
  ForEachBlock(m, RoundUp(n, 16),
               ScoresBlocks{q, ldq, packed_k, d, s, lds, between});
  _tile_release();
}

void AmxAccumulate(const uint16_t* p, int64_t ldp, int64_t m,
                   const uint16_t* packed_v, int64_t packed_n, int64_t n,
                   int64_t dv, float* acc, int64_t ldacc,
                   AmxInterleave* between) {
  _tile_loadconfig(&kConfig);
  // A 16-column group of packed V: RoundUp(packed_n, 32)/2 rows of 16 pairs.
  ForEachBlock(m, dv,
               AccumulateBlocks{p, ldp, packed_v, 16 * RoundUp(packed_n, 32),
                                RoundUp(n, 32), acc, ldacc, between});
  _tile_release();
}

}  // namespace attnserve

ATTNSERVE_TARGET_END()
