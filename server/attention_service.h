#ifndef ATTNSERVE_SERVER_ATTENTION_SERVICE_H_
#define ATTNSERVE_SERVER_ATTENTION_SERVICE_H_

// The AttentionService on gRPC's callback API. Handlers only validate and
// queue: kernels run on the scheduler's workers, which finish the calls.
// Authentication is in auth.h, idle accounting in work_tracker.h, the unary
// calls' reactor in tracked_unary_reactor.h, the stream protocol in
// stream_reactor.h and what differs between Attend and AttendModel in
// request_kind.h.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "server/call_stages.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request_codec.h"
#include "server/rpc/admission.h"
#include "server/rpc/arena_messages.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/scheduler.h"
#include "server/shm/shared_memory_registry.h"
#include "server/work_tracker.h"

namespace attnserve::server {

struct ServiceOptions {
  RequestLimits limits;
  // Largest request sent in pieces (AttendPieces), --max_request_bytes.
  int64_t max_request_bytes = int64_t{256} << 20;
  // Messages of one AttendStream being computed or waiting to be written;
  // reading pauses beyond it (backpressure).
  int max_stream_inflight = 16;
  // Reported by GetServerInfo.
  v1::ServerInfo info;
  // The hosted models (AttendModel); null = none. Must outlive the service.
  const ModelRegistry* models = nullptr;
  // Fills the figures of `info` that change while serving (the sessions'
  // counts), at each GetServerInfo; null = none. Thread-safe.
  std::function<void(v1::ServerInfo* info)> live_info;
  // The server's --max_inflight_bytes budget: every call reserves its
  // request, response and working bytes once decoded, until its answer is
  // handed back; null = no budget. Must outlive the service.
  MemoryBudget* budget = nullptr;
  // Cancels calls whose client does not take the answer (--send_timeout);
  // null = none. Must outlive the service.
  SendWatchdog* watchdog = nullptr;
  // Regions that Attend tensors may refer to (--shared_memory); null =
  // none. Must outlive the service.
  SharedMemoryRegistry* shared_memory = nullptr;
  // Softmax Attend requests of fewer FLOPs (the count --max_request_flops
  // limits) are small (Kind::IsSmall): the engine runs them on one thread
  // (EngineOptions::serial_below_flops), the scheduler inline when it can
  // (SchedulerOptions::run_small_inline), and they may be batched. 0
  // (default) = none is small.
  double small_request_flops = 0;
  // Small Attend requests carry their batch key (server/batching.h), so that
  // a scheduler with batch_max_size > 1 coalesces them (default false).
  bool batch_small_requests = false;
  // Called once per computed call, after its answer, with its stage times;
  // null (default) = not measured. For benchmarks; must be thread-safe.
  std::function<void(const CallStages&)> observe_stages;
};

struct AttendKind;
struct ModelKind;

class AttentionService final : public v1::AttentionService::CallbackService {
 public:
  // `admission` (the server's, shared with SessionService; its
  // StartDraining also refuses new messages on open streams), `scheduler`,
  // `metrics` and `validator` must outlive the service; `validator` only
  // checks requests (AttentionEngine::Validate), it computes nothing.
  AttentionService(ServiceOptions options, const Admission* admission,
                   Scheduler* scheduler, Metrics* metrics,
                   const AttentionEngine* validator);
  ~AttentionService() override;

  // Waits until no call or stream message is being processed, or until
  // `deadline`. True when idle. Open streams with nothing in flight count as
  // idle.
  bool WaitUntilIdle(absl::Time deadline) {
    return work_.WaitUntilIdle(deadline);
  }

  // Decodes and queues one Attend (SubmitAttend) or AttendModel
  // (SubmitModel) request that another protocol's front end built
  // (server/kserve/): the same validation, limits, scheduler, kernels and
  // compute metrics as the native calls. The caller has admitted the call and
  // records its answer. `request` and `response` must stay valid until
  // `done`, which is called exactly once, on a worker or inline, with the
  // final status (`response` filled and timed when OK). With a `ticket`
  // (may be null) the caller can Withdraw the call while it is queued.
  void SubmitAttend(const v1::AttendRequest& request,
                    v1::AttendResponse* response, absl::Time received,
                    std::function<bool()> is_cancelled, absl::Time deadline,
                    std::shared_ptr<QueueTicket> ticket,
                    absl::AnyInvocable<void(absl::Status)> done);
  void SubmitModel(const v1::ModelRequest& request,
                   v1::AttendResponse* response, absl::Time received,
                   std::function<bool()> is_cancelled, absl::Time deadline,
                   std::shared_ptr<QueueTicket> ticket,
                   absl::AnyInvocable<void(absl::Status)> done);
  // Takes a submitted call that is still queued out of the queue and answers
  // it CANCELLED (Scheduler::Withdraw): for a front end whose call was
  // cancelled.
  void Withdraw(const QueueTicket& ticket) { scheduler_->Withdraw(ticket); }

