#ifndef ATTNSERVE_SERVER_TRACKED_UNARY_REACTOR_H_
#define ATTNSERVE_SERVER_TRACKED_UNARY_REACTOR_H_

// The unary reactor of every service: it counts the call as work until gRPC is
// done with it (not merely until Finish: shutdown cancels whatever is open
// once the services are idle, and a response still being sent must not be
// cut off), keeps its memory-budget bytes, arms the send watchdog and hands a
// cancellation on. Heap-allocated per call; deletes itself.

#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/work_tracker.h"

namespace attnserve::server {

// Counts as `work` and keeps the call's memory-budget bytes until gRPC is
// done with the call; given a watchdog, cancels the call when the client has
// not taken the answer within the watchdog's timeout.
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

// The envelope of an answer to a request that carries an id: a failed call's
// response is cleared, and every answer echoes the request's id.
template <typename Request, typename Response>
void StampAnswer(const absl::Status& status, const Request& request,
                 Response* response) {
  if (!status.ok()) response->Clear();
  response->set_request_id(request.request_id());
}

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_TRACKED_UNARY_REACTOR_H_
