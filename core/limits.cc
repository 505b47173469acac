#include "core/limits.h"

#include "absl/strings/str_cat.h"

namespace attnserve {

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value, " is outside [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

}  // namespace attnserve
