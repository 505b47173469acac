#ifndef ATTNSERVE_TESTS_SERVER_E2E_E2E_OPS_UTIL_H_
#define ATTNSERVE_TESTS_SERVER_E2E_E2E_OPS_UTIL_H_

// What the operational end-to-end suites share (e2e_drain_test.cc,
// e2e_limits_test.cc, e2e_security_test.cc, e2e_introspection_test.cc): gRPC
// status matchers, attention calls to send and check, calls in flight at once,
// health checks and /metrics scrapes of a real attnserve process
// (tests/util/server_process.h). Those suites sit in this namespace too, so
// they name the helpers as they are.

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"

// gtest's printer for grpc::Status (found by argument-dependent lookup).
namespace grpc {
inline void PrintTo(const Status& status, std::ostream* os) {
  *os << "gRPC status " << static_cast<int>(status.error_code()) << " \""
      << status.error_message() << "\"";
}
}  // namespace grpc

namespace attnserve::testing {

// Bounds every wait. Generous: the machine may be small, loaded and running
// ASan; the tests assert outcomes, never how long they took.
constexpr absl::Duration kPatience = absl::Seconds(60);

// A grpc::Status with exactly `code` and a message that matches.
MATCHER_P2(GrpcStatusIs, code, message_matcher,
           absl::StrCat("has gRPC code ", static_cast<int>(code),
                        " and a message that ",
                        ::testing::DescribeMatcher<std::string>(message_matcher,
                                                                negation))) {
  if (arg.error_code() != code) return false;
  return ::testing::ExplainMatchResult(message_matcher, arg.error_message(),
                                       result_listener);
}

MATCHER(GrpcOk, "is OK") { return arg.ok(); }

// gRPC's message when it could not set a connection up: refused, or closed
// during the TLS handshake.
::testing::Matcher<std::string> ConnectFailed();

// Self-attention over one batch element in f32, BHLD, Hq = Hkv, D = Dv: the
// tensors and the request that carries them. Lq = Lk > 8 without weights runs
// the flash kernel.
struct Problem {
  int64_t heads = 0, len = 0, dim = 0;
  TestTensor q, k, v;
  v1::AttendRequest request;

  static Problem Make(int64_t heads, int64_t len, int64_t dim, uint64_t seed,
                      const std::string& id);

  int64_t OutputBytes() const { return heads * len * dim * 4; }
  // 2·B·Hq·Lq·Lk·(D + Dv) with D = Dv.
  double Flops() const { return 4.0 * heads * len * len * dim; }

  // Compares `output` with core's reference on `rows` evenly spaced query
  // rows of every head: an output row depends only on its query row, so the
  // check costs rows/len of the whole reference.
  void ExpectMatchesReference(const v1::Tensor& output, int64_t rows) const;
};

// Holds a one-thread worker for about 1.5 s (about 4 s under a sanitizer,
// longer under load): long enough for a test to act while it computes. The
// cost is in Lq·Lk; a sanitizer makes the kernel about 10x slower, so its
// builds compute a quarter of it.
Problem SlowProblem(const std::string& id);

std::chrono::system_clock::time_point In(absl::Duration timeout);

grpc::Status Attend(v1::AttentionService::Stub& stub,
                    const v1::AttendRequest& request,
                    v1::AttendResponse* response,
                    absl::Duration timeout = kPatience,
                    const std::string& authorization = "");

// A small request that must succeed on a healthy server.
grpc::Status SmallAttend(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& authorization = "");

// Health/Check of `service`: the call's status and, when it is OK, the serving
// status (UNKNOWN otherwise).
std::pair<grpc::Status, grpc::health::v1::HealthCheckResponse::ServingStatus>
CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
            const std::string& service);

void ExpectServing(const std::shared_ptr<grpc::Channel>& channel,
                   const std::string& service);

// GET /metrics; a test failure and "" when it cannot.
std::string Scrape(const ServerProcess& server);

// The value of `series` in `exposition`; a test failure and NaN when absent.
double Sample(const std::string& exposition, const std::string& series);

// Scrapes until `series` reaches `at_least`; a failure with the last scrape
// when it does not within kPatience.
::testing::AssertionResult AwaitSample(const ServerProcess& server,
                                       const std::string& series,
                                       double at_least);

// Unary Attend calls in flight at once, on gRPC's callback API.
class ConcurrentCalls {
 public:
  explicit ConcurrentCalls(v1::AttentionService::Stub* stub) : stub_(stub) {}
  // Cancels what still runs and waits for it: the callbacks refer to this.
  ~ConcurrentCalls();
  ConcurrentCalls(const ConcurrentCalls&) = delete;
  ConcurrentCalls& operator=(const ConcurrentCalls&) = delete;

  // Starts a call; `request` must outlive it.
  void Start(const v1::AttendRequest& request,
             absl::Duration timeout = kPatience);

  // Waits until every started call is done; whether they all were in time.
  bool AwaitAll();

  int done() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  // Whether call i has its status (it arrives after the server has let go of
  // the call, e.g. after the server's metrics show a cancelled call gone).
  bool finished(int i) const {
    absl::MutexLock lock(&mu_);
    return calls_[i]->finished;
  }
  // Waits until call i has its status; whether it came in time.
  bool AwaitFinished(int i);
  // Cancels a started call (its status arrives as for any other).
  void Cancel(int i);
  // Of a finished call.
  grpc::Status status(int i) const {
    absl::MutexLock lock(&mu_);
    return calls_[i]->status;
  }
  const v1::AttendResponse& response(int i) const {
    absl::MutexLock lock(&mu_);
    return calls_[i]->response;
  }

 private:
  struct Call {
    grpc::ClientContext context;
    v1::AttendResponse response;
    grpc::Status status;
    bool finished = false;
  };

  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ == static_cast<int>(calls_.size());
  }
  std::vector<Call*> Snapshot() const;

  v1::AttentionService::Stub* const stub_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_SERVER_E2E_E2E_OPS_UTIL_H_
