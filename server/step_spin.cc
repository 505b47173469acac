#include "server/step_spin.h"

#include <algorithm>

namespace attnserve::server {

absl::Duration StepSpin::Window() const {
  if (!seen_) return longest_;
  if (recent_ > longest_) return std::min(longest_, kShort);
  return std::clamp(2 * recent_, std::min(longest_, kFloor), longest_);
}

void StepSpin::Observe(absl::Duration pause) {
  pause = std::clamp(pause, absl::ZeroDuration(), 4 * longest_);
  recent_ = seen_ ? (3 * recent_ + pause) / 4 : pause;
  seen_ = true;
}

}  // namespace attnserve::server
