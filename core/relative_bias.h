#ifndef ATTNSERVE_CORE_RELATIVE_BIAS_H_
#define ATTNSERVE_CORE_RELATIVE_BIAS_H_

// T5's relative position bias, a part of an attention call's mask
// (MaskSpec::relative_bias) and of a paged decode (PagedAttentionInputs).

#include <cstdint>

#include "absl/types/span.h"

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

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_RELATIVE_BIAS_H_
