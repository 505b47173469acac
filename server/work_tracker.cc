#include "server/work_tracker.h"

namespace attnserve::server {

void WorkTracker::Begin() {
  if (metrics_ != nullptr) metrics_->AddInflight(1);
  absl::MutexLock lock(&mu_);
  ++active_;
}

void WorkTracker::Answered() {
  if (metrics_ != nullptr) metrics_->AddInflight(-1);
}

void WorkTracker::End() {
  absl::MutexLock lock(&mu_);
  --active_;
}

bool WorkTracker::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

}  // namespace attnserve::server
