#include "server/rpc/send_watchdog.h"

#include <utility>
#include <vector>

namespace attnserve::server {

// Shared by the guard and the watchdog's queue. The recursive mutex lets
// TryCancel, which may run the call's reactions (and so Disarm) inline on
// the watchdog's thread, re-enter; a Disarm on any other thread waits until
// the cancel is over, so the context is never used once disarmed.
struct SendWatchdog::Guard::Entry {
  std::recursive_mutex mu;
  grpc::ServerContextBase* context = nullptr;  // null once disarmed
  SendWatchdog* watchdog = nullptr;
  // Its place in watchdog->armed_ while queued (guarded by watchdog->mu_).
  bool queued = false;
  Queue::iterator at;
};

void SendWatchdog::Guard::Disarm() {
  if (entry_ == nullptr) return;
  {
    std::lock_guard<std::recursive_mutex> lock(entry_->mu);
    entry_->context = nullptr;
  }
  SendWatchdog* watchdog = entry_->watchdog;
  {
    absl::MutexLock lock(&watchdog->mu_);
    if (entry_->queued) {
      entry_->queued = false;
      watchdog->armed_.erase(entry_->at);
    }
  }
  entry_.reset();
}

SendWatchdog::SendWatchdog(absl::Duration timeout,
                           std::function<void()> on_timeout)
    : timeout_(timeout), on_timeout_(std::move(on_timeout)) {
  thread_ = std::thread([this] { Run(); });
}

SendWatchdog::~SendWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    wake_.Signal();
  }
  thread_.join();
}

void SendWatchdog::Arm(grpc::ServerContextBase* context, Guard* guard) {
  guard->Disarm();
  auto entry = std::make_shared<Guard::Entry>();
  entry->context = context;
  entry->watchdog = this;
  guard->entry_ = entry;
  const absl::Time deadline = absl::Now() + timeout_;
  absl::MutexLock lock(&mu_);
  entry->at = armed_.emplace(deadline, entry);
  entry->queued = true;
  // Every deadline is now + the one timeout, so it is later than the one the
  // thread sleeps to (at most a timeout ahead): no wake-up (a syscall and a
  // context switch on every call) unless the clock stepped back.
  if (deadline < sleeping_until_) wake_.Signal();
}

int64_t SendWatchdog::cancelled() const {
  return cancelled_.load(std::memory_order_relaxed);
}

void SendWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    if (armed_.empty() || armed_.begin()->first > now) {
      // Idle, it looks again after one timeout: what is armed meanwhile is
      // due no earlier.
      sleeping_until_ = armed_.empty() ? now + timeout_ : armed_.begin()->first;
      wake_.WaitWithDeadline(&mu_, sleeping_until_);
      continue;
    }
    std::vector<std::shared_ptr<Guard::Entry>> due;
    while (!armed_.empty() && armed_.begin()->first <= now) {
      armed_.begin()->second->queued = false;
      due.push_back(std::move(armed_.begin()->second));
      armed_.erase(armed_.begin());
    }
    mu_.Unlock();
    for (const std::shared_ptr<Guard::Entry>& entry : due) {
      std::lock_guard<std::recursive_mutex> entry_lock(entry->mu);
      if (entry->context == nullptr) continue;
      // Counted first: whatever the cancel sets off sees it counted.
      cancelled_.fetch_add(1, std::memory_order_relaxed);
      if (on_timeout_) on_timeout_();
      entry->context->TryCancel();
      entry->context = nullptr;
    }
    mu_.Lock();
  }
}

}  // namespace attnserve::server
