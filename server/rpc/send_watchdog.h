#ifndef ATTNSERVE_SERVER_RPC_SEND_WATCHDOG_H_
#define ATTNSERVE_SERVER_RPC_SEND_WATCHDOG_H_

// Cancels calls whose answer the client does not take (--send_timeout): a
// response handed to gRPC stays in the server's memory, and in the memory
// budget, until the client has read it, so a client that stops reading (or
// vanishes without closing its connection) would hold it for ever. A call
// arms the watchdog when it hands a response to gRPC and disarms it when the
// write completes; past the timeout the watchdog cancels the call
// (TryCancel), which fails the write and ends the call, so its memory goes.
// One per server, with one thread. Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace attnserve::server {

class SendWatchdog {
 public:
  // One call's arming; owned by the call, it must outlive the call's
  // context's last use (disarm it in OnDone at the latest).
  class Guard {
   public:
    Guard() = default;
    ~Guard() { Disarm(); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

    // Stops the watchdog touching the call. Waits if it is cancelling the
    // call on another thread right now; callable from gRPC's reactions
    // (also inline from the watchdog's own TryCancel). Idempotent.
    void Disarm();

   private:
    friend class SendWatchdog;
    struct Entry;
    std::shared_ptr<Entry> entry_;
  };

  // `timeout` > 0; `on_timeout` (may be empty) is called for each call the
  // watchdog cancels (the metric), on the watchdog's thread, just before it
  // cancels it.
  SendWatchdog(absl::Duration timeout, std::function<void()> on_timeout);
  ~SendWatchdog();  // joins the thread; every guard must be disarmed first
  SendWatchdog(const SendWatchdog&) = delete;
  SendWatchdog& operator=(const SendWatchdog&) = delete;

  // Arms `guard` for `context`, from now until the timeout (re-arming a
  // guard disarms its previous arming first).
  void Arm(grpc::ServerContextBase* context, Guard* guard);

  absl::Duration timeout() const { return timeout_; }
  // Calls cancelled since start.
  int64_t cancelled() const;

 private:
  void Run();

  const absl::Duration timeout_;
  const std::function<void()> on_timeout_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  using Queue = std::multimap<absl::Time, std::shared_ptr<Guard::Entry>>;
  // Armed calls by deadline; a guard's Disarm takes its entry out.
  Queue armed_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The deadline the thread waits to; Arm wakes it only for an earlier one.
  absl::Time sleeping_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<int64_t> cancelled_{0};
  std::thread thread_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_SEND_WATCHDOG_H_