  grpc::ServerUnaryReactor* Attend(grpc::CallbackServerContext* context,
                                   const v1::AttendRequest* request,
                                   v1::AttendResponse* response) override;
  grpc::ServerBidiReactor<v1::AttendRequest, v1::AttendResponse>* AttendStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context,
      const v1::GetServerInfoRequest* request,
      v1::ServerInfo* response) override;
  grpc::ServerUnaryReactor* AttendModel(grpc::CallbackServerContext* context,
                                        const v1::ModelRequest* request,
                                        v1::AttendResponse* response) override;
  grpc::ServerBidiReactor<v1::ModelRequest, v1::AttendResponse>*
  AttendModelStream(grpc::CallbackServerContext* context) override;
  grpc::ServerReadReactor<v1::RequestPiece>* AttendPieces(
      grpc::CallbackServerContext* context,
      v1::AttendResponse* response) override;

 private:
  // The StreamProcessor (stream_reactor.h) of Kind's streams.
  template <typename Kind>
  class Streams;
  // The reactor of one AttendPieces call (attend_pieces.cc).
  class PiecesReactor;

  // The unary handler of Attend and AttendModel.
  template <typename Kind>
  grpc::ServerUnaryReactor* HandleUnary(grpc::CallbackServerContext* context,
                                        const typename Kind::Request* request,
                                        v1::AttendResponse* response);

  // Decodes and queues one request of `request_bytes` (its serialized size,
  // which the caller has counted already); `done` is called exactly once, on
  // a worker or inline, with the final status (response filled and timed when
  // OK). The call reserves its request, response and working bytes less
  // what `prepaid` (bytes the caller reserved for it while receiving it)
  // already holds. The call's memory-budget reservation is moved into
  // `held` just before `done`, for the caller to keep until the answer is
  // sent; with `held` null it is released then.
  template <typename Kind>
  void Process(const typename Kind::Request& request, int64_t request_bytes,
               v1::AttendResponse* response, absl::Time received,
               std::function<bool()> is_cancelled, absl::Time deadline,
               MemoryBudget::Reservation* held,
               std::shared_ptr<QueueTicket> ticket,
               MemoryBudget::Reservation prepaid,
               absl::AnyInvocable<void(absl::Status)> done);

  // Computes one decoded request alone into `response` (timing and compute
  // metrics when OK) and returns its status; `stages` (received and
  // submitted set by the caller) gets when compute started and ended.
  template <typename Kind>
  absl::Status ComputeAlone(const typename Kind::Decoded& decoded,
                            AttentionEngine& engine,
                            v1::AttendResponse* response, CallStages* stages);

  // Answers a call computed alone with its status, then reports its stages
  // (observe_stages) when it is OK.
  void AnswerAlone(absl::Status status, CallStages stages,
                   absl::AnyInvocable<void(absl::Status)>& answer);

  // The scheduler's run_batch of small Attend requests: one engine run for
  // all (server/batching.h), each member answered with its own slice, timing
  // and status; members are run alone when the batch's working bytes do not
  // fit the memory budget or the batched run fails.
  void RunAttendBatch(AttentionEngine& engine,
                      const std::vector<BatchMember>& members);

  // Metrics of one answered request or stream message: per method, and per
  // model for requests of a hosted model.
  template <typename Kind>
  void RecordAnswer(const typename Kind::Request& request, Method method,
                    grpc::StatusCode code, double seconds,
                    int64_t request_bytes, int64_t response_bytes);

  const ServiceOptions options_;
  const Admission* const admission_;
  Scheduler* const scheduler_;
  Metrics* const metrics_;
  const AttentionEngine* const validator_;
  WorkTracker work_;
  const std::unique_ptr<Streams<AttendKind>> attend_streams_;
  const std::unique_ptr<Streams<ModelKind>> model_streams_;
  // The unary calls' messages, each call's on its own arena.
  ArenaMessageAllocator<v1::AttendRequest, v1::AttendResponse> attend_messages_;
  ArenaMessageAllocator<v1::ModelRequest, v1::AttendResponse> model_messages_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_ATTENTION_SERVICE_H_
