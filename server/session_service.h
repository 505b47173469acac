#ifndef ATTNSERVE_SERVER_SESSION_SERVICE_H_
#define ATTNSERVE_SERVER_SESSION_SERVICE_H_

// SessionService (sessions.proto) on gRPC's callback API: KV-cache sessions
// in a kvcache::SessionStore. Calls that change a session (create, append,
// fork, truncate, close) are applied on receipt, in the order the server
// receives them: they are bookkeeping and memory copies of the bytes that
// just arrived. The attention of AttendSessions (and of each message of
// AttendSessionsStream) runs on the scheduler, over the layers pinned on
// receipt. StepChannel serves the same steps through a ring in shared
// memory (server/step_channel.h).

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "kvcache/session_store.h"
#include "server/metrics.h"
#include "server/request_codec.h"
#include "server/rpc/admission.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/scheduler.h"
#include "server/shm/shared_memory_registry.h"
#include "server/step_listener.h"
#include "server/step_transport.h"
#include "server/work_tracker.h"

namespace attnserve::server {

// The most bytes of snapshot one SessionTransferChunk carries.
inline constexpr int64_t kTransferChunkBytes = int64_t{1} << 20;

struct SessionServiceOptions {
  RequestLimits limits;
  // Steps of one AttendSessionsStream being computed or waiting to be
  // written; reading pauses beyond it (backpressure). As AttendStream's.
  int max_stream_inflight = 16;
  // A step of fewer FLOPs is small (Task::small): the scheduler runs it on the
  // receiving thread when it can, as a small Attend (0 = none is small).
  double small_request_flops = 0;
  // When not null: each call reserves its request and response bytes until
  // its answer is sent (the keys and values the cache keeps are the store's
  // own budget). Must outlive the service.
  MemoryBudget* budget = nullptr;
  // When not null: --send_timeout. Must outlive the service.
  SendWatchdog* watchdog = nullptr;
  // Step channels (StepChannel) open at once, over shared memory and TCP
  // together; 0 (default) = off. A ring needs `shared_memory` (it lies in a
  // registered region), a TCP channel `step_listener`.
  int max_step_channels = 0;
  // The longest a channel's thread polls for the next step before it sleeps
  // (server/step_spin.h).
  absl::Duration step_channel_spin = absl::Milliseconds(5);
  // The registered regions; null = shared memory off. Must outlive the
  // service.
  SharedMemoryRegistry* shared_memory = nullptr;
  // Where TCP step channels connect; null = none. Must outlive the service.
  StepListener* step_listener = nullptr;
  // A TCP channel's longest request and answer frame.
  int64_t max_step_frame_bytes = int64_t{16} << 20;
};

class SessionService final : public v1::SessionService::CallbackService {
 public:
  // `admission` (the server's, shared with AttentionService; its
  // StartDraining also refuses new steps on open streams), `store`,
  // `scheduler` and `metrics` must outlive the service.
  SessionService(const SessionServiceOptions& options,
                 const Admission* admission, kvcache::SessionStore* store,
                 Scheduler* scheduler, Metrics* metrics);
  ~SessionService() override;
  bool WaitUntilIdle(absl::Time deadline) {
    return work_.WaitUntilIdle(deadline);
  }

  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context,
      const v1::CreateSessionRequest* request,
      v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* AppendKv(grpc::CallbackServerContext* context,
                                     const v1::AppendKvRequest* request,
                                     v1::SessionInfo* response) override;
  grpc::ServerReadReactor<v1::AppendKvRequest>* AppendKvStream(
      grpc::CallbackServerContext* context, v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* AttendSessions(
      grpc::CallbackServerContext* context,
      const v1::AttendSessionsRequest* request,
      v1::AttendSessionsResponse* response) override;
  grpc::ServerBidiReactor<v1::AttendSessionsRequest,
                          v1::AttendSessionsResponse>*
  AttendSessionsStream(grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::StepChannelInfo>* StepChannel(
      grpc::CallbackServerContext* context,
      const v1::OpenStepChannelRequest* request) override;
  // server/session_transfer.cc.
  grpc::ServerWriteReactor<v1::SessionTransferChunk>* ExportSessions(
      grpc::CallbackServerContext* context,
      const v1::ExportSessionsRequest* request) override;
  grpc::ServerReadReactor<v1::SessionTransferChunk>* ImportSessions(
      grpc::CallbackServerContext* context,
      v1::ImportSessionsResponse* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* TruncateSession(
      grpc::CallbackServerContext* context,
      const v1::TruncateSessionRequest* request,
      v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::SessionInfo* response) override;

 private:
  template <typename Piece>
  class PieceStream;  // server/session_piece_stream.h
  class AppendStream;
  class ExportStream;
  class ImportStream;
  class Steps;

  // Answers a call whose work is `op`, run here, with its metrics.
  template <typename Request, typename Op>
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* context,
                                   Method method, const Request& request,
                                   v1::SessionInfo* response, Op op);
  // The end of a call's work: `status` as gRPC's, recorded under `method`
  // with its time since `received` and its bytes, and counted as answered.
  grpc::Status Answer(Method method, const absl::Status& status,
                      absl::Time received, int64_t request_bytes,
                      int64_t response_bytes);
  // `bytes` of the budget (an empty reservation without one); a refusal is
  // counted.
  absl::StatusOr<MemoryBudget::Reservation> Reserve(int64_t bytes);
  // A ring laid out over the region `name` (the channel's checks: on, under
  // the limit, the region registered, usable and not another channel's),
  // counted as open from here; `region` gets the region.
  // A new channel's transport, counted among the open ones until
  // CloseChannel; `*region` is the ring's region (null for TCP).
  absl::StatusOr<std::unique_ptr<StepTransport>> OpenChannel(
      const v1::OpenStepChannelRequest& request, const SharedRegion** region);
  void CloseChannel(const SharedRegion* region);
  // One AttendSessions step, unary or on a stream, from decoding to the
  // answer: everything up to the pins happens here, in arrival order
  // (decode, the store's plan, limits, the budget into `held`, the appends),
  // then the engine run on the scheduler; `done` gets the step's status
  // once, with `response` filled when OK.
  void Step(const v1::AttendSessionsRequest& request, int64_t request_bytes,
            v1::AttendSessionsResponse* response, absl::Time received,
            absl::Time deadline, std::function<bool()> is_cancelled,
            MemoryBudget::Reservation* held,
            absl::AnyInvocable<void(absl::Status)> done);

  const SessionServiceOptions options_;
  kvcache::SessionStore* const store_;
  Scheduler* const scheduler_;
  Metrics* const metrics_;
  const Admission* const admission_;
  WorkTracker work_;
  // The processors of AttendSessionsStream and StepChannel steps.
  std::unique_ptr<Steps> stream_steps_;
  std::unique_ptr<Steps> channel_steps_;
  absl::Mutex channels_mu_;
  // The regions holding an open channel's ring.
  absl::flat_hash_set<const SharedRegion*> channel_regions_
      ABSL_GUARDED_BY(channels_mu_);
  int open_channels_ ABSL_GUARDED_BY(channels_mu_) = 0;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_SERVICE_H_
