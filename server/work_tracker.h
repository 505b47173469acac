#ifndef ATTNSERVE_SERVER_WORK_TRACKER_H_
#define ATTNSERVE_SERVER_WORK_TRACKER_H_

// Idle accounting for graceful shutdown, and the in-flight gauge. A unit of
// work is a unary call or one stream message. It counts as in flight (the
// gauge) from Begin until Answered, and as work (WaitUntilIdle) from Begin
// until End: a response still being sent must not be cut off by shutdown.

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_callback.h"
#include "server/metrics.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"

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

// A unary call's reactor that counts the call as work until gRPC is done with
// it, not merely until Finish: shutdown cancels whatever is open once the
// services are idle, and a response still being sent must not be cut off.
// Heap-allocated per call; deletes itself.
// A unary call's reactor that counts as `work` until gRPC is done with the
// call, keeps the call's memory-budget bytes until then (its answer is
// sent, or the call ended), and, given a watchdog, cancels the call when the
// client has not taken the answer within the watchdog's timeout.
class TrackedUnaryReactor : public grpc::ServerUnaryReactor {
 public:
  // `context` and `watchdog` may be null (no watch); all must outlive the
  // call.
  explicit TrackedUnaryReactor(WorkTracker* work,
                               grpc::CallbackServerContext* context = nullptr,
                               SendWatchdog* watchdog = nullptr)
      : work_(work), context_(context), watchdog_(watchdog) {
    work_->Begin();
  }

  // Where the call's reservation waits for the answer to be sent; set
  // before FinishWatched.
  MemoryBudget::Reservation* held() { return &held_; }

  // Finish, with the watchdog armed first.
  void FinishWatched(const grpc::Status& status) {
    if (watchdog_ != nullptr && context_ != nullptr) {
      watchdog_->Arm(context_, &guard_);
    }
    Finish(status);
  }

  // Called from OnCancel, which gRPC calls (if the call is cancelled) only
  // after the handler has returned: set it in the handler.
  void OnCancelled(absl::AnyInvocable<void()> fn) {
    on_cancel_ = std::move(fn);
  }
  void OnCancel() override {
    if (on_cancel_) on_cancel_();
  }

  void OnDone() override {
    guard_.Disarm();
    held_.Release();
    work_->End();
    delete this;
  }

  // gRPC runs the reactions of a reactor that says so on the thread where
  // the call completes, as it does for its own default reactor; otherwise it
  // hands each OnDone to its executor thread: a futex wake and a thread hop
  // per call, and the request and response freed on another thread than the
  // one that allocated them. Ours are short and never block (a disarm, a
  // release and a count, each under a brief lock; OnCancel at most takes a
  // queued task out of the scheduler's queue and answers it), and a
  // Disarm re-entered from the watchdog's own TryCancel is allowed for
  // (send_watchdog.h). gRPC marks this hook internal; gRPC 1.51 is pinned
  // (Debian 12), and docs/benchmarks.md ("Small requests") has what it saves.
  bool InternalInlineable() override { return true; }

 private:
  WorkTracker* const work_;
  grpc::CallbackServerContext* const context_;
  SendWatchdog* const watchdog_;
  MemoryBudget::Reservation held_;
  SendWatchdog::Guard guard_;
  absl::AnyInvocable<void()> on_cancel_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_WORK_TRACKER_H_
