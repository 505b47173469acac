#include "server/session_service.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/log.h"
#include "server/rpc/status_util.h"
#include "server/rpc/stream_reactor.h"
#include "server/session_codec.h"
#include "server/session_piece_stream.h"
#include "server/step_channel.h"
#include "server/tracked_unary_reactor.h"

namespace attnserve::server {
namespace {

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

// The StreamProcessor (server/rpc/stream_reactor.h) of AttendSessionsStream
// and of StepChannel: each message is a Step, counted under `method`.
// Stateless beyond the service, so one serves every stream of its method.
class SessionService::Steps final
    : public StreamProcessor<v1::AttendSessionsRequest,
                             v1::AttendSessionsResponse> {
 public:
  Steps(SessionService* service, Method method)
      : service_(service), method_(method) {}

  void Submit(const v1::AttendSessionsRequest& request,
              v1::AttendSessionsResponse* response,
              const StreamMessage& message,
              absl::AnyInvocable<void(absl::Status)> done) override {
    service_->work_.Begin();
    if (absl::Status admitted = service_->admission_->AdmitStreamMessage();
        !admitted.ok()) {
      done(std::move(admitted));
      return;
    }
    service_->Step(request, message.request_bytes, response, message.received,
                   message.deadline, message.is_cancelled, message.held,
                   std::move(done));
  }

  void Answered(const v1::AttendSessionsRequest& request,
                const v1::AttendSessionsResponse& response,
                const StreamMessage& message, grpc::StatusCode code) override {
    service_->metrics_->RecordRequest(
        method_, code, absl::ToDoubleSeconds(absl::Now() - message.received),
        message.request_bytes, static_cast<int64_t>(response.ByteSizeLong()));
    service_->work_.Answered();
    ATTNSERVE_LOG(LogLevel::kDebug, MethodName(method_),
                  " id=", request.request_id(), " code=", code,
                  " sessions=", request.sessions_size(), " ",
                  response.error_message());
  }

  void Release() override { service_->work_.End(); }

 private:
  SessionService* const service_;
  const Method method_;
};

SessionService::SessionService(const SessionServiceOptions& options,
                               const Admission* admission,
                               kvcache::SessionStore* store,
                               Scheduler* scheduler, Metrics* metrics)
    : options_(options),
      store_(store),
      scheduler_(scheduler),
      metrics_(metrics),
      admission_(admission),
      work_(metrics),
      stream_steps_(
          std::make_unique<Steps>(this, Method::kAttendSessionsStream)),
      channel_steps_(std::make_unique<Steps>(this, Method::kStepChannel)) {}

SessionService::~SessionService() = default;

absl::StatusOr<MemoryBudget::Reservation> SessionService::Reserve(
    int64_t bytes) {
  if (options_.budget == nullptr) return MemoryBudget::Reservation();
  absl::StatusOr<MemoryBudget::Reservation> reserved =
      options_.budget->Reserve(bytes);
  if (!reserved.ok()) metrics_->RecordRejection(Rejection::kMemoryBudget);
  return reserved;
}

grpc::Status SessionService::Answer(Method method, const absl::Status& status,
                                    absl::Time received, int64_t request_bytes,
                                    int64_t response_bytes) {
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(method, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          request_bytes, response_bytes);
  work_.Answered();
  return grpc_status;
}

template <typename Request, typename Op>
grpc::ServerUnaryReactor* SessionService::Inline(
    grpc::CallbackServerContext* context, Method method, const Request& request,
    v1::SessionInfo* response, Op op) {
  auto* reactor = new TrackedUnaryReactor(&work_, context, options_.watchdog);
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
  reactor->FinishWatched(
      Answer(method, status, received, request_bytes,
             static_cast<int64_t>(response->ByteSizeLong())));
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

// AppendKvStream: chunks of one session applied in order (PieceStream).
class SessionService::AppendStream final
    : public PieceStream<v1::AppendKvRequest> {
 public:
  AppendStream(SessionService* service, grpc::CallbackServerContext* context,
               v1::SessionInfo* response)
      : PieceStream(service, context, Method::kAppendKvStream),
        response_(response) {
    Start();
  }

 private:
  absl::Status Apply(const v1::AppendKvRequest& chunk) override {
    if (pieces() > 0 && chunk.session_id() != session_id_) {
      return absl::InvalidArgumentError(
          absl::StrCat("session_id: \"", chunk.session_id(),
                       "\" differs from the stream's \"", session_id_,
                       "\" (one session per stream)"));
    }
    session_id_ = chunk.session_id();
    return ApplyAppendKv(chunk, *service()->store_, response_);
  }

  absl::Status PieceError(absl::Status status) override {
    return absl::Status(status.code(), absl::StrCat("chunk ", pieces(), ": ",
                                                    status.message()));
  }

  absl::Status Finished() override {
    return pieces() == 0 ? absl::InvalidArgumentError(
                               "no chunks: the stream ended before any message")
                         : absl::OkStatus();
  }

  absl::Status Conclude(absl::Status status) override {
    if (!status.ok()) response_->Clear();
    return status;
  }

  int64_t ResponseBytes() const override {
    return static_cast<int64_t>(response_->ByteSizeLong());
  }

  v1::SessionInfo* const response_;
  std::string session_id_;
};

grpc::ServerReadReactor<v1::AppendKvRequest>* SessionService::AppendKvStream(
    grpc::CallbackServerContext* context, v1::SessionInfo* response) {
  return new AppendStream(this, context, response);
}

void SessionService::Step(const v1::AttendSessionsRequest& request,
                          int64_t request_bytes,
                          v1::AttendSessionsResponse* response,
                          absl::Time received, absl::Time deadline,
                          std::function<bool()> is_cancelled,
                          MemoryBudget::Reservation* held,
                          absl::AnyInvocable<void(absl::Status)> done) {
  auto prepare = [&]() -> absl::StatusOr<std::shared_ptr<SessionsCall>> {
    auto decoded = std::make_shared<wire::DecodedSessionsRequest>();
    ASSIGN_OR_RETURN(*decoded, wire::DecodeAttendSessions(request));
    ASSIGN_OR_RETURN(kvcache::SessionStore::AppendPlan plan,
                     PlanSessions(*decoded, *store_));
    ASSIGN_OR_RETURN(const SessionsAdmission admission,
                     AdmitSessions(*decoded, plan.parts(), options_.limits));
    // Before anything is appended, so a refusal leaves no trace.
    ASSIGN_OR_RETURN(*held, Reserve(request_bytes + admission.response_bytes));
    return CommitSessions(std::move(decoded), std::move(plan), admission,
                          *store_, response);
  };
  absl::StatusOr<std::shared_ptr<SessionsCall>> call = prepare();
  if (!call.ok()) {
    done(call.status());
    return;
  }
  // run and reject share the completion.
  auto finish =
      std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
  const double flops = (*call)->flops;
  Task task;
  task.deadline = deadline;
  task.is_cancelled = std::move(is_cancelled);
  task.small = flops < options_.small_request_flops;
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
  absl::Status submitted = scheduler_->Submit(std::move(task));
  if (!submitted.ok()) (*finish)(std::move(submitted));
}

grpc::ServerUnaryReactor* SessionService::AttendSessions(
    grpc::CallbackServerContext* context,
    const v1::AttendSessionsRequest* request,
    v1::AttendSessionsResponse* response) {
  auto* reactor = new TrackedUnaryReactor(&work_, context, options_.watchdog);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  auto finish = [this, reactor, request, response, received,
                 request_bytes](absl::Status status) {
    StampAnswer(status, *request, response);
    const grpc::Status grpc_status =
        Answer(Method::kAttendSessions, status, received, request_bytes,
               static_cast<int64_t>(response->ByteSizeLong()));
    ATTNSERVE_LOG(LogLevel::kDebug, "AttendSessions id=", request->request_id(),
                  " code=", grpc_status.error_code(),
                  " sessions=", request->sessions_size(), " ",
                  status.message());
    reactor->FinishWatched(grpc_status);
  };
  const absl::Status admitted = admission_->Admit(*context);
  if (!admitted.ok()) {
    finish(admitted);
    return reactor;
  }
  Step(
      *request, request_bytes, response, received, CallDeadline(*context),
      [context] { return context->IsCancelled(); }, reactor->held(),
      std::move(finish));
  return reactor;
}

grpc::ServerBidiReactor<v1::AttendSessionsRequest, v1::AttendSessionsResponse>*
SessionService::AttendSessionsStream(grpc::CallbackServerContext* context) {
  return new OrderedStreamReactor<v1::AttendSessionsRequest,
                                  v1::AttendSessionsResponse>(
      context, stream_steps_.get(), options_.max_stream_inflight,
      admission_->Admit(*context), options_.watchdog);
}

absl::StatusOr<std::unique_ptr<StepTransport>> SessionService::OpenChannel(
    const v1::OpenStepChannelRequest& request, const SharedRegion** region) {
  *region = nullptr;
  if (options_.max_step_channels == 0) {
    return absl::FailedPreconditionError(
        "step channels are off: start attnserve with --step_channels=N "
        "(default 8) instead of 0");
  }
  if (request.tcp() && !request.region().empty()) {
    return absl::InvalidArgumentError(
        "region: a TCP step channel (tcp) takes no region");
  }
  if (request.tcp() && options_.step_listener == nullptr) {
    return absl::FailedPreconditionError(
        "tcp: TCP step channels are off (--step_channel_listen is empty, or "
        "the server uses TLS): start attnserve without --tls_cert and with "
        "--step_channel_listen=auto (the default) or HOST:PORT");
  }
  if (!request.tcp() && options_.shared_memory == nullptr) {
    return absl::FailedPreconditionError(
        "region: shared-memory step channels are off: start attnserve with "
        "--shared_memory");
  }
  std::shared_ptr<SharedRegion> shared;
  if (!request.tcp()) {
    ASSIGN_OR_RETURN(shared, options_.shared_memory->Find(request.region()));
    RETURN_IF_ERROR(shared->Check());
  }
  absl::MutexLock lock(&channels_mu_);
  if (open_channels_ >= options_.max_step_channels) {
    return absl::ResourceExhaustedError(
        absl::StrCat("step channels: ", options_.max_step_channels,
                     " are open (--step_channels)"));
  }
  std::unique_ptr<StepTransport> transport;
  if (request.tcp()) {
    transport = std::make_unique<SocketTransport>(
        options_.step_listener, options_.max_step_frame_bytes);
  } else {
    if (channel_regions_.contains(shared.get())) {
      return absl::FailedPreconditionError(
          absl::StrCat("region: \"", request.region(),
                       "\" already holds an open step channel"));
    }
    ASSIGN_OR_RETURN(wire::StepRing ring,
                     wire::StepRing::Create(shared->data(), shared->size()));
    *region = shared.get();
    channel_regions_.insert(*region);
    transport =
        std::make_unique<RingTransport>(std::move(ring), std::move(shared));
  }
  ++open_channels_;
  metrics_->AddStepChannels(1);
  return transport;
}

void SessionService::CloseChannel(const SharedRegion* region) {
  absl::MutexLock lock(&channels_mu_);
  if (region != nullptr) channel_regions_.erase(region);
  --open_channels_;
  metrics_->AddStepChannels(-1);
}

grpc::ServerWriteReactor<v1::StepChannelInfo>* SessionService::StepChannel(
    grpc::CallbackServerContext* context,
    const v1::OpenStepChannelRequest* request) {
  const SharedRegion* region = nullptr;
  const absl::Status admitted = admission_->Admit(*context);
  absl::StatusOr<std::unique_ptr<StepTransport>> transport =
      admitted.ok() ? OpenChannel(*request, &region)
                    : absl::StatusOr<std::unique_ptr<StepTransport>>(admitted);
  const bool counted = transport.ok();
  return new StepChannelReactor(
      std::move(transport), options_.step_channel_spin, channel_steps_.get(),
      [this] { return admission_->draining(); },
      [this, counted, region] {
        if (counted) CloseChannel(region);
      });
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
