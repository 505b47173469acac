#ifndef ATTNSERVE_SERVER_WORK_TRACKER_H_
#define ATTNSERVE_SERVER_WORK_TRACKER_H_

// Idle accounting for graceful shutdown, and the in-flight gauge. A unit of
// work is a unary call or one stream message. It counts as in flight (the
// gauge) from Begin until Answered, and as work (WaitUntilIdle) from Begin
// until End: a response still being sent must not be cut off by shutdown.

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics.h"

namespace attnserve::server {

class WorkTracker {
 public:
  // `metrics` (may be null) gets attnserve_inflight_requests; it must outlive
  // the tracker.
  explicit WorkTracker(Metrics* metrics) : metrics_(metrics) {}

  // Thread-safe. Every Begin is followed by one Answered and one End, in that
  // order.
  void Begin();
  void Answered();
  void End();

  // Waits until every Begin has had its End, or until `deadline`. True when
  // idle.
  bool WaitUntilIdle(absl::Time deadline);

 private:
  Metrics* const metrics_;
  absl::Mutex mu_;
  int64_t active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_WORK_TRACKER_H_
