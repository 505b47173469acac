#include "server/attention_service.h"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "server/batching.h"
#include "server/log.h"
#include "server/request_kind.h"
#include "server/rpc/status_util.h"
#include "server/rpc/stream_reactor.h"
#include "server/tracked_unary_reactor.h"

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

// A small Attend request's part in a batch (Task::batch_part).
struct AttendBatchPart final : BatchPart {
  DecodedRequest decoded;
  v1::AttendResponse* response = nullptr;
  absl::Time received, submitted;
  absl::AnyInvocable<void(absl::Status)> answer;
};

}  // namespace

// Hands the messages of Kind's streams to Process and counts them. Stateless
// beyond the service, so one serves every stream of its kind.
template <typename Kind>
class AttentionService::Streams final
    : public StreamProcessor<typename Kind::Request, v1::AttendResponse> {
 public:
  using Request = typename Kind::Request;

  explicit Streams(AttentionService* service) : service_(service) {}

  grpc::ServerBidiReactor<Request, v1::AttendResponse>* Open(
      grpc::CallbackServerContext* context) {
    return new OrderedStreamReactor<Request, v1::AttendResponse>(
        context, this, service_->options_.max_stream_inflight,
        service_->admission_->Admit(*context), service_->options_.watchdog);
  }

  void Submit(const Request& request, v1::AttendResponse* response,
              const StreamMessage& message,
              absl::AnyInvocable<void(absl::Status)> done) override {
    service_->work_.Begin();
    if (absl::Status admitted = service_->admission_->AdmitStreamMessage();
        !admitted.ok()) {
      done(std::move(admitted));
      return;
    }
    service_->Process<Kind>(
        request, message.request_bytes, response, message.received,
        message.is_cancelled, message.deadline, message.held,
        /*ticket=*/nullptr, /*prepaid=*/{}, std::move(done));
  }

  void Answered(const Request& request, const v1::AttendResponse& response,
                const StreamMessage& message, grpc::StatusCode code) override {
    service_->RecordAnswer<Kind>(
        request, Kind::kStreamMethod, code,
        absl::ToDoubleSeconds(absl::Now() - message.received),
        message.request_bytes, static_cast<int64_t>(response.ByteSizeLong()));
    service_->work_.Answered();
  }

  void Release() override { service_->work_.End(); }

 private:
  AttentionService* const service_;
};

AttentionService::AttentionService(ServiceOptions options,
                                   const Admission* admission,
                                   Scheduler* scheduler, Metrics* metrics,
                                   const AttentionEngine* validator)
    : options_(std::move(options)),
      admission_(admission),
      scheduler_(scheduler),
      metrics_(metrics),
      validator_(validator),
      work_(metrics),
      attend_streams_(std::make_unique<Streams<AttendKind>>(this)),
      model_streams_(std::make_unique<Streams<ModelKind>>(this)) {
  SetMessageAllocatorFor_Attend(&attend_messages_);
  SetMessageAllocatorFor_AttendModel(&model_messages_);
}

AttentionService::~AttentionService() = default;

