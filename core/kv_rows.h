#ifndef ATTNSERVE_CORE_KV_ROWS_H_
#define ATTNSERVE_CORE_KV_ROWS_H_

// Internal: what every table's paged-decode products (VecOps::kv_scores and
// VecOps::kv_accumulate) share, whatever their ISA: prefetching a cache's rows
// ahead and splitting a step's query rows into groups of a constant size.

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace attnserve {
namespace {

// Rows about this many bytes ahead are prefetched: a row is a few cache
// lines, too little work per line for the hardware's prefetch to hide the
// memory's latency.
constexpr int64_t kPrefetchBytes = 8192;

// Every cache line of the row kPrefetchBytes past `row` (row t of n, when
// that one is still a row of the n).
inline void PrefetchRow(const char* row, int64_t row_bytes, int64_t t,
                        int64_t n) {
  const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / row_bytes);
  if (t + ahead >= n) return;
  const char* next = row + ahead * row_bytes;
  for (int64_t b = 0; b < row_bytes; b += 64) {
    __builtin_prefetch(next + b);
  }
}

// f(std::integral_constant<int, R>{}, r0) for each group [r0, r0 + R) of m
// rows, R = kMax but for the last group: the row count a constant, so that a
// group's accumulators stay in registers.
template <int kMax, class F>
inline void ForRowGroups(int64_t m, F&& f) {
  static_assert(kMax >= 1 && kMax <= 4);
  for (int64_t r0 = 0; r0 < m; r0 += kMax) {
    switch (std::min<int64_t>(kMax, m - r0)) {
      case 1:
        f(std::integral_constant<int, 1>{}, r0);
        break;
      case 2:
        if constexpr (kMax >= 2) f(std::integral_constant<int, 2>{}, r0);
        break;
      case 3:
        if constexpr (kMax >= 3) f(std::integral_constant<int, 3>{}, r0);
        break;
      default:
        if constexpr (kMax >= 4) f(std::integral_constant<int, 4>{}, r0);
        break;
    }
  }
}

}  // namespace
}  // namespace attnserve

#endif  // ATTNSERVE_CORE_KV_ROWS_H_
