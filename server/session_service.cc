#include "server/session_service.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/log.h"
#include "server/rpc/status_util.h"
#include "server/session_codec.h"
#include "server/tracked_unary_reactor.h"

namespace attnserve::server {
namespace {

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

SessionService::SessionService(const RequestLimits& limits,
                               const Admission* admission,
                               kvcache::SessionStore* store,
                               Scheduler* scheduler, Metrics* metrics,
                               MemoryBudget* budget, SendWatchdog* watchdog)
    : limits_(limits),
      store_(store),
      scheduler_(scheduler),
      metrics_(metrics),
      admission_(admission),
      budget_(budget),
      watchdog_(watchdog),
      work_(metrics) {}

absl::StatusOr<MemoryBudget::Reservation> SessionService::Reserve(
    int64_t bytes) {
  if (budget_ == nullptr) return MemoryBudget::Reservation();
  absl::StatusOr<MemoryBudget::Reservation> reserved = budget_->Reserve(bytes);
  if (!reserved.ok()) metrics_->RecordRejection(Rejection::kMemoryBudget);
  return reserved;
}

template <typename Request, typename Op>
grpc::ServerUnaryReactor* SessionService::Inline(
    grpc::CallbackServerContext* context, Method method, const Request& request,
    v1::SessionInfo* response, Op op) {
  auto* reactor = new TrackedUnaryReactor(&work_, context, watchdog_);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request.ByteSizeLong());
  absl::Status status = admission_->Admit(*context);
  // The request (AppendKv's keys and values) is held until the answer is
  // sent.
  if (status.ok()) {
    absl::StatusOr<MemoryBudget::Reservation> reserved = Reserve(request_bytes);
    if (reserved.ok()) {
      *reactor->held() = *std::move(reserved);
    } else {
      status = reserved.status();
    }
  }
  if (status.ok()) status = op();
  if (!status.ok()) response->Clear();
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(method, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          request_bytes,
                          static_cast<int64_t>(response->ByteSizeLong()));
  work_.Answered();
  reactor->FinishWatched(grpc_status);
  return reactor;
}

grpc::ServerUnaryReactor* SessionService::CreateSession(
    grpc::CallbackServerContext* context,
    const v1::CreateSessionRequest* request, v1::SessionInfo* response) {
  return Inline(context, Method::kCreateSession, *request, response, [&] {
    return ApplyCreateSession(*request, *store_, response);
  });
}

grpc::ServerUnaryReactor* SessionService::AppendKv(
    grpc::CallbackServerContext* context, const v1::AppendKvRequest* request,
    v1::SessionInfo* response) {
  return Inline(context, Method::kAppendKv, *request, response,
                [&] { return ApplyAppendKv(*request, *store_, response); });
}

// AppendKvStream: chunks applied one at a time, in order; the first error
// ends the call. Each chunk counts against the memory budget while it is
// applied (its bytes are held until the next read reuses the message).
class SessionService::AppendStream
    : public grpc::ServerReadReactor<v1::AppendKvRequest> {
 public:
  AppendStream(SessionService* service, grpc::CallbackServerContext* context,
               v1::SessionInfo* response)
      : service_(service), response_(response), received_(absl::Now()) {
    service_->work_.Begin();
    const absl::Status admitted = service_->admission_->Admit(*context);
    if (!admitted.ok()) {
      End(admitted);
      return;
    }
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending (or the call was cancelled)
      End(chunks_ == 0 ? absl::InvalidArgumentError(
                             "no chunks: the stream ended before any message")
                       : absl::OkStatus());
      return;
    }
    const int64_t chunk_bytes = static_cast<int64_t>(chunk_.ByteSizeLong());
    bytes_ += chunk_bytes;
    absl::StatusOr<MemoryBudget::Reservation> reserved =
        service_->Reserve(chunk_bytes);
    absl::Status status = reserved.status();
    if (status.ok() && chunks_ > 0 && chunk_.session_id() != session_id_) {
      status = absl::InvalidArgumentError(
          absl::StrCat("session_id: \"", chunk_.session_id(),
                       "\" differs from the stream's \"", session_id_,
                       "\" (one session per stream)"));
    } else if (status.ok()) {
      session_id_ = chunk_.session_id();
      status = ApplyAppendKv(chunk_, *service_->store_, response_);
    }
    if (reserved.ok()) reserved->Release();
    if (!status.ok()) {
      End(absl::Status(status.code(), absl::StrCat("chunk ", chunks_, ": ",
                                                   status.message())));
      return;
    }
    ++chunks_;
    StartRead(&chunk_);
  }

  void OnDone() override {
    service_->work_.End();
    delete this;
  }

 private:
  void End(const absl::Status& status) {
    if (!status.ok()) response_->Clear();
    const grpc::Status grpc_status = ToGrpcStatus(status);
    service_->metrics_->RecordRequest(
        Method::kAppendKvStream, grpc_status.error_code(),
        absl::ToDoubleSeconds(absl::Now() - received_), bytes_,
        static_cast<int64_t>(response_->ByteSizeLong()));
    service_->work_.Answered();
    Finish(grpc_status);
  }