template <typename Kind>
void AttentionService::Process(
    const typename Kind::Request& request, int64_t request_bytes,
    v1::AttendResponse* response, absl::Time received,
    std::function<bool()> is_cancelled, absl::Time deadline,
    MemoryBudget::Reservation* held, std::shared_ptr<QueueTicket> ticket,
    MemoryBudget::Reservation prepaid,
    absl::AnyInvocable<void(absl::Status)> done) {
  const DecodeContext decode_context{validator_, &options_.limits,
                                     options_.models, options_.shared_memory};
  absl::StatusOr<typename Kind::Decoded> decoded =
      Kind::Decode(request, decode_context);
  if (!decoded.ok()) {
    done(decoded.status());
    return;
  }
  MemoryBudget::Reservation reservation = std::move(prepaid);
  if (options_.budget != nullptr) {
    const int64_t needed = request_bytes + Kind::HeldBytes(*decoded);
    if (needed < reservation.bytes()) {
      reservation.Shrink(needed);
    } else {
      absl::StatusOr<MemoryBudget::Reservation> reserved =
          options_.budget->Reserve(needed - reservation.bytes());
      if (!reserved.ok()) {
        metrics_->RecordRejection(Rejection::kMemoryBudget);
        done(reserved.status());
        return;
      }
      reservation.Absorb(*std::move(reserved));
    }
  }
  // run and reject share the completion, and the reservation with it; the
  // scheduler calls exactly one of them, then drops both.
  struct Finish {
    absl::AnyInvocable<void(absl::Status)> done;
    MemoryBudget::Reservation reservation;
    MemoryBudget::Reservation* held;
    // A task run alone: computed in its slot (run), answered once the slot
    // is free again (Task::after_slot): sending needs no engine, and the
    // slot can take the next task meanwhile.
    absl::Status computed;
    CallStages stages;
    // The bytes stay reserved while the answer is being sent, in `held`.
    void operator()(absl::Status status) {
      if (held != nullptr) {
        *held = std::move(reservation);
      } else {
        reservation.Release();
      }
      done(std::move(status));
    }
  };
  auto finish = std::make_shared<Finish>(
      Finish{std::move(done), std::move(reservation), held});
  const absl::Time submitted_at = absl::Now();
  finish->stages.received = received;
  finish->stages.submitted = submitted_at;
  Task task;
  task.deadline = deadline;
  task.is_cancelled = std::move(is_cancelled);
  task.small = Kind::IsSmall(*decoded, options_.small_request_flops);
  task.ticket = std::move(ticket);
  if constexpr (std::is_same_v<Kind, AttendKind>) {
    if (task.small && options_.batch_small_requests) {
      task.batch_key = AttendBatchKey(*decoded);
    }
    if (!task.batch_key.empty()) {
      auto part = std::make_unique<AttendBatchPart>();
      part->decoded = *decoded;
      part->response = response;
      part->received = received;
      part->submitted = submitted_at;
      part->answer = [finish](absl::Status status) {
        (*finish)(std::move(status));
      };
      task.batch_part = std::move(part);
      task.run_batch = [this](AttentionEngine& engine,
                              const std::vector<BatchMember>& members) {
        RunAttendBatch(engine, members);
      };
    }
  }
  task.run = [this, d = *std::move(decoded), response, finish](
                 AttentionEngine& engine, absl::Duration queued) {
    finish->computed = ComputeAlone<Kind>(d, engine, response, &finish->stages);
  };
  task.after_slot = [this, finish] {
    absl::AnyInvocable<void(absl::Status)> answer =
        [&finish](absl::Status status) { (*finish)(std::move(status)); };
    AnswerAlone(std::move(finish->computed), finish->stages, answer);
  };
  task.reject = [finish](absl::Status status) { (*finish)(std::move(status)); };
  const absl::Status submitted = scheduler_->Submit(std::move(task));
  if (!submitted.ok()) (*finish)(submitted);
}

template <typename Kind>
absl::Status AttentionService::ComputeAlone(
    const typename Kind::Decoded& decoded, AttentionEngine& engine,
    v1::AttendResponse* response, CallStages* stages) {
  stages->started = absl::Now();
  const absl::Status status = Kind::Compute(decoded, engine, response);
  stages->computed = absl::Now();
  if (status.ok()) {
    Kind::RecordCompute(
        decoded, absl::ToDoubleSeconds(stages->computed - stages->started),
        *metrics_);
    SetTiming(stages->received, stages->started, stages->computed, response);
  }
  return status;
}

void AttentionService::AnswerAlone(
    absl::Status status, CallStages stages,
    absl::AnyInvocable<void(absl::Status)>& answer) {
  const bool ok = status.ok();
  answer(std::move(status));
  if (ok && options_.observe_stages) {
    stages.answered = absl::Now();
    options_.observe_stages(stages);
  }
}

