#ifndef ATTNSERVE_SERVER_SESSION_SERVICE_H_
#define ATTNSERVE_SERVER_SESSION_SERVICE_H_

// SessionService (sessions.proto) on gRPC's callback API: KV-cache sessions
// in a kvcache::SessionStore. Calls that change a session (create, append,
// fork, truncate, close) are applied on receipt, in the order the server
// receives them: they are bookkeeping and memory copies of the bytes that
// just arrived. The attention of AttendSessions runs on the scheduler's
// workers, over the layers pinned on receipt.

#include <atomic>
#include <string>

#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "kvcache/session_store.h"
#include "server/metrics.h"
#include "server/request_codec.h"
#include "server/rpc/admission.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/scheduler.h"
#include "server/work_tracker.h"

namespace attnserve::server {

class SessionService final : public v1::SessionService::CallbackService {
 public:
  // `admission` (the server's, shared with AttentionService), `store`,
  // `scheduler`, `metrics` and, when not null, `budget` (each call reserves
  // its request and response bytes until its answer is sent; the keys and
  // values the cache keeps are the store's own budget) and `watchdog`
  // (--send_timeout) must outlive the service.
  SessionService(const RequestLimits& limits, const Admission* admission,
                 kvcache::SessionStore* store, Scheduler* scheduler,
                 Metrics* metrics, MemoryBudget* budget = nullptr,
                 SendWatchdog* watchdog = nullptr);
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
  class AppendStream;

  // Answers a call whose work is `op`, run here, with its metrics.
  template <typename Request, typename Op>
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* context,
                                   Method method, const Request& request,
                                   v1::SessionInfo* response, Op op);
  // `bytes` of the budget (an empty reservation without one); a refusal is
  // counted.
  absl::StatusOr<MemoryBudget::Reservation> Reserve(int64_t bytes);

  const RequestLimits limits_;
  kvcache::SessionStore* const store_;
  Scheduler* const scheduler_;
  Metrics* const metrics_;
  const Admission* const admission_;
  MemoryBudget* const budget_;
  SendWatchdog* const watchdog_;
  WorkTracker work_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_SERVICE_H_
