#ifndef ATTNSERVE_CORE_LIMITS_H_
#define ATTNSERVE_CORE_LIMITS_H_

// The limits of the attention kernels that other parts check against before
// they reach the kernels (sessions' shapes, hosted layers' configs), in one
// place, and the one range check their messages share.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace attnserve {

// The largest head dimensions: of queries and keys (D) and of values (Dv).
// 576 and 512 are DeepSeek-V2/V3's MLA decode with absorbed weights: one
// latent kv head whose keys are the 512 latent dimensions and 64 rotary ones,
// and whose values are the 512 latent dimensions.
inline constexpr int kMaxHeadDim = 576;
inline constexpr int kMaxValueDim = 512;

// OK when lo <= value <= hi; else InvalidArgument
// "<field>: <value> is outside [<lo>, <hi>]".
absl::Status CheckRange(absl::string_view field, int64_t value, int64_t lo,
                        int64_t hi);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_LIMITS_H_
