#ifndef ATTNSERVE_TESTS_UTIL_SERVER_PROCESS_H_
#define ATTNSERVE_TESTS_UTIL_SERVER_PROCESS_H_

// A real attnserve process for end-to-end tests: started on ephemeral ports,
// its stderr captured, stopped with real signals.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tests/util/temp_dir.h"

namespace attnserve::testing {

class ServerProcess {
 public:
  // Runs the attnserve binary with `args` plus --listen=127.0.0.1:0 and
  // --metrics_listen=127.0.0.1:0 (unless args set them) and waits for its start
  // line. When the process exits instead, Internal with its exit code and whole
  // log.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> args = {});
  ~ServerProcess();  // SIGKILL when still running.

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // Where TCP step channels connect; 0 when the server has none.
  int step_channel_port() const { return step_channel_port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

  // A channel to the server with 512 MiB message limits.
  std::shared_ptr<grpc::Channel> Channel(
      std::shared_ptr<grpc::ChannelCredentials> credentials =
          grpc::InsecureChannelCredentials(),
      const grpc::ChannelArguments& extra = grpc::ChannelArguments()) const;

  // Sends `signal`.
  void Kill(int signal) const;
  // Waits for the process to exit; its exit code, or an error on timeout or
  // when it died from a signal. Once it has exited, Log() holds everything it
  // wrote.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);

  // The stderr lines so far.
  std::string Log() const;

  // The process's resident memory now (VmRSS) and its peak since start
  // (VmHWM), in bytes; -1 when /proc cannot be read (e.g. it has exited).
  int64_t ResidentBytes() const;
  int64_t PeakResidentBytes() const;

 private:
  ServerProcess() = default;
  void ReadLog(int fd);

  pid_t pid_ = -1;
  bool exited_ = false;
  int port_ = 0;
  int metrics_port_ = 0;
  int step_channel_port_ = 0;
  std::thread reader_;
  mutable absl::Mutex mu_;
  std::string log_ ABSL_GUARDED_BY(mu_);
};

// GET http://127.0.0.1:port/path over a plain socket; the body on 200.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// The value of `series` in a scrape of `server`'s /metrics: -1 when it
// cannot be scraped, 0 when the series is absent.
double MetricSample(const ServerProcess& server, const std::string& series);

// The server records a request's metrics just after answering it: scrapes
// until `series` reaches `at_least` (at most `patience`) and returns the last
// value.
double AwaitMetric(const ServerProcess& server, const std::string& series,
                   double at_least,
                   absl::Duration patience = absl::Seconds(10));

// The same for a series that falls: scrapes until `series` is at most
// `at_most` (e.g. attnserve_inflight_bytes{state="used"} back to 0: a call's
// bytes are released once gRPC is done sending its answer, which may be just
// after the client has it).
double AwaitMetricAtMost(const ServerProcess& server, const std::string& series,
                         double at_most,
                         absl::Duration patience = absl::Seconds(10));

// The value of the sample `series` (e.g.
// `attnserve_requests_total{code="OK",method="Attend"}`, labels in the
// exposition's order) in a Prometheus text exposition; NotFound if absent.
absl::StatusOr<double> MetricValue(const std::string& exposition,
                                   const std::string& series);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_SERVER_PROCESS_H_
