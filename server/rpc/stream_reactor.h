#ifndef ATTNSERVE_SERVER_RPC_STREAM_REACTOR_H_
#define ATTNSERVE_SERVER_RPC_STREAM_REACTOR_H_

// The reactor of AttendStream and AttendModelStream (docs/api.md,
// "AttendStream"): reads messages one at a time, hands each to a
// StreamProcessor, and writes the responses in request order as they complete,
// whatever order that is. It knows nothing about attention: what a message
// means, what it costs and how it is counted is the processor's business, so
// the ordering, backpressure and lifetime rules can be tested with a fake one.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/rpc/status_util.h"

namespace attnserve::server {

// What the reactor knows about one message besides its contents.
struct StreamMessage {
  // When its read completed.
  absl::Time received;
  // Its serialized size.
  int64_t request_bytes = 0;
  // The stream call's deadline (absl::InfiniteFuture() when none).
  absl::Time deadline = absl::InfiniteFuture();
  // True once the stream is cancelled (client gone, deadline, shutdown); cheap
  // and thread-safe, meant to be polled before starting costly work.
  std::function<bool()> is_cancelled;
  // Where the processor may leave the message's memory-budget bytes: they
  // stay reserved until its response is written (or the stream ends).
  MemoryBudget::Reservation* held = nullptr;
};

// What a stream asks of the service for each message it reads. One processor
// serves many streams at once: every method is called concurrently.
template <typename Request, typename Response>
class StreamProcessor {
 public:
  virtual ~StreamProcessor() = default;

  // Starts processing `request` into `response`; the message counts as the
  // processor's work from now until Release. Called on a gRPC thread, so it
  // must not block or compute: heavy work goes elsewhere. `done` must be called
  // exactly once, inline or on any thread, with the message's final status
  // (`response` filled when OK; on error the reactor clears it). `request`,
  // `response` and `message` stay valid until Release.
  virtual void Submit(const Request& request, Response* response,
                      const StreamMessage& message,
                      absl::AnyInvocable<void(absl::Status)> done) = 0;

  // The message's response is final: `code` is its status, `response` what
  // will be written (request_id set, error fields on error). Called once per
  // message right after `done`, on the thread that called it.
  virtual void Answered(const Request& request, const Response& response,
                        const StreamMessage& message,
                        grpc::StatusCode code) = 0;

  // gRPC no longer needs the message: its response was written, or the stream
  // ended before it could be. Called once per message, after Answered.
  virtual void Release() = 0;
};

// One stream. Response must have the AttendResponse fields request_id,
// error_code and error_message; Request must have request_id.
//
// Per-message errors do not end the stream: a message whose `done` gets a
// non-OK status is answered with a response holding only request_id,
// error_code (the code's number) and error_message. The stream ends with OK
// once the client has half-closed and every response is written, and with
// CANCELLED "stream write failed" once a write fails (responses not yet
// written are dropped then). At most `max_inflight` messages are read and not
// yet written; reading pauses there until a write completes (backpressure).
// Given a watchdog, a write the client has not taken within its timeout
// cancels the stream (server/rpc/send_watchdog.h).
//
// Heap-allocate it and hand it to gRPC; it deletes itself once gRPC is done
// with it and no submitted message still refers to it.
template <typename Request, typename Response>
class OrderedStreamReactor : public grpc::ServerBidiReactor<Request, Response> {
 public:
  // `processor` and `watchdog` (may be null) must outlive the reactor. A
  // non-OK `admitted` (authentication, draining) finishes the stream at once
  // with that status, reading nothing.
  OrderedStreamReactor(grpc::CallbackServerContext* context,
                       StreamProcessor<Request, Response>* processor,
                       int max_inflight, const absl::Status& admitted,
                       SendWatchdog* watchdog = nullptr)
      : processor_(processor),
        max_inflight_(max_inflight),
        deadline_(CallDeadline(*context)),
        context_(context),
        watchdog_(watchdog) {
    if (!admitted.ok()) {
      {
        absl::MutexLock lock(&mu_);
        finished_ = true;
      }
      this->Finish(ToGrpcStatus(admitted));
      return;
    }
    StartNextRead();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Actions actions;
      {
        absl::MutexLock lock(&mu_);
        reads_done_ = true;
        MaybeFinishLocked(&actions);
      }
      Perform(actions);
      return;
    }
    Slot* slot = reading_.get();
    slot->message.received = absl::Now();
    slot->message.request_bytes =
        static_cast<int64_t>(slot->request.ByteSizeLong());
    slot->message.deadline = deadline_;
    slot->message.is_cancelled = [this] { return cancelled_.load(); };
    slot->message.held = &slot->held;
    bool read_more;
    {
      absl::MutexLock lock(&mu_);
      slots_.push_back(std::move(reading_));
      ++pending_;
      read_more = static_cast<int>(slots_.size()) < max_inflight_;
      read_paused_ = !read_more;
    }
    processor_->Submit(slot->request, &slot->response, slot->message,
                       [this, slot](absl::Status status) {
                         Complete(slot, std::move(status));
                       });
    // No reaction can delete the reactor while this one runs, so the read
    // chain may go on even if every message completed inline.
    if (read_more) StartNextRead();
  }

