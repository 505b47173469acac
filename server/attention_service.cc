#include "server/attention_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/request_kind.h"
#include "server/status_util.h"

namespace attnserve::server {
namespace {

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

void SetTiming(absl::Time received, absl::Time start, absl::Time end,
               v1::AttendResponse* response) {
  v1::Timing* timing = response->mutable_timing();
  timing->set_queue_us(Micros(start - received));
  timing->set_compute_us(Micros(end - start));
  timing->set_total_us(Micros(end - received));
}

}  // namespace

AttentionService::AttentionService(ServiceOptions options, Scheduler* scheduler,
                                   Metrics* metrics,
                                   const AttentionEngine* validator)
    : options_(std::move(options)),
      auth_(options_.auth_token),
      scheduler_(scheduler),
      metrics_(metrics),
      validator_(validator),
      work_(metrics) {}

absl::Status AttentionService::Admit(
    const grpc::CallbackServerContext& context) const {
  if (draining_.load())
    return absl::UnavailableError("server is shutting down");
  return auth_.Check(context.client_metadata());
}

template <typename Kind>
void AttentionService::Process(const typename Kind::Request& request,
                               v1::AttendResponse* response,
                               absl::Time received,
                               std::function<bool()> is_cancelled,
                               absl::Time deadline,
                               absl::AnyInvocable<void(absl::Status)> done) {
  const DecodeContext decode_context{validator_, &options_.limits,
                                     options_.models};
  absl::StatusOr<typename Kind::Decoded> decoded =
      Kind::Decode(request, decode_context);
  if (!decoded.ok()) {
    done(decoded.status());
    return;
  }
  // run and reject share the completion; the scheduler calls exactly one of
  // them.
  auto finish =
      std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
  Task task;
  task.deadline = deadline;
  task.is_cancelled = std::move(is_cancelled);
  task.run = [this, d = *std::move(decoded), response, received, finish](
                 AttentionEngine& engine, absl::Duration queued) {
    const absl::Time start = absl::Now();
    const absl::Status status = Kind::Compute(d, engine, response);
    const absl::Time end = absl::Now();
    if (status.ok()) {
      Kind::RecordCompute(d, absl::ToDoubleSeconds(end - start), *metrics_);
      SetTiming(received, start, end, response);
    }
    (*finish)(status);
  };
  task.reject = [finish](absl::Status status) { (*finish)(std::move(status)); };
  const absl::Status submitted = scheduler_->Submit(std::move(task));
  if (!submitted.ok()) (*finish)(submitted);
}

template <typename Kind>
void AttentionService::RecordAnswer(const typename Kind::Request& request,
                                    Method method, grpc::StatusCode code,
                                    double seconds, int64_t request_bytes,
                                    int64_t response_bytes) {
  metrics_->RecordRequest(method, code, seconds, request_bytes, response_bytes);
  const HostedModel* model = Kind::ModelOf(request, options_.models);
  if (model != nullptr) {
    metrics_->RecordModelRequest(model->index, code, seconds);
  }
}

// A unary call counts as work until gRPC is done with it, not merely until
// Finish: shutdown cancels whatever is open once the service is idle, and a
// response still being sent must not be cut off.
class AttentionService::UnaryReactor : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryReactor(WorkTracker* work) : work_(work) { work_->Begin(); }
  void OnDone() override {
    work_->End();
    delete this;
  }

 private:
  WorkTracker* const work_;
};

template <typename Kind>
grpc::ServerUnaryReactor* AttentionService::HandleUnary(
    grpc::CallbackServerContext* context, const typename Kind::Request* request,
    v1::AttendResponse* response) {
  grpc::ServerUnaryReactor* reactor = new UnaryReactor(&work_);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  auto finish = [this, reactor, request, response, received,
                 request_bytes](absl::Status status) {
    if (!status.ok()) response->Clear();
    response->set_request_id(request->request_id());
    const grpc::Status grpc_status = ToGrpcStatus(status);
    const int64_t response_bytes =
        static_cast<int64_t>(response->ByteSizeLong());
    RecordAnswer<Kind>(*request, Kind::kUnaryMethod, grpc_status.error_code(),
                       absl::ToDoubleSeconds(absl::Now() - received),
                       request_bytes, response_bytes);
    work_.Answered();
    ATTNSERVE_LOG(LogLevel::kDebug, Kind::kName, " id=", request->request_id(),
                  " code=", grpc_status.error_code(),
                  " bytes_in=", request_bytes, " bytes_out=", response_bytes,
                  " ", status.message());
    reactor->Finish(grpc_status);
  };
  const absl::Status admitted = Admit(*context);
  if (!admitted.ok()) {
    finish(admitted);
    return reactor;
  }
  Process<Kind>(
      *request, response, received,
      [context] { return context->IsCancelled(); }, CallDeadline(*context),
      std::move(finish));
  return reactor;
}