void AttentionService::RunAttendBatch(AttentionEngine& engine,
                                      const std::vector<BatchMember>& members) {
  std::vector<AttendBatchPart*> parts;
  std::vector<BatchedAttend> batch;
  parts.reserve(members.size());
  batch.reserve(members.size());
  for (const BatchMember& m : members) {
    parts.push_back(static_cast<AttendBatchPart*>(m.part));
    batch.push_back(
        BatchedAttend{&parts.back()->decoded, parts.back()->response});
  }
  const int size = static_cast<int>(parts.size());
  auto run_each_alone = [&] {
    for (AttendBatchPart* p : parts) {
      CallStages stages;
      stages.received = p->received;
      stages.submitted = p->submitted;
      absl::Status status =
          ComputeAlone<AttendKind>(p->decoded, engine, p->response, &stages);
      AnswerAlone(std::move(status), stages, p->answer);
    }
  };
  const absl::Time start = absl::Now();
  const absl::Status status = server::RunAttendBatch(batch, engine);
  const absl::Time end = absl::Now();
  if (!status.ok()) {
    // Each member gets its own result, or its own error.
    metrics_->RecordBatchFallback();
    run_each_alone();
    return;
  }
  const double seconds = absl::ToDoubleSeconds(end - start);
  std::vector<CallStages> stages;
  for (AttendBatchPart* p : parts) {
    AttendKind::RecordCompute(p->decoded, seconds, *metrics_);
    SetTiming(p->received, start, end, p->response);
    p->answer(absl::OkStatus());
    if (options_.observe_stages) {
      stages.push_back(
          CallStages{p->received, p->submitted, start, end, absl::Now(), size});
    }
  }
  for (const CallStages& s : stages) options_.observe_stages(s);
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

template <typename Kind>
grpc::ServerUnaryReactor* AttentionService::HandleUnary(
    grpc::CallbackServerContext* context, const typename Kind::Request* request,
    v1::AttendResponse* response) {
  auto* reactor = new TrackedUnaryReactor(&work_, context, options_.watchdog);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  auto finish = [this, reactor, request, response, received,
                 request_bytes](absl::Status status) {
    StampAnswer(status, *request, response);
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
    reactor->FinishWatched(grpc_status);
  };
  const absl::Status admitted = admission_->Admit(*context);
  if (!admitted.ok()) {
    finish(admitted);
    return reactor;
  }
  // A call cancelled while its task waits in the queue is answered and
  // gives back its request and budget bytes at once, not when a worker
  // reaches it.
  auto ticket = std::make_shared<QueueTicket>();
  reactor->OnCancelled([this, ticket] { scheduler_->Withdraw(*ticket); });
  Process<Kind>(
      *request, request_bytes, response, received,
      [context] { return context->IsCancelled(); }, CallDeadline(*context),
      reactor->held(), ticket, /*prepaid=*/{}, std::move(finish));
  return reactor;
}

void AttentionService::SubmitAttend(
    const v1::AttendRequest& request, v1::AttendResponse* response,
    absl::Time received, std::function<bool()> is_cancelled,
    absl::Time deadline, std::shared_ptr<QueueTicket> ticket,
    absl::AnyInvocable<void(absl::Status)> done) {
  Process<AttendKind>(request, static_cast<int64_t>(request.ByteSizeLong()),
                      response, received, std::move(is_cancelled), deadline,
                      /*held=*/nullptr, std::move(ticket), /*prepaid=*/{},
                      std::move(done));
}

void AttentionService::SubmitModel(
    const v1::ModelRequest& request, v1::AttendResponse* response,
    absl::Time received, std::function<bool()> is_cancelled,
    absl::Time deadline, std::shared_ptr<QueueTicket> ticket,
    absl::AnyInvocable<void(absl::Status)> done) {
  Process<ModelKind>(request, static_cast<int64_t>(request.ByteSizeLong()),
                     response, received, std::move(is_cancelled), deadline,
                     /*held=*/nullptr, std::move(ticket), /*prepaid=*/{},
                     std::move(done));
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

grpc::ServerBidiReactor<v1::AttendRequest, v1::AttendResponse>*
AttentionService::AttendStream(grpc::CallbackServerContext* context) {
  return attend_streams_->Open(context);
}

grpc::ServerBidiReactor<v1::ModelRequest, v1::AttendResponse>*
AttentionService::AttendModelStream(grpc::CallbackServerContext* context) {
  return model_streams_->Open(context);
}

grpc::ServerUnaryReactor* AttentionService::GetServerInfo(
    grpc::CallbackServerContext* context,
    const v1::GetServerInfoRequest* request, v1::ServerInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) {
    *response = options_.info;
    if (options_.live_info) options_.live_info(response);
  }
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(Method::kGetServerInfo, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          static_cast<int64_t>(request->ByteSizeLong()),
                          static_cast<int64_t>(response->ByteSizeLong()));
  reactor->Finish(grpc_status);
  return reactor;
}

// AttendPieces (attend_pieces.cc) hands its requests to these.
template void AttentionService::Process<AttendKind>(
    const v1::AttendRequest&, int64_t, v1::AttendResponse*, absl::Time,
    std::function<bool()>, absl::Time, MemoryBudget::Reservation*,
    std::shared_ptr<QueueTicket>, MemoryBudget::Reservation,
    absl::AnyInvocable<void(absl::Status)>);
template void AttentionService::RecordAnswer<AttendKind>(
    const v1::AttendRequest&, Method, grpc::StatusCode, double, int64_t,
    int64_t);

}  // namespace attnserve::server
