#ifndef ATTNSERVE_CORE_RELATIVE_BIAS_H_
#define ATTNSERVE_CORE_RELATIVE_BIAS_H_

// The relative-position parts of an attention call's mask and of a paged
// decode (PagedAttentionInputs): T5's bias (MaskSpec::relative_bias) and
// relative position keys (MaskSpec::relative_keys).

#include <cstdint>

#include "absl/types/span.h"
#include "core/tensor.h"

namespace attnserve {

// T5's bucketed relative position bias: adds table[h · num_buckets + b] to
// the scaled scores (T5 itself uses scale = 1), where b is the bucket of the
// relative position n = j − d(i) of key j to query row i:
//   bidirectional: m = num_buckets / 2 (integer division), b = m when n > 0
//     (else 0) plus the bucket of |n| among m;
//   unidirectional: m = num_buckets, the bucket of max(−n, 0) among m;
//   the bucket of a ≥ 0 among m, with e = m / 2: a when a < e, else
//     min(m − 1, e + trunc(log(a / e) / log(max_distance / e) · (m − e))),
//     computed in f32 as T5's PyTorch code computes it (log(max_distance /
//     e) in double, then rounded).
// The largest max_distance (T5 and its descendants use 128): a call builds the
// buckets of the distances up to it.
inline constexpr int32_t kMaxRelativeDistance = 4096;

struct RelativeBiasSpec {
  absl::Span<const float> table;  // [Hq, num_buckets], finite
  int32_t num_buckets = 0;        // [2, 1024]; [4, 1024] bidirectional
  int32_t max_distance = 0;       // (e, kMaxRelativeDistance]
  bool bidirectional = false;
};

// The bucket RelativeBiasSpec gives relative position n (the spec checked).
int32_t RelativeBucket(const RelativeBiasSpec& spec, int64_t n);

// Relative position keys, a float part of a mask: adds
//   scale · (q_i + query_bias[h]) · table[h][t],
//   t = clamp(d(i) − j + zero_row, 0, rows − 1),
// to the scaled score of query row i of head h and key j (after soft-capping,
// as every float part). Transformer-XL (Dai et al., 2019): table[h][t] is
// W_R·R of relative distance t (zero_row 0, rows covering the distances the
// mask allows), query_bias is v − u with the query sent as q + u (its
// content bias u). Shaw et al. (2018) with distances clipped to ±K: one
// table of 2K + 1 rows shared by every head, zero_row K, no query bias.
struct RelativeKeysSpec {
  // kFloat32 [Ht, rows, D], dense; Ht is 1 (every head shares it) or Hq;
  // rows >= 1; D the call's head dim. Read in place, as the keys are: a NaN
  // in it reaches the scores that read it.
  TensorView table;
  int64_t zero_row = 0;  // [0, rows)
  // Empty, or [Hq, D], finite.
  absl::Span<const float> query_bias;
};

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_RELATIVE_BIAS_H_