grpc::ServerUnaryReactor* AttentionService::Attend(
    grpc::CallbackServerContext* context, const v1::AttendRequest* request,
    v1::AttendResponse* response) {
  return HandleUnary<AttendKind>(context, request, response);
}

grpc::ServerUnaryReactor* AttentionService::AttendModel(
    grpc::CallbackServerContext* context, const v1::ModelRequest* request,
    v1::AttendResponse* response) {
  return HandleUnary<ModelKind>(context, request, response);
}

// One AttendStream or AttendModelStream: reads messages one at a time, queues
// each, and writes the responses in request order as they complete. Deletes
// itself once gRPC is done with it and no queued message still refers to it.
template <typename Kind>
class AttentionService::StreamReactor
    : public grpc::ServerBidiReactor<typename Kind::Request,
                                     v1::AttendResponse> {
 public:
  using Request = typename Kind::Request;

  StreamReactor(AttentionService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    const absl::Status admitted = service->Admit(*context);
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
    slot->received = absl::Now();
    slot->request_bytes = static_cast<int64_t>(slot->request.ByteSizeLong());
    bool read_more;
    {
      absl::MutexLock lock(&mu_);
      slots_.push_back(std::move(reading_));
      ++pending_;
      read_more = static_cast<int>(slots_.size()) <
                  service_->options_.max_stream_inflight;
      read_paused_ = !read_more;
    }
    service_->work_.Begin();
    if (service_->draining_.load()) {
      Complete(slot, absl::UnavailableError("server is shutting down"));
    } else {
      service_->Process<Kind>(
          slot->request, &slot->response, slot->received,
          [this] { return cancelled_.load(); }, CallDeadline(*context_),
          [this, slot](absl::Status status) {
            Complete(slot, std::move(status));
          });
    }
    if (read_more) StartNextRead();
  }

  void OnWriteDone(bool ok) override {
    bool read_more = false;
    Actions actions;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      slots_.pop_front();
      service_->work_.End();
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

  ~StreamReactor() override {
    // Messages never written (the client left) end here.
    for (size_t i = 0; i < slots_.size(); ++i) service_->work_.End();
  }

  void OnDone() override {
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
    v1::AttendResponse response;
    absl::Time received;
    int64_t request_bytes = 0;
    bool ready = false;
  };

  void StartNextRead() {
    reading_ = std::make_unique<Slot>();
    this->StartRead(&reading_->request);
  }

  // Called once per message, on a worker or inline.
  void Complete(Slot* slot, absl::Status status) {
    if (!status.ok()) {
      slot->response.Clear();
      slot->response.set_error_code(static_cast<int32_t>(status.code()));
      slot->response.set_error_message(std::string(status.message()));
    }
    slot->response.set_request_id(slot->request.request_id());
    service_->RecordAnswer<Kind>(
        slot->request, Kind::kStreamMethod,
        static_cast<grpc::StatusCode>(status.code()),
        absl::ToDoubleSeconds(absl::Now() - slot->received),
        slot->request_bytes,
        static_cast<int64_t>(slot->response.ByteSizeLong()));
    service_->work_.Answered();
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

  // What to start once the lock is released: gRPC may run a reaction inline
  // from StartWrite or Finish, and reactions take the lock. The flags that
  // serialize the calls (writing_, finished_) are set under the lock when they
  // are decided.
  struct Actions {
    const v1::AttendResponse* write = nullptr;
    std::optional<grpc::Status> finish;
  };

  void Perform(const Actions& actions) {
    if (actions.write != nullptr) this->StartWrite(actions.write);
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

  AttentionService* const service_;
  grpc::CallbackServerContext* const context_;
  std::unique_ptr<Slot> reading_;  // touched only by the read chain
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerBidiReactor<v1::AttendRequest, v1::AttendResponse>*
AttentionService::AttendStream(grpc::CallbackServerContext* context) {
  return new StreamReactor<AttendKind>(this, context);
}

grpc::ServerBidiReactor<v1::ModelRequest, v1::AttendResponse>*
AttentionService::AttendModelStream(grpc::CallbackServerContext* context) {
  return new StreamReactor<ModelKind>(this, context);
}

grpc::ServerUnaryReactor* AttentionService::GetServerInfo(
    grpc::CallbackServerContext* context,
    const v1::GetServerInfoRequest* request, v1::ServerInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time received = absl::Now();
  absl::Status status = Admit(*context);
  if (status.ok()) *response = options_.info;
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(Method::kGetServerInfo, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          static_cast<int64_t>(request->ByteSizeLong()),
                          static_cast<int64_t>(response->ByteSizeLong()));
  reactor->Finish(grpc_status);
  return reactor;
}

}  // namespace attnserve::server
