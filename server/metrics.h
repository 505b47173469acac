#ifndef ATTNSERVE_SERVER_METRICS_H_
#define ATTNSERVE_SERVER_METRICS_H_

// The Prometheus metrics of the server (names per DESIGN.md "Server"). Every
// family and every label child is created in the constructor and held by
// pointer; recording a request does no label lookup.

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/attention.h"
#include "grpcpp/support/status.h"

namespace prometheus {
class Registry;
class Exposer;
}  // namespace prometheus

namespace attnserve::server {

enum class Method { kAttend, kAttendStream, kGetServerInfo };

// Why a task never reached a kernel.
enum class Rejection { kQueueFull, kDeadline, kCancelled, kShutdown };

struct BuildInfo {
  std::string version;
  std::string onednn;
  std::string isa;
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& info);
  ~Metrics();

  // Serves GET /metrics over HTTP on `listen` ("host:port"; port 0 picks one).
  // Returns the bound port. Unavailable when the address cannot be bound.
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
  // attnserve_rejected_total{reason}.
  void RecordRejection(Rejection reason);
  // attnserve_queue_depth, attnserve_inflight_requests.
  void SetQueueDepth(int64_t depth);
  void AddInflight(int64_t delta);

  prometheus::Registry& registry();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_METRICS_H_