  void OnWriteDone(bool ok) override {
    write_guard_.Disarm();
    bool read_more = false;
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      slots_.pop_front();
      processor_->Release();
      if (!ok) {
        // The client went away; what is still queued is answered to nobody.
        broken_ = true;
      } else if (read_paused_ && !reads_done_) {
        read_paused_ = false;
        read_more = true;
      }
      MaybeWriteLocked(&actions);
      MaybeFinishLocked(&actions);
    }
    if (read_more) StartNextRead();
    Perform(actions);
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnDone() override {
    write_guard_.Disarm();
    bool destroy;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      destroy = pending_ == 0;
    }
    if (destroy) delete this;
  }

 private:
  struct Slot {
    Request request;
    Response response;
    StreamMessage message;
    // Released with the slot: once its response is written.
    MemoryBudget::Reservation held;
    bool ready = false;
  };

  // What to start once the lock is released: gRPC may run a reaction inline
  // from StartWrite or Finish, and reactions take the lock. The flags that
  // serialize the calls (writing_, finished_) are set under the lock when they
  // are decided.
  struct Actions {
    const Response* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  // Private: only OnDone and Complete delete the reactor.
  ~OrderedStreamReactor() override {
    // Messages never written (the client left) end here. No lock: nothing
    // else can touch the reactor any more.
    for (size_t i = 0; i < slots_.size(); ++i) processor_->Release();
  }

  void StartNextRead() {
    reading_ = std::make_unique<Slot>();
    this->StartRead(&reading_->request);
  }

  // Called once per message, on a worker or inline from Submit.
  void Complete(Slot* slot, absl::Status status) {
    if (!status.ok()) {
      slot->response.Clear();
      slot->response.set_error_code(static_cast<int32_t>(status.code()));
      slot->response.set_error_message(std::string(status.message()));
    }
    slot->response.set_request_id(slot->request.request_id());
    processor_->Answered(slot->request, slot->response, slot->message,
                         static_cast<grpc::StatusCode>(status.code()));
    bool destroy;
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      slot->ready = true;
      --pending_;
      MaybeWriteLocked(&actions);
      MaybeFinishLocked(&actions);
      // done_ implies Finish was called, so there are no actions then.
      destroy = done_ && pending_ == 0;
    }
    if (destroy) {
      delete this;
      return;
    }
    Perform(actions);  // last: after Finish, OnDone may delete this at any time
  }

  void Perform(const Actions& actions) {
    if (actions.write != nullptr) {
      if (watchdog_ != nullptr) watchdog_->Arm(context_, &write_guard_);
      this->StartWrite(actions.write);
    }
    if (actions.finish) this->Finish(*actions.finish);
  }

  void MaybeWriteLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || broken_ || slots_.empty() ||
        !slots_.front()->ready) {
      return;
    }
    writing_ = true;
    actions->write = &slots_.front()->response;
  }

  void MaybeFinishLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    if (broken_) {
      finished_ = true;
      actions->finish =
          grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed");
    } else if (reads_done_ && slots_.empty()) {
      finished_ = true;
      actions->finish = grpc::Status::OK;
    }
  }

  StreamProcessor<Request, Response>* const processor_;
  const int max_inflight_;
  const absl::Time deadline_;
  grpc::CallbackServerContext* const context_;
  SendWatchdog* const watchdog_;
  // Armed while a write is in flight (one at a time).
  SendWatchdog::Guard write_guard_;
  std::unique_ptr<Slot> reading_;  // touched only by the read chain
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  // Messages read and not yet written, in request order.
  std::deque<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  // Messages submitted whose `done` has not run yet.
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_STREAM_REACTOR_H_
