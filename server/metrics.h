#ifndef ATTNSERVE_SERVER_METRICS_H_
#define ATTNSERVE_SERVER_METRICS_H_

// The Prometheus metrics of the server (names, types and labels as listed in
// docs/operations.md "Metrics", which deploy/ and its tests rely on). Every
// family and every label child is created in the constructor and held by
// pointer; recording a request does no label lookup.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attention.h"
#include "grpcpp/support/status.h"
#include "kvcache/session_store.h"
#include "server/shm/shared_memory_registry.h"

namespace prometheus {
class Registry;
class Exposer;
}  // namespace prometheus

namespace attnserve::server {

// Every RPC method the server counts; metrics.cc's kMethodNames names them in
// this order.
enum class Method {
  kAttend,
  kAttendStream,
  kGetServerInfo,
  kAttendModel,
  kAttendModelStream,
  kAttendPieces,
  // SessionService.
  kCreateSession,
  kAppendKv,
  kAppendKvStream,
  kAttendSessions,
  kAttendSessionsStream,
  kForkSession,
  kTruncateSession,
  kCloseSession,
  kGetSession,
  // Steps of a same-host step channel (one per step).
  kStepChannel,
  kExportSessions,
  kImportSessions,
  // inference.GRPCInferenceService (the Open Inference Protocol,
  // server/kserve/).
  kServerLive,
  kServerReady,
  kModelReady,
  kServerMetadata,
  kModelMetadata,
  kModelConfig,
  kModelStatistics,
  kModelInfer,
  kModelStreamInfer,
  // SharedMemoryService.
  kRegisterSharedMemory,
  kUnregisterSharedMemory,
  kSharedMemoryStatus,
  // inference.GRPCInferenceService's system shared memory (Triton).
  kSystemSharedMemoryStatus,
  kSystemSharedMemoryRegister,
  kSystemSharedMemoryUnregister,
};
inline constexpr int kNumMethods =
    static_cast<int>(Method::kSystemSharedMemoryUnregister) + 1;
// The method's name: its label in the metrics and its name in the logs.
const char* MethodName(Method method);

// Why a task never reached a kernel.
enum class Rejection {
  kQueueFull,
  kDeadline,
  kCancelled,
  kShutdown,
  kMemoryBudget
};

struct BuildInfo {
  std::string version;
  std::string onednn;
  std::string isa;
};

class Metrics {
 public:
  // `models`: the hosted models' names; their label children are made here
  // and addressed by index in `models`.
  explicit Metrics(const BuildInfo& info,
                   const std::vector<std::string>& models = {});
  ~Metrics();

  // Serves GET /metrics over HTTP on `listen` ("host:port"; port 0 picks one),
  // and GET /ready: attnserve_serving (beside the exporter's own counters),
  // for load balancers' health checks, which look for its value. Returns the
  // bound port. Unavailable when the address cannot be bound.
  absl::StatusOr<int> Expose(const std::string& listen);

  // attnserve_requests_total{method,code},
  // attnserve_request_duration_seconds{method}, attnserve_request_bytes_total,
  // attnserve_response_bytes_total. For AttendStream, once per message.
  void RecordRequest(Method method, grpc::StatusCode code, double seconds,
                     int64_t request_bytes, int64_t response_bytes);
  // attnserve_queue_duration_seconds.
  void RecordQueue(double seconds);
  // attnserve_compute_duration_seconds{kernel},
  // attnserve_attention_flops_total.
  void RecordCompute(KernelPath kernel, double seconds, double flops);
  // attnserve_model_requests_total{model,code} and
  // attnserve_model_request_duration_seconds{model} of models[model]
  // (besides RecordRequest's per-method figures).
  void RecordModelRequest(int model, grpc::StatusCode code, double seconds);
  // attnserve_model_compute_duration_seconds{model}, and the call's FLOPs
  // (projections included) in attnserve_attention_flops_total.
  void RecordModelCompute(int model, double seconds, double flops);
  // attnserve_batch_size: the tasks of one scheduler run (1 = alone).
  void RecordBatch(int size);
  // attnserve_batch_fallbacks_total{reason="error"}: a batch computed member
  // by member because its run failed.
  void RecordBatchFallback();
  // attnserve_rejected_total{reason}.
  void RecordRejection(Rejection reason);
  // attnserve_send_timeouts_total: calls cancelled because the client did
  // not take its answer within --send_timeout (server/rpc/send_watchdog.h).
  void RecordSendTimeout();
  // attnserve_serving: 1 (from the start), 0 once draining.
  void SetServing(bool serving);
  // attnserve_queue_depth, attnserve_inflight_requests.
  void SetQueueDepth(int64_t depth);
  void AddInflight(int64_t delta);
  // attnserve_step_channels: same-host step channels open.
  void AddStepChannels(int64_t delta);
  // attnserve_kv_bytes{state="used"|"free"}, attnserve_kv_sessions,
  // attnserve_kv_tokens_appended_total and
  // attnserve_kv_sessions_ended_total{reason="closed"|"expired"|"evicted"},
  // from `source` at every scrape (thread-safe; it must stay callable until
  // the metrics are destroyed). Without a source these are not exported.
  void SetSessionStatsSource(std::function<kvcache::StoreStats()> source);
  // attnserve_inflight_bytes{state="used"|"free"}: the --max_inflight_bytes
  // budget, from `source` (used, limit) at every scrape, as above.
  void SetMemoryBudgetSource(
      std::function<std::pair<int64_t, int64_t>()> source);
  // attnserve_shared_memory_regions, attnserve_shared_memory_bytes and
  // attnserve_shared_memory_calls_total, from `source` at every scrape, as
  // above (set only with --shared_memory).
  void SetSharedMemorySource(std::function<SharedMemoryStats()> source);

  prometheus::Registry& registry();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_METRICS_H_
