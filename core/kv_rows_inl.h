#ifndef ATTNSERVE_CORE_KV_ROWS_INL_H_
#define ATTNSERVE_CORE_KV_ROWS_INL_H_

// Internal: the products of the paged decode with few rows
// (VecOps::kv_scores and VecOps::kv_accumulate), written once over an ISA's
// vector traits `A` and included inside that ISA's target region
// (vec_ops_avx512.cc, vec_ops_avx2.cc). They read a paged cache's key and
// value rows in their stored dtype — f32, bf16, f16, or int8 with a scale per
// row — widening each vector in registers, so a decode step reads the cache
// once, at its own width, with no converted copy and no GEMM call per block.
//
// A provides:
//   V, kLanes, kChunks (vectors of a value row held per row in
//   kv_accumulate's registers), kScoreRows (query rows whose scores against
//   four keys stay in registers, at most 4), Zero(), Set1(f),
//   Load(const float*),
//   LoadPartial(const float*, count) (zeros past count), Store(float*, V),
//   StorePartial(float*, V, count), Fma(a, b, c) = a·b + c, Sum(V),
//   Sum4(a, b, c, d, float out[4]) (the four sums),
//   LoadKv<DType>(const char* row, int64_t c): elements [c, c + kLanes) of a
//   row widened to f32.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/tensor.h"

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

// Elements [c, c + count) of a row (count < kLanes), zeros after.
template <class A, DType kD>
inline typename A::V LoadKvPartial(const char* row, int64_t c, int64_t count) {
  alignas(64) char tmp[A::kLanes * 4] = {};
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  std::memcpy(tmp, row + c * es, static_cast<size_t>(count * es));
  return A::template LoadKv<kD>(tmp, 0);
}

// Scores of R query rows (f32, ld ldq) against n key rows of d elements,
// four keys at a time (their R × 4 sums reduced together by Sum4).
template <class A, DType kD, int R>
void KvScoresRows(const float* q, int64_t ldq, int64_t d, const char* k,
                  const float* k_scales, int64_t n, float* s, int64_t lds) {
  using V = typename A::V;
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  const int64_t row_bytes = d * es;
  const int64_t full = d / A::kLanes * A::kLanes;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const char* rows = k + t * row_bytes;
    for (int i = 0; i < 4; ++i) {
      PrefetchRow(rows + i * row_bytes, row_bytes, t + i, n);
    }
    V acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < 4; ++i) acc[r][i] = A::Zero();
    }
    for (int64_t c = 0; c < full; c += A::kLanes) {
      V kv[4];
      for (int i = 0; i < 4; ++i) {
        kv[i] = A::template LoadKv<kD>(rows + i * row_bytes, c);
      }
      for (int r = 0; r < R; ++r) {
        const V qv = A::Load(q + r * ldq + c);
        for (int i = 0; i < 4; ++i) acc[r][i] = A::Fma(qv, kv[i], acc[r][i]);
      }
    }
    if (full < d) {
      V kv[4];
      for (int i = 0; i < 4; ++i) {
        kv[i] = LoadKvPartial<A, kD>(rows + i * row_bytes, full, d - full);
      }
      for (int r = 0; r < R; ++r) {
        const V qv = A::LoadPartial(q + r * ldq + full, d - full);
        for (int i = 0; i < 4; ++i) acc[r][i] = A::Fma(qv, kv[i], acc[r][i]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float sums[4];
      A::Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], sums);
      for (int i = 0; i < 4; ++i) {
        s[r * lds + t + i] =
            sums[i] * (k_scales != nullptr ? k_scales[t + i] : 1.0f);
      }
    }
  }
  for (; t < n; ++t) {
    const char* row = k + t * row_bytes;
    V acc[R];
    for (int r = 0; r < R; ++r) acc[r] = A::Zero();
    for (int64_t c = 0; c < full; c += A::kLanes) {
      const V kv = A::template LoadKv<kD>(row, c);
      for (int r = 0; r < R; ++r) {
        acc[r] = A::Fma(A::Load(q + r * ldq + c), kv, acc[r]);
      }
    }
    if (full < d) {
      const V kv = LoadKvPartial<A, kD>(row, full, d - full);
      for (int r = 0; r < R; ++r) {
        acc[r] =
            A::Fma(A::LoadPartial(q + r * ldq + full, d - full), kv, acc[r]);
      }
    }
    const float scale = k_scales != nullptr ? k_scales[t] : 1.0f;
    for (int r = 0; r < R; ++r) s[r * lds + t] = A::Sum(acc[r]) * scale;
  }
}

template <class A, DType kD>
void KvScoresOf(const float* q, int64_t ldq, int64_t m, int64_t d,
                const char* k, const float* k_scales, int64_t n, float* s,
                int64_t lds) {
  ForRowGroups<A::kScoreRows>(m, [&](auto rows, int64_t r0) {
    KvScoresRows<A, kD, decltype(rows)::value>(q + r0 * ldq, ldq, d, k,
                                               k_scales, n, s + r0 * lds, lds);
  });
}