  SessionService* const service_;
  v1::SessionInfo* const response_;
  const absl::Time received_;
  v1::AppendKvRequest chunk_;
  std::string session_id_;
  int64_t chunks_ = 0;
  int64_t bytes_ = 0;
};

grpc::ServerReadReactor<v1::AppendKvRequest>* SessionService::AppendKvStream(
    grpc::CallbackServerContext* context, v1::SessionInfo* response) {
  return new AppendStream(this, context, response);
}

grpc::ServerUnaryReactor* SessionService::AttendSessions(
    grpc::CallbackServerContext* context,
    const v1::AttendSessionsRequest* request,
    v1::AttendSessionsResponse* response) {
  auto* reactor = new TrackedUnaryReactor(&work_, context, watchdog_);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  auto finish = std::make_shared<absl::AnyInvocable<void(absl::Status)>>(
      [this, reactor, request, response, received,
       request_bytes](absl::Status status) {
        if (!status.ok()) response->Clear();
        response->set_request_id(request->request_id());
        const grpc::Status grpc_status = ToGrpcStatus(status);
        metrics_->RecordRequest(
            Method::kAttendSessions, grpc_status.error_code(),
            absl::ToDoubleSeconds(absl::Now() - received), request_bytes,
            static_cast<int64_t>(response->ByteSizeLong()));
        work_.Answered();
        ATTNSERVE_LOG(
            LogLevel::kDebug, "AttendSessions id=", request->request_id(),
            " code=", grpc_status.error_code(),
            " sessions=", request->sessions_size(), " ", status.message());
        reactor->FinishWatched(grpc_status);
      });
  // Everything up to the pin happens here, in arrival order.
  auto prepare = [&]() -> absl::StatusOr<std::shared_ptr<SessionsCall>> {
    RETURN_IF_ERROR(admission_->Admit(*context));
    return PrepareAttendSessions(
        *request, *store_, limits_, response,
        [&](const SessionsAdmission& admitted) -> absl::Status {
          // Before anything is appended, so a refusal leaves no trace.
          ASSIGN_OR_RETURN(*reactor->held(),
                           Reserve(request_bytes + admitted.response_bytes));
          return absl::OkStatus();
        });
  };
  absl::StatusOr<std::shared_ptr<SessionsCall>> call = prepare();
  if (!call.ok()) {
    (*finish)(call.status());
    return reactor;
  }
  Task task;
  task.deadline = CallDeadline(*context);
  task.is_cancelled = [context] { return context->IsCancelled(); };
  task.run = [this, call = *std::move(call), response, received, finish](
                 AttentionEngine& engine, absl::Duration) {
    const absl::Time start = absl::Now();
    const absl::Status status = engine.RunPaged(call->inputs);
    const absl::Time end = absl::Now();
    if (status.ok()) {
      metrics_->RecordCompute(KernelPath::kDecode,
                              absl::ToDoubleSeconds(end - start), call->flops);
      v1::Timing* timing = response->mutable_timing();
      timing->set_queue_us(Micros(start - received));
      timing->set_compute_us(Micros(end - start));
      timing->set_total_us(Micros(end - received));
      timing->set_flops(call->flops);
    }
    (*finish)(status);
  };
  task.reject = [finish](absl::Status status) { (*finish)(std::move(status)); };
  const absl::Status submitted = scheduler_->Submit(std::move(task));
  if (!submitted.ok()) (*finish)(submitted);
  return reactor;
}

grpc::ServerUnaryReactor* SessionService::ForkSession(
    grpc::CallbackServerContext* context, const v1::ForkSessionRequest* request,
    v1::SessionInfo* response) {
  return Inline(context, Method::kForkSession, *request, response,
                [&] { return ApplyForkSession(*request, *store_, response); });
}

grpc::ServerUnaryReactor* SessionService::TruncateSession(
    grpc::CallbackServerContext* context,
    const v1::TruncateSessionRequest* request, v1::SessionInfo* response) {
  return Inline(context, Method::kTruncateSession, *request, response, [&] {
    return ApplyTruncateSession(*request, *store_, response);
  });
}

grpc::ServerUnaryReactor* SessionService::CloseSession(
    grpc::CallbackServerContext* context,
    const v1::CloseSessionRequest* request, v1::SessionInfo* response) {
  return Inline(context, Method::kCloseSession, *request, response,
                [&] { return ApplyCloseSession(*request, *store_, response); });
}

grpc::ServerUnaryReactor* SessionService::GetSession(
    grpc::CallbackServerContext* context, const v1::GetSessionRequest* request,
    v1::SessionInfo* response) {
  return Inline(context, Method::kGetSession, *request, response,
                [&] { return ApplyGetSession(*request, *store_, response); });
}

}  // namespace attnserve::server
