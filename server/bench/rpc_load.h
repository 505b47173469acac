#ifndef ATTNSERVE_SERVER_BENCH_RPC_LOAD_H_
#define ATTNSERVE_SERVER_BENCH_RPC_LOAD_H_

// Client side of the RPC benchmark: channels with the transport settings
// docs/operations.md recommends, and two closed-loop drivers of Attend calls
// (one blocking caller; N outstanding calls on the callback API).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace attnserve::bench {

// An insecure channel to `target` with 512 MiB message limits and the transport
// settings of wire/transport.h. Channels made with different `pool_domain`
// values never share a TCP connection.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const std::string& pool_domain);

// What one measurement window saw.
struct WindowResult {
  // Client-side latency of every call that finished inside the window, µs.
  std::vector<double> latencies_us;
  // The server-reported Timing of those calls (zero for the echo), µs.
  std::vector<double> server_total_us;
  std::vector<double> server_compute_us;
  std::vector<double> server_queue_us;
  // Calls that finished inside the window and the window's length.
  int64_t completed = 0;
  double seconds = 0;
  // Bytes of the last response message (as serialized).
  int64_t response_bytes = 0;

  double rps() const { return seconds > 0 ? completed / seconds : 0; }
  // Adds another window's calls and time to this one.
  void Append(const WindowResult& other);
};

// How long a window lasts: at least `duration` and at least `min_calls`
// calls (the blocking driver; the callback driver stops at `duration`).
struct WindowSpec {
  absl::Duration duration = absl::Seconds(1);
  int64_t min_calls = 1;
  // Every call's deadline.
  absl::Duration call_timeout = absl::Seconds(120);
  // Every response's output data must have this many bytes.
  int64_t expected_output_bytes = 0;
};

// One caller, blocking calls back to back on `stub`. Fails on the first call
// that is not OK or whose output has the wrong size.
absl::StatusOr<WindowResult> RunBlocking(v1::AttentionService::Stub& stub,
                                         const v1::AttendRequest& request,
                                         const WindowSpec& window);

// `concurrency` calls outstanding at all times on the callback API, spread
// round-robin over `stubs` (one per channel); each finished call immediately
// issues the next until the window ends. Latency and throughput count only
// calls that finished before the end; calls still running are then awaited.
// Fails if any call was not OK or had the wrong size.
absl::StatusOr<WindowResult> RunClosedLoop(
    const std::vector<v1::AttentionService::Stub*>& stubs, int concurrency,
    const v1::AttendRequest& request, const WindowSpec& window);

// Nearest-rank percentile (p in [0, 100]) of `values` (copied, sorted); 0 when
// empty.
double Percentile(std::vector<double> values, double p);
// Median with the mean of the two middle values for even sizes; 0 when empty.
double Median(std::vector<double> values);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_SERVER_BENCH_RPC_LOAD_H_
