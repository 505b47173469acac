#ifndef ATTNSERVE_TESTS_KVCACHE_KV_TEST_UTIL_H_
#define ATTNSERVE_TESTS_KVCACHE_KV_TEST_UTIL_H_

// Keys and values for the session tests: rows whose values say where they
// came from, so a read-back names the token, head and element.

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/convert.h"
#include "core/paged.h"
#include "core/tensor.h"
#include "kvcache/session_cache.h"

namespace attnserve::kvcache::testing {

// Element (t, h, e) of a tensor [n, hkv, dim] for tokens from `t0`. Element 0
// of a row is the token itself (exact in f32 for any length, in bf16 and f16
// up to 127 tokens); the others are small values exact in every dtype.
inline float RowValue(int64_t t, int64_t h, int64_t e, float sign) {
  if (e == 0) return sign * (static_cast<float>(t) + 0.5f * h);
  return sign * (0.25f * static_cast<float>(t % 16) + h + 0.0625f * (e % 8));
}

struct Rows {
  std::vector<float> data;
  TensorView view;
};

inline Rows MakeRows(int64_t t0, int64_t n, int64_t hkv, int64_t dim,
                     float sign = 1.0f) {
  Rows r;
  r.data.resize(static_cast<size_t>(n * hkv * dim));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t e = 0; e < dim; ++e)
        r.data[static_cast<size_t>((t * hkv + h) * dim + e)] =
            RowValue(t0 + t, h, e, sign);
  r.view = MakeTensorView(r.data.data(), DType::kFloat32, {n, hkv, dim});
  return r;
}

// Reads key (or value) element (t, h, e) of a pinned layer back as a float
// (an int8 element times its row's scale).
inline float ReadPinned(const PinnedLayer& layer, const SessionShape& s,
                        int block_tokens, bool value, int64_t t, int64_t h,
                        int64_t e) {
  const PagedBlockLayout layout(s.num_kv_heads, s.head_dim, s.value_dim,
                                block_tokens, s.dtype);
  int64_t block = t / block_tokens;
  if (block >= layer.kept_blocks) block -= layer.evicted_blocks;
  const char* base =
      static_cast<const char*>(layer.data[static_cast<size_t>(block)]);
  const int64_t row = t % block_tokens;
  const char* at = base + (value ? layout.value(h, row) : layout.key(h, row));
  const float element = LoadAsFloat(at, s.dtype, e);
  if (s.dtype != DType::kInt8) return element;
  float scale;
  std::memcpy(
      &scale,
      base + (value ? layout.value_scale(h, row) : layout.key_scale(h, row)),
      sizeof scale);
  return element * scale;
}

}  // namespace attnserve::kvcache::testing

#endif  // ATTNSERVE_TESTS_KVCACHE_KV_TEST_UTIL_H_