// s[r·lds + t] = q_r · k_t (times k_scales[t] when given) for r < m, t < n.
template <class A>
void KvScores(const float* q, int64_t ldq, int64_t m, int64_t d, const void* k,
              DType kd, const float* k_scales, int64_t n, float* s,
              int64_t lds) {
  const char* kp = static_cast<const char*>(k);
  switch (kd) {
    case DType::kBFloat16:
      return KvScoresOf<A, DType::kBFloat16>(q, ldq, m, d, kp, k_scales, n, s,
                                             lds);
    case DType::kFloat16:
      return KvScoresOf<A, DType::kFloat16>(q, ldq, m, d, kp, k_scales, n, s,
                                            lds);
    case DType::kInt8:
      return KvScoresOf<A, DType::kInt8>(q, ldq, m, d, kp, k_scales, n, s, lds);
    default:
      return KvScoresOf<A, DType::kFloat32>(q, ldq, m, d, kp, k_scales, n, s,
                                            lds);
  }
}

// acc[r][c0, c0 + C·kLanes) += Σ_t p[r][t] · scale_t · v_t for R rows (the
// last `count` < kLanes columns only when kTail, then C = 1). R and C are
// constants, so the R × C accumulators stay in registers.
template <class A, DType kD, int R, int C, bool kTail>
void KvAccumulateRows(const float* p, int64_t ldp, const char* v,
                      const float* v_scales, int64_t n, int64_t dv, int64_t c0,
                      int64_t count, float* acc, int64_t ldacc) {
  using V = typename A::V;
  const int64_t es = static_cast<int64_t>(DTypeSize(kD));
  V a[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      const float* at = acc + r * ldacc + c0 + j * A::kLanes;
      a[r][j] = kTail ? A::LoadPartial(at, count) : A::Load(at);
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    const char* row = v + t * dv * es;
    if (c0 == 0) PrefetchRow(row, dv * es, t, n);
    V vv[C];
    for (int j = 0; j < C; ++j) {
      vv[j] = kTail ? LoadKvPartial<A, kD>(row, c0, count)
                    : A::template LoadKv<kD>(row, c0 + j * A::kLanes);
    }
    const float scale = v_scales != nullptr ? v_scales[t] : 1.0f;
    for (int r = 0; r < R; ++r) {
      const V w = A::Set1(p[r * ldp + t] * scale);
      for (int j = 0; j < C; ++j) a[r][j] = A::Fma(w, vv[j], a[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) {
      float* at = acc + r * ldacc + c0 + j * A::kLanes;
      if (kTail) {
        A::StorePartial(at, a[r][j], count);
      } else {
        A::Store(at, a[r][j]);
      }
    }
  }
}

// R rows over every column: kChunks vectors at a time, then single vectors,
// then the partial last one.
template <class A, DType kD, int R>
void KvAccumulateColumns(const float* p, int64_t ldp, const char* v,
                         const float* v_scales, int64_t n, int64_t dv,
                         float* acc, int64_t ldacc) {
  constexpr int64_t kWide = A::kChunks * A::kLanes;
  int64_t c0 = 0;
  for (; c0 + kWide <= dv; c0 += kWide) {
    KvAccumulateRows<A, kD, R, A::kChunks, false>(p, ldp, v, v_scales, n, dv,
                                                  c0, 0, acc, ldacc);
  }
  for (; c0 + A::kLanes <= dv; c0 += A::kLanes) {
    KvAccumulateRows<A, kD, R, 1, false>(p, ldp, v, v_scales, n, dv, c0, 0, acc,
                                         ldacc);
  }
  if (c0 < dv) {
    KvAccumulateRows<A, kD, R, 1, true>(p, ldp, v, v_scales, n, dv, c0, dv - c0,
                                        acc, ldacc);
  }
}

template <class A, DType kD>
void KvAccumulateOf(const float* p, int64_t ldp, int64_t m, const char* v,
                    const float* v_scales, int64_t n, int64_t dv, float* acc,
                    int64_t ldacc) {
  ForRowGroups<4>(m, [&](auto rows, int64_t r0) {
    KvAccumulateColumns<A, kD, decltype(rows)::value>(
        p + r0 * ldp, ldp, v, v_scales, n, dv, acc + r0 * ldacc, ldacc);
  });
}

// acc[r·ldacc + c] += Σ_{t < n} p[r·ldp + t] · v_t[c] (times v_scales[t]
// when given) for r < m, c < dv.
template <class A>
void KvAccumulate(const float* p, int64_t ldp, int64_t m, const void* v,
                  DType vd, const float* v_scales, int64_t n, int64_t dv,
                  float* acc, int64_t ldacc) {
  const char* vp = static_cast<const char*>(v);
  switch (vd) {
    case DType::kBFloat16:
      return KvAccumulateOf<A, DType::kBFloat16>(p, ldp, m, vp, v_scales, n, dv,
                                                 acc, ldacc);
    case DType::kFloat16:
      return KvAccumulateOf<A, DType::kFloat16>(p, ldp, m, vp, v_scales, n, dv,
                                                acc, ldacc);
    case DType::kInt8:
      return KvAccumulateOf<A, DType::kInt8>(p, ldp, m, vp, v_scales, n, dv,
                                             acc, ldacc);
    default:
      return KvAccumulateOf<A, DType::kFloat32>(p, ldp, m, vp, v_scales, n, dv,
                                                acc, ldacc);
  }
}

}  // namespace
}  // namespace attnserve

#endif  // ATTNSERVE_CORE_KV_ROWS_INL_H_
