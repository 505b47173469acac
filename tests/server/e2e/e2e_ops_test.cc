// Operating attnserve as a real process: overload and deadlines, graceful
// shutdown on real signals, /metrics over HTTP, health and reflection with the
// standard protos, TLS and mTLS, bearer tokens, message size limits and bad
// flags. Each test starts its own server with the flags it needs.
// Long because each operational behaviour needs its own server and a few
// lines of set-up; the shared harness is tests/util/server_process.h.

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

// gtest's printer for grpc::Status (found by argument-dependent lookup).
namespace grpc {
static void PrintTo(const Status& status, std::ostream* os) {
  *os << "gRPC status " << static_cast<int>(status.error_code()) << " \""
      << status.error_message() << "\"";
}
}  // namespace grpc

namespace attnserve {
namespace {

using ::attnserve::testing::HttpGet;
using ::attnserve::testing::MetricValue;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::grpc::reflection::v1alpha::ServerReflection;
using ::grpc::reflection::v1alpha::ServerReflectionRequest;
using ::grpc::reflection::v1alpha::ServerReflectionResponse;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// Bounds every wait. Generous: the machine may be small, loaded and running
// ASan; the tests assert outcomes, never how long they took.
constexpr absl::Duration kPatience = absl::Seconds(60);
// --shutdown_grace of the shutdown tests, and how long their exit may take.
// A server exits as soon as its calls end, so a long grace costs a passing
// test nothing and leaves a loaded, sanitized build room to finish them.
constexpr absl::Duration kGrace = absl::Seconds(60);

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
::testing::Matcher<std::string> ConnectFailed() {
  return HasSubstr("failed to connect to all addresses");
}

// Refused by a server that is shutting down: its own answer while it drains,
// or the connection is refused once its listener is closed.
::testing::Matcher<std::string> RefusedWhileShuttingDown() {
  return AnyOf(HasSubstr("server is shutting down"), ConnectFailed());
}

// Self-attention over one batch element in f32, BHLD, Hq = Hkv, D = Dv: the
// tensors and the request that carries them. Lq = Lk > 8 without weights runs
// the flash kernel.
struct Problem {
  int64_t heads = 0, len = 0, dim = 0;
  TestTensor q, k, v;
  v1::AttendRequest request;

  static Problem Make(int64_t heads, int64_t len, int64_t dim, uint64_t seed,
                      const std::string& id) {
    Problem p;
    p.heads = heads;
    p.len = len;
    p.dim = dim;
    const std::vector<int64_t> shape = {1, heads, len, dim};
    p.q = TestTensor::Random(DType::kFloat32, shape, seed);
    p.k = TestTensor::Random(DType::kFloat32, shape, seed + 1);
    p.v = TestTensor::Random(DType::kFloat32, shape, seed + 2);
    p.request.set_request_id(id);
    ToWire(p.q, p.request.mutable_query());
    ToWire(p.k, p.request.mutable_key());
    ToWire(p.v, p.request.mutable_value());
    p.request.set_layout(v1::BHLD);
    return p;
  }

  int64_t OutputBytes() const { return heads * len * dim * 4; }
  // 2·B·Hq·Lq·Lk·(D + Dv) with D = Dv.
  double Flops() const { return 4.0 * heads * len * len * dim; }

  // Compares `output` with core's reference on `rows` evenly spaced query
  // rows of every head: an output row depends only on its query row, so the
  // check costs rows/len of the whole reference.
  void ExpectMatchesReference(const v1::Tensor& output, int64_t rows) const {
    ASSERT_EQ(output.dtype(), v1::FLOAT32);
    ASSERT_EQ(
        std::vector<int64_t>(output.shape().begin(), output.shape().end()),
        (std::vector<int64_t>{1, heads, len, dim}));
    ASSERT_EQ(output.data().size(), static_cast<size_t>(OutputBytes()));
    rows = std::min(rows, len);
    const int64_t stride = len / rows;
    int reported = 0;
    for (int64_t h = 0; h < heads; ++h) {
      TestTensor q_rows(DType::kFloat32, {1, 1, rows, dim});
      TestTensor k_head(DType::kFloat32, {1, 1, len, dim});
      TestTensor v_head(DType::kFloat32, {1, 1, len, dim});
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t x = 0; x < dim; ++x) {
          q_rows.Set(r * dim + x, q.at((h * len + r * stride) * dim + x));
        }
      }
      for (int64_t i = 0; i < len * dim; ++i) {
        k_head.Set(i, k.at(h * len * dim + i));
        v_head.Set(i, v.at(h * len * dim + i));
      }
      TestTensor expected(DType::kFloat32, {1, 1, rows, dim});
      AttentionInputs in;
      in.query = q_rows.view();
      in.key = k_head.view();
      in.value = v_head.view();
      ASSERT_TRUE(
          ReferenceAttention(in, {expected.mutable_view(), std::nullopt}).ok());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t x = 0; x < dim; ++x) {
          const int64_t at = (h * len + r * stride) * dim + x;
          float got;
          std::memcpy(&got, output.data().data() + 4 * at, 4);
          const float want = expected.at(r * dim + x);
          if (!(std::fabs(got - want) <= 1e-5f * (1 + std::fabs(want))) &&
              reported++ < 5) {
            ADD_FAILURE() << "head " << h << " row " << r * stride << " column "
                          << x << ": got " << got << ", expected " << want;
          }
        }
      }
    }
  }
};

// Holds a one-thread worker for about 1.5 s (about 4 s under a sanitizer,
// longer under load): long enough for a test to act while it computes. The
// cost is in Lq·Lk; a sanitizer makes the kernel about 10x slower, so its
// builds compute a quarter of it.
Problem SlowProblem(const std::string& id) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int64_t kLen = 24576;
#else
  constexpr int64_t kLen = 49152;
#endif
  return Problem::Make(1, kLen, 16, 101, id);
}

std::chrono::system_clock::time_point In(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

grpc::Status Attend(v1::AttentionService::Stub& stub,
                    const v1::AttendRequest& request,
                    v1::AttendResponse* response,
                    absl::Duration timeout = kPatience,
                    const std::string& authorization = "") {
  grpc::ClientContext context;
  context.set_deadline(In(timeout));
  if (!authorization.empty()) {
    context.AddMetadata("authorization", authorization);
  }
  return stub.Attend(&context, request, response);
}

// A small request that must succeed on a healthy server.
grpc::Status SmallAttend(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& authorization = "") {
  const Problem p = Problem::Make(2, 16, 8, 7, "small");
  auto stub = v1::AttentionService::NewStub(channel);
  v1::AttendResponse response;
  return Attend(*stub, p.request, &response, kPatience, authorization);
}

// Health/Check of `service`: the call's status and, when it is OK, the serving
// status (UNKNOWN otherwise).
std::pair<grpc::Status, HealthCheckResponse::ServingStatus> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  auto stub = Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(In(kPatience));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  return {status,
          status.ok() ? response.status() : HealthCheckResponse::UNKNOWN};
}

void ExpectServing(const std::shared_ptr<grpc::Channel>& channel,
                   const std::string& service) {
  SCOPED_TRACE(absl::StrCat("health of \"", service, "\""));
  const auto [status, serving] = CheckHealth(channel, service);
  EXPECT_THAT(status, GrpcOk());
  EXPECT_EQ(serving, HealthCheckResponse::SERVING);
}

// GET /metrics; a test failure and "" when it cannot.
std::string Scrape(const ServerProcess& server) {
  absl::StatusOr<std::string> body = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? *body : "";
}

// The value of `series` in `exposition`; a test failure and NaN when absent.
double Sample(const std::string& exposition, const std::string& series) {
  absl::StatusOr<double> value = MetricValue(exposition, series);
  EXPECT_TRUE(value.ok()) << value.status() << " in\n" << exposition;
  return value.ok() ? *value : std::numeric_limits<double>::quiet_NaN();
}

// Scrapes until `series` reaches `at_least`; a failure with the last scrape
// when it does not within kPatience.
::testing::AssertionResult AwaitSample(const ServerProcess& server,
                                       const std::string& series,
                                       double at_least) {
  const absl::Time deadline = absl::Now() + kPatience;
  std::string last;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> body =
        HttpGet(server.metrics_port(), "/metrics");
    if (body.ok()) {
      if (MetricValue(*body, series).value_or(-1) >= at_least) {
        return ::testing::AssertionSuccess();
      }
      last = *std::move(body);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return ::testing::AssertionFailure()
         << series << " did not reach " << at_least << "; last scrape:\n"
         << last << "\nlog:\n"
         << server.Log();
}

// Waits until the server's log contains `text`.
::testing::AssertionResult AwaitLog(const ServerProcess& server,
                                    const std::string& text) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    if (absl::StrContains(server.Log(), text)) {
      return ::testing::AssertionSuccess();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return ::testing::AssertionFailure() << "no \"" << text << "\" in the log:\n"
                                       << server.Log();
}

// Waits until health says NOT_SERVING or is refused: the server has begun
// draining (it flips health right before it refuses new calls).
::testing::AssertionResult AwaitDraining(
    const std::shared_ptr<grpc::Channel>& channel) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    const auto [status, serving] = CheckHealth(channel, "");
    if (!status.ok() || serving == HealthCheckResponse::NOT_SERVING) {
      return ::testing::AssertionSuccess();
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return ::testing::AssertionFailure() << "health still SERVING";
}

// The TCP ports `pid` listens on: its socket inodes (/proc/PID/fd) looked up in
// the LISTEN rows (state 0A) of /proc/PID/net/tcp and tcp6.
std::set<int> ListeningPorts(pid_t pid) {
  const std::string proc = absl::StrCat("/proc/", pid);
  std::set<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator(proc + "/fd")) {
    std::error_code error;
    const std::string target =
        std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && absl::StartsWith(target, "socket:[")) {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  std::set<int> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      // Fields: sl, local address, remote address, state, ..., inode (10th).
      const std::vector<std::string> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 10 || fields[3] != "0A" || !inodes.count(fields[9])) {
        continue;
      }
      int port = 0;
      const std::string& local = fields[1];
      if (absl::SimpleHexAtoi(local.substr(local.rfind(':') + 1), &port)) {
        ports.insert(port);
      }
    }
  }
  return ports;
}

// Unary Attend calls in flight at once, on gRPC's callback API.
class ConcurrentCalls {
 public:
  explicit ConcurrentCalls(v1::AttentionService::Stub* stub) : stub_(stub) {}
  // Cancels what still runs and waits for it: the callbacks refer to this.
  ~ConcurrentCalls() {
    for (Call* call : Snapshot()) call->context.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &ConcurrentCalls::AllDone));
  }
  ConcurrentCalls(const ConcurrentCalls&) = delete;
  ConcurrentCalls& operator=(const ConcurrentCalls&) = delete;

  // Starts a call; `request` must outlive it.
  void Start(const v1::AttendRequest& request,
             absl::Duration timeout = kPatience) {
    auto call = std::make_unique<Call>();
    call->context.set_deadline(In(timeout));
    Call* raw = call.get();
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(std::move(call));
    }
    stub_->async()->Attend(&raw->context, &request, &raw->response,
                           [this, raw](grpc::Status status) {
                             absl::MutexLock lock(&mu_);
                             raw->status = std::move(status);
                             ++done_;
                           });
  }

  // Waits until every started call is done; whether they all were in time.
  bool AwaitAll() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(this, &ConcurrentCalls::AllDone), kPatience);
  }

  int done() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  // Cancels a started call (its status arrives as for any other).
  void Cancel(int i) {
    Call* call;
    {
      absl::MutexLock lock(&mu_);
      call = calls_[i].get();
    }
    call->context.TryCancel();
  }
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
  };

  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ == static_cast<int>(calls_.size());
  }
  std::vector<Call*> Snapshot() const {
    absl::MutexLock lock(&mu_);
    std::vector<Call*> calls;
    for (const auto& call : calls_) calls.push_back(call.get());
    return calls;
  }

  v1::AttentionService::Stub* const stub_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---------------------------------------------------------------------------

TEST(E2eOverloadTest, RejectsBeyondMaxQueueAndStaysHealthy) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1", "--max_queue=2"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);
  // Tens of milliseconds each on one thread but only 1.5 MiB: the burst
  // arrives far faster than the worker drains it, and only 1 running + 2
  // queued fit.
  const Problem p = Problem::Make(2, 8192, 8, 1, "overload");
  constexpr int kCalls = 24;
  int ok = 0, exhausted = 0;
  {
    ConcurrentCalls calls(stub.get());
    for (int i = 0; i < kCalls; ++i) calls.Start(p.request);
    ASSERT_TRUE(calls.AwaitAll());
    int first_ok = -1;
    for (int i = 0; i < kCalls; ++i) {
      SCOPED_TRACE(absl::StrCat("call ", i));
      const grpc::Status status = calls.status(i);
      if (status.ok()) {
        ++ok;
        if (first_ok < 0) {
          first_ok = i;
          continue;
        }
        // Identical inputs on one engine: identical bytes.
        EXPECT_EQ(calls.response(i).output().data(),
                  calls.response(first_ok).output().data());
        continue;
      }
      ++exhausted;
      EXPECT_THAT(status, GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       HasSubstr("max_queue")));
    }
    EXPECT_GE(ok, 1);
    EXPECT_GE(exhausted, 1);
    if (first_ok >= 0) {
      p.ExpectMatchesReference(calls.response(first_ok).output(), 64);
    }
  }
  EXPECT_EQ(ok + exhausted, kCalls);

  ExpectServing(channel, "");
  EXPECT_THAT(SmallAttend(channel), GrpcOk());

  const std::string metrics = Scrape(**server);
  EXPECT_EQ(Sample(metrics, R"(attnserve_rejected_total{reason="queue_full"})"),
            exhausted);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_requests_total{code="RESOURCE_EXHAUSTED",method="Attend"})"),
      exhausted);
  EXPECT_EQ(
      Sample(metrics, R"(attnserve_requests_total{code="OK",method="Attend"})"),
      ok + 1);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_compute_duration_seconds_count{kernel="flash"})"),
      ok + 1);
  EXPECT_EQ(Sample(metrics, "attnserve_inflight_requests"), 0);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_depth"), 0);
}

// Calls queued or computing hold their request and response bytes against
// --max_inflight_bytes: a burst past it is refused naming the budget while the
// queue still has room, the server stays healthy, and the bytes come back.
TEST(E2eMemoryBudgetTest, RefusesPastTheBudgetAndReleasesEverything) {
  const Problem p = Problem::Make(2, 8192, 8, 1, "budget");
  // Request plus response, as the server counts them.
  const int64_t held =
      static_cast<int64_t>(p.request.ByteSizeLong()) + p.OutputBytes();
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1", "--max_queue=64",
       absl::StrCat("--max_inflight_bytes=", 3 * held - 1)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);
  constexpr int kCalls = 16;
  int ok = 0, exhausted = 0;
  {
    ConcurrentCalls calls(stub.get());
    for (int i = 0; i < kCalls; ++i) calls.Start(p.request);
    ASSERT_TRUE(calls.AwaitAll());
    for (int i = 0; i < kCalls; ++i) {
      SCOPED_TRACE(absl::StrCat("call ", i));
      const grpc::Status status = calls.status(i);
      if (status.ok()) {
        ++ok;
        continue;
      }
      ++exhausted;
      EXPECT_THAT(
          status,
          GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       AllOf(HasSubstr("memory budget: this call needs "),
                             HasSubstr("--max_inflight_bytes = "))));
    }
  }
  // Two calls' bytes fit, so at least the first ran; the burst of 16 cannot
  // all have fitted.
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(ok + exhausted, kCalls);
  ExpectServing(channel, "");
  EXPECT_THAT(SmallAttend(channel), GrpcOk());

  // The bytes go once gRPC is done sending each answer, which may be just
  // after the client has it.
  std::string metrics = Scrape(**server);
  const absl::Time give_up = absl::Now() + kPatience;
  while (Sample(metrics, R"(attnserve_inflight_bytes{state="used"})") != 0 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
    metrics = Scrape(**server);
  }
  EXPECT_EQ(
      Sample(metrics, R"(attnserve_rejected_total{reason="memory_budget"})"),
      exhausted);
  EXPECT_EQ(Sample(metrics, R"(attnserve_rejected_total{reason="queue_full"})"),
            0);
  EXPECT_EQ(Sample(metrics, R"(attnserve_inflight_bytes{state="used"})"), 0);
  EXPECT_EQ(Sample(metrics, R"(attnserve_inflight_bytes{state="free"})"),
            3 * held - 1);

  // A call larger than the whole budget can never run, and says so.
  v1::AttendResponse response;
  grpc::ClientContext context;
  const Problem big = Problem::Make(2, 8192 * 4, 8, 2, "too-big");
  EXPECT_THAT(stub->Attend(&context, big.request, &response),
              GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           HasSubstr("it can never fit")));
  EXPECT_THAT((*server)->Log(), HasSubstr("max_inflight_bytes="));
}

// Thousands of calls cancelled at random points — in the queue, computing,
// being answered — unary and streaming, from four threads: the server does
// not crash, holds nothing afterwards (no call in flight, nothing queued, no
// budget bytes), serves normally, and a second storm leaves its memory where
// the first did (the server keeps freed heap by design, so the first storm
// sets the working size; a leak would grow it again).
TEST(E2eCancellationStormTest, RandomCancelsLeaveNothingBehind) {
  auto server = ServerProcess::Start({"--workers=2", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);
  const Problem p = Problem::Make(4, 512, 32, 3, "storm");
  constexpr int kThreads = 4, kCallsPerThread = 400;
  std::atomic<int> cancelled{0}, finished{0};
  const auto storm = [&](uint64_t seed) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        base::SplitMix64 rng(seed + t);
        auto own = v1::AttentionService::NewStub(channel);
        for (int i = 0; i < kCallsPerThread; ++i) {
          // Deadlines from 0 to 8 ms: a call of this size computes in a few.
          grpc::ClientContext context;
          context.set_deadline(
              In(absl::Microseconds(static_cast<int64_t>(rng.Below(8000)))));
          grpc::Status status;
          if (i % 4 == 3) {
            // A stream of three messages, cut off by the deadline.
            auto stream = own->AttendStream(&context);
            for (int m = 0; m < 3; ++m) {
              if (!stream->Write(p.request)) break;
            }
            stream->WritesDone();
            v1::AttendResponse response;
            while (stream->Read(&response)) {
            }
            status = stream->Finish();
          } else {
            v1::AttendResponse response;
            status = own->Attend(&context, p.request, &response);
          }
          (status.ok() ? finished : cancelled)++;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  };
  // Waits until nothing is in flight, queued or reserved; the last scrape.
  const auto settle = [&] {
    const absl::Time deadline = absl::Now() + kPatience;
    std::string metrics = Scrape(**server);
    while (
        absl::Now() < deadline &&
        (Sample(metrics, "attnserve_inflight_requests") != 0 ||
         Sample(metrics, R"(attnserve_inflight_bytes{state="used"})") != 0)) {
      absl::SleepFor(absl::Milliseconds(50));
      metrics = Scrape(**server);
    }
    return metrics;
  };

  storm(100);
  settle();
  const int64_t after_first = (*server)->ResidentBytes();
  ASSERT_GT(after_first, 0);
  storm(200);
  const std::string metrics = settle();
  EXPECT_EQ(cancelled + finished, 2 * kThreads * kCallsPerThread);
  EXPECT_GT(cancelled.load(), 0) << "no call was cut off: this tests nothing";
  EXPECT_EQ(Sample(metrics, "attnserve_inflight_requests"), 0);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_depth"), 0);
  EXPECT_EQ(Sample(metrics, R"(attnserve_inflight_bytes{state="used"})"), 0);
  ExpectServing(channel, "");
  v1::AttendResponse response;
  EXPECT_THAT(Attend(*stub, p.request, &response, kPatience, ""), GrpcOk());
  p.ExpectMatchesReference(response.output(), 16);
  const int64_t after_second = (*server)->ResidentBytes();
  // Between storms the working size varies by a few MiB with how many calls
  // overlapped (measured 1.6-9 MB); a leak of the cancelled calls' requests
  // would be hundreds. Under AddressSanitizer freed memory waits in its
  // quarantine (256 MiB by default) before reuse, so RSS may grow by that much
  // without a leak; there LeakSanitizer checks the server's exit below.
#if defined(__SANITIZE_ADDRESS__)
  constexpr int64_t kSlack = int64_t{300} << 20;
#else
  constexpr int64_t kSlack = int64_t{48} << 20;
#endif
  std::fprintf(stderr,
               "storm: RSS %lld after the first storm, %lld after the second\n",
               static_cast<long long>(after_first),
               static_cast<long long>(after_second));
  EXPECT_LE(after_second, after_first + kSlack)
      << "RSS " << after_second << " bytes after the second storm, "
      << after_first << " after the first";
  // A clean exit (under ASan: with LeakSanitizer's check of the heap).
  (*server)->Kill(SIGTERM);
  absl::StatusOr<int> code = (*server)->WaitForExit(kPatience);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << (*server)->Log();
  EXPECT_EQ(*code, 0) << (*server)->Log();
}

TEST(E2eDeadlineTest, CallExpiringInTheQueueIsNeverComputed) {
  // The hurried call is small: without --inline_small_requests=false it
  // would run inline beside the busy worker instead of queueing.
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                      "--inline_small_requests=false"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);
  const Problem slow = SlowProblem("slow");
  const Problem hurried = Problem::Make(2, 16, 8, 5, "hurried");

  ConcurrentCalls calls(stub.get());
  calls.Start(slow.request);
  // The worker has taken the slow call from the queue: it is computing.
  ASSERT_TRUE(
      AwaitSample(**server, "attnserve_queue_duration_seconds_count", 1));
  v1::AttendResponse response;
  EXPECT_THAT(
      Attend(*stub, hurried.request, &response, absl::Milliseconds(300)),
      GrpcStatusIs(grpc::StatusCode::DEADLINE_EXCEEDED,
                   HasSubstr("Deadline Exceeded")));
  EXPECT_EQ(calls.done(), 0) << "the slow call ended before the deadline";
  ASSERT_TRUE(calls.AwaitAll());
  EXPECT_THAT(calls.status(0), GrpcOk());

  // The expired call is dropped from the queue (gRPC cancels it at its
  // deadline), never computed.
  ASSERT_TRUE(AwaitSample(**server,
                          R"(attnserve_rejected_total{reason="deadline"})", 1));
  const std::string metrics = Scrape(**server);
  EXPECT_EQ(Sample(metrics, R"(attnserve_rejected_total{reason="deadline"})"),
            1);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_compute_duration_seconds_count{kernel="flash"})"),
      1);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_duration_seconds_count"), 1);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_requests_total{code="DEADLINE_EXCEEDED",method="Attend"})"),
      1);
  EXPECT_EQ(
      Sample(metrics, R"(attnserve_requests_total{code="OK",method="Attend"})"),
      1);
  EXPECT_EQ(Sample(metrics, "attnserve_attention_flops_total"), slow.Flops());
}

// A call cancelled while queued is answered and gives back its budget bytes
// at once, not when the worker reaches it: the worker is still computing the
// call ahead of it, and the cancelled one is never computed.
TEST(E2eDeadlineTest, CallCancelledInTheQueueFreesItsBytesAtOnce) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::AttentionService::NewStub((*server)->Channel());
  const Problem slow = SlowProblem("slow");
  const Problem queued = SlowProblem("queued");
  const std::string used = R"(attnserve_inflight_bytes{state="used"})";

  ConcurrentCalls calls(stub.get());
  calls.Start(slow.request);
  ASSERT_TRUE(
      AwaitSample(**server, "attnserve_queue_duration_seconds_count", 1));
  const double slow_bytes = testing::MetricSample(**server, used);
  ASSERT_GT(slow_bytes, 0);
  calls.Start(queued.request);
  ASSERT_TRUE(AwaitSample(**server, "attnserve_queue_depth", 1));
  ASSERT_GE(testing::MetricSample(**server, used), 2 * slow_bytes - 1);

  calls.Cancel(1);
  EXPECT_LE(testing::AwaitMetricAtMost(**server, used, slow_bytes), slow_bytes);
  EXPECT_EQ(testing::MetricSample(**server, "attnserve_queue_depth"), 0);
  EXPECT_EQ(calls.done(), 1) << "the slow call ended before the cancel";
  EXPECT_EQ(testing::MetricSample(
                **server, R"(attnserve_rejected_total{reason="cancelled"})"),
            1);
  ASSERT_TRUE(calls.AwaitAll());
  EXPECT_THAT(calls.status(0), GrpcOk());
  EXPECT_EQ(calls.status(1).error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(testing::MetricSample(
                **server,
                R"(attnserve_compute_duration_seconds_count{kernel="flash"})"),
            1);
}

TEST(E2eShutdownTest, SigtermFinishesInFlightCallsAndRefusesNewOnes) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       absl::StrCat("--shutdown_grace=", absl::FormatDuration(kGrace))});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);
  // One call computes for a while, two more wait behind it.
  const Problem slow = SlowProblem("slow");
  const Problem queued = Problem::Make(1, 8192, 16, 11, "queued");
  constexpr int kInFlight = 3;
  ConcurrentCalls calls(stub.get());
  calls.Start(slow.request);
  ASSERT_TRUE(
      AwaitSample(**server, "attnserve_queue_duration_seconds_count", 1));
  for (int i = 1; i < kInFlight; ++i) calls.Start(queued.request);
  ASSERT_TRUE(AwaitSample(**server, "attnserve_inflight_requests", kInFlight));

  const absl::Time signalled = absl::Now();
  (*server)->Kill(SIGTERM);
  ASSERT_TRUE(AwaitLog(**server, "received SIGTERM"));
  ASSERT_TRUE(AwaitDraining(channel));
  // The calls were still in flight while the server drained.
  EXPECT_EQ(calls.done(), 0);

  // New calls, on the open channel and on a new one.
  v1::AttendResponse response;
  EXPECT_THAT(
      Attend(*stub, queued.request, &response),
      GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, RefusedWhileShuttingDown()));
  EXPECT_THAT(
      SmallAttend((*server)->Channel()),
      GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, RefusedWhileShuttingDown()));

  ASSERT_TRUE(calls.AwaitAll());
  for (int i = 0; i < kInFlight; ++i) {
    EXPECT_THAT(calls.status(i), GrpcOk()) << "call " << i;
    EXPECT_EQ(calls.response(i).output().data().size(),
              static_cast<size_t>((i == 0 ? slow : queued).OutputBytes()));
  }
  absl::StatusOr<int> exit_code =
      (*server)->WaitForExit(kGrace - (absl::Now() - signalled));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << (*server)->Log();
  EXPECT_EQ(*exit_code, 0);
  EXPECT_THAT((*server)->Log(), HasSubstr("received SIGTERM, draining"));
}

TEST(E2eShutdownTest, SigintExitsCleanly) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       absl::StrCat("--shutdown_grace=", absl::FormatDuration(kGrace))});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(SmallAttend((*server)->Channel()), GrpcOk());
  (*server)->Kill(SIGINT);
  absl::StatusOr<int> exit_code = (*server)->WaitForExit(kGrace);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << (*server)->Log();
  EXPECT_EQ(*exit_code, 0);
  EXPECT_THAT((*server)->Log(), HasSubstr("received SIGINT"));
}

// Regression: an open Health/Watch stream (gRPC client-side health checking,
// service meshes) never ends by itself, and shutdown waited for it until the
// grace ran out, then cancelled it; the process exited after the grace.
TEST(E2eShutdownTest, OpenHealthWatchDoesNotHoldShutdownForTheGrace) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       absl::StrCat("--shutdown_grace=", absl::FormatDuration(kGrace))});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Health::NewStub((*server)->Channel());
  grpc::ClientContext context;
  context.set_deadline(In(kPatience));
  auto watch = stub->Watch(&context, HealthCheckRequest());
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  const absl::Time signalled = absl::Now();
  (*server)->Kill(SIGTERM);
  EXPECT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  absl::StatusOr<int> exit_code =
      (*server)->WaitForExit(kGrace - (absl::Now() - signalled));
  EXPECT_TRUE(exit_code.ok())
      << exit_code.status() << " within the " << kGrace << " grace\n"
      << (*server)->Log();
  if (exit_code.ok()) {
    EXPECT_EQ(*exit_code, 0);
  }
  context.TryCancel();
  while (watch->Read(&update)) {
  }
  watch->Finish();
}

TEST(E2eMetricsTest, CountsKnownTrafficExactly) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::AttentionService::NewStub((*server)->Channel());

  constexpr int kOk = 3, kInvalid = 2;
  const Problem p = Problem::Make(2, 64, 16, 21, "metrics");
  double request_bytes = 0, response_bytes = 0;
  for (int i = 0; i < kOk; ++i) {
    v1::AttendResponse response;
    ASSERT_THAT(Attend(*stub, p.request, &response), GrpcOk());
    request_bytes += p.request.ByteSizeLong();
    response_bytes += response.ByteSizeLong();
  }
  v1::AttendRequest invalid = p.request;
  invalid.mutable_value()->mutable_data()->pop_back();
  for (int i = 0; i < kInvalid; ++i) {
    v1::AttendResponse response;
    EXPECT_THAT(
        Attend(*stub, invalid, &response),
        GrpcStatusIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("value")));
    request_bytes += invalid.ByteSizeLong();
  }
  v1::ServerInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(In(kPatience));
    ASSERT_THAT(
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
        GrpcOk());
    response_bytes += info.ByteSizeLong();
  }

  const std::string metrics = Scrape(**server);
  for (const char* family :
       {"attnserve_requests_total", "attnserve_request_duration_seconds",
        "attnserve_queue_duration_seconds",
        "attnserve_compute_duration_seconds", "attnserve_inflight_requests",
        "attnserve_queue_depth", "attnserve_request_bytes_total",
        "attnserve_response_bytes_total", "attnserve_attention_flops_total",
        "attnserve_build_info", "attnserve_rejected_total"}) {
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("\n# TYPE ", family, " ")))
        << family;
  }
  EXPECT_EQ(
      Sample(metrics, R"(attnserve_requests_total{code="OK",method="Attend"})"),
      kOk);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_requests_total{code="INVALID_ARGUMENT",method="Attend"})"),
      kInvalid);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_requests_total{code="OK",method="GetServerInfo"})"),
      1);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_requests_total{code="OK",method="AttendStream"})"),
      0);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_request_duration_seconds_count{method="Attend"})"),
      kOk + kInvalid);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_request_duration_seconds_count{method="GetServerInfo"})"),
      1);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_duration_seconds_count"), kOk);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_compute_duration_seconds_count{kernel="flash"})"),
      kOk);
  EXPECT_EQ(
      Sample(metrics,
             R"(attnserve_compute_duration_seconds_count{kernel="decode"})"),
      0);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_compute_duration_seconds_count{kernel="materialized"})"),
      0);
  EXPECT_EQ(Sample(metrics, "attnserve_attention_flops_total"),
            kOk * p.Flops());
  EXPECT_EQ(Sample(metrics, "attnserve_request_bytes_total"), request_bytes);
  // The server also counts the small bodies of failed calls, which gRPC
  // never sends.
  EXPECT_GE(Sample(metrics, "attnserve_response_bytes_total"), response_bytes);
  EXPECT_GE(response_bytes, kOk * p.OutputBytes());
  EXPECT_EQ(Sample(metrics, "attnserve_inflight_requests"), 0);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_depth"), 0);
  for (const char* reason :
       {"queue_full", "deadline", "cancelled", "shutdown"}) {
    EXPECT_EQ(Sample(metrics, absl::StrCat("attnserve_rejected_total{reason=\"",
                                           reason, "\"}")),
              0)
        << reason;
  }

  // One series, value 1, labelled like GetServerInfo.
  std::vector<std::string> build_info;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, "attnserve_build_info{")) {
      build_info.emplace_back(line);
    }
  }
  ASSERT_EQ(build_info.size(), 1u) << metrics;
  EXPECT_THAT(
      build_info[0],
      AllOf(HasSubstr(absl::StrCat("version=\"", info.version(), "\"")),
            HasSubstr(absl::StrCat("onednn=\"", info.onednn_version(), "\"")),
            HasSubstr(absl::StrCat("isa=\"", info.isa(), "\"")),
            ::testing::EndsWith("} 1")));
  EXPECT_EQ(info.onednn_version(), OneDnnVersion());

  // The process listens on exactly the two ports it logged.
  EXPECT_EQ(ListeningPorts((*server)->pid()),
            (std::set<int>{(*server)->port(), (*server)->metrics_port()}));
}

// Disabled means no socket at all: the process's listening TCP sockets are read
// from /proc (see ListeningPorts), and only the gRPC one is there.
TEST(E2eMetricsTest, EmptyMetricsListenServesNoMetrics) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1", "--metrics_listen="});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
  EXPECT_THAT((*server)->Log(), HasSubstr("metrics_listen=(disabled)"));
  EXPECT_THAT(SmallAttend((*server)->Channel()), GrpcOk());
  EXPECT_EQ(ListeningPorts((*server)->pid()), std::set<int>{(*server)->port()});
}

TEST(E2eHealthTest, ServingUntilSigtermThenNotServing) {
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       absl::StrCat("--shutdown_grace=", absl::FormatDuration(kGrace))});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  ExpectServing(channel, "");
  ExpectServing(channel, "attnserve.v1.AttentionService");
  EXPECT_THAT(CheckHealth(channel, "no.such.Service").first,
              GrpcStatusIs(grpc::StatusCode::NOT_FOUND,
                           HasSubstr("service name unknown")));

  // One slow call keeps the server in its grace period.
  auto stub = v1::AttentionService::NewStub(channel);
  const Problem slow = SlowProblem("slow");
  ConcurrentCalls calls(stub.get());
  calls.Start(slow.request);
  ASSERT_TRUE(
      AwaitSample(**server, "attnserve_queue_duration_seconds_count", 1));
  const absl::Time signalled = absl::Now();
  (*server)->Kill(SIGTERM);
  ASSERT_TRUE(AwaitLog(**server, "received SIGTERM"));

  for (const std::string service : {"", "attnserve.v1.AttentionService"}) {
    SCOPED_TRACE(absl::StrCat("health of \"", service, "\""));
    const auto [status, serving] = CheckHealth(channel, service);
    if (status.ok()) {
      EXPECT_EQ(serving, HealthCheckResponse::NOT_SERVING);
    } else {
      EXPECT_THAT(status, GrpcStatusIs(grpc::StatusCode::UNAVAILABLE,
                                       RefusedWhileShuttingDown()));
    }
  }
  EXPECT_EQ(calls.done(), 0) << "the slow call ended before the checks";

  ASSERT_TRUE(calls.AwaitAll());
  EXPECT_THAT(calls.status(0), GrpcOk());
  absl::StatusOr<int> exit_code =
      (*server)->WaitForExit(kGrace - (absl::Now() - signalled));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << (*server)->Log();
  EXPECT_EQ(*exit_code, 0);
}

TEST(E2eReflectionTest, ListsServicesAndDescribesTheApi) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = ServerReflection::NewStub((*server)->Channel());
  grpc::ClientContext context;
  context.set_deadline(In(kPatience));
  auto stream = stub->ServerReflectionInfo(&context);

  ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  ASSERT_TRUE(listed.has_list_services_response()) << listed.DebugString();
  std::vector<std::string> names;
  for (const auto& service : listed.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_THAT(names, IsSupersetOf({"attnserve.v1.AttentionService",
                                   "grpc.health.v1.Health"}));

  ServerReflectionRequest by_symbol;
  by_symbol.set_file_containing_symbol("attnserve.v1.AttentionService");
  ASSERT_TRUE(stream->Write(by_symbol));
  ServerReflectionResponse files;
  ASSERT_TRUE(stream->Read(&files));
  ASSERT_TRUE(files.has_file_descriptor_response()) << files.DebugString();
  int found = 0;
  for (const std::string& bytes :
       files.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.package() != "attnserve.v1") continue;
    for (const auto& service : file.service()) {
      if (service.name() != "AttentionService") continue;
      ++found;
      std::vector<std::string> methods;
      for (const auto& method : service.method()) {
        methods.push_back(method.name());
      }
      EXPECT_THAT(methods,
                  ::testing::UnorderedElementsAre(
                      "Attend", "AttendStream", "GetServerInfo", "AttendModel",
                      "AttendModelStream", "AttendPieces"));
    }
  }
  EXPECT_EQ(found, 1);

  ServerReflectionRequest unknown;
  unknown.set_file_containing_symbol("attnserve.v1.NoSuchService");
  ASSERT_TRUE(stream->Write(unknown));
  ServerReflectionResponse error;
  ASSERT_TRUE(stream->Read(&error));
  ASSERT_TRUE(error.has_error_response()) << error.DebugString();
  EXPECT_EQ(error.error_response().error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(stream->WritesDone());
  EXPECT_THAT(stream->Finish(), GrpcOk());
}

// A CA, a server certificate for 127.0.0.1 and localhost, a client certificate
// it signed and a self-signed ("rogue") one, made with the openssl CLI once for
// the suite.
class E2eTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    setup_error_ = new std::string(MakeCertificates());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete setup_error_;
  }
  void SetUp() override { ASSERT_EQ(*setup_error_, ""); }

  // Trusting the CA; presenting `client`.pem when `client` is not empty.
  static std::shared_ptr<grpc::ChannelCredentials> TlsCredentials(
      const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = dir_->Read("ca.pem");
    if (!client.empty()) {
      ssl.pem_private_key = dir_->Read(client + ".key");
      ssl.pem_cert_chain = dir_->Read(client + ".pem");
    }
    return grpc::SslCredentials(ssl);
  }

  static TempDir* dir_;
  static std::string* setup_error_;

 private:
  // "" on success, else what failed and openssl's output.
  static std::string MakeCertificates() {
    if (!dir_->ok()) return "cannot create a temporary directory";
    if (std::system("openssl version >/dev/null 2>&1") != 0) {
      return "the openssl command-line tool is missing; "
             "scripts/install-deps.sh installs it";
    }
    dir_->Write("openssl.cnf", R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
)");
    const std::string cnf = dir_->Path("openssl.cnf");
    const std::string new_key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto path = [](const char* name) { return dir_->Path(name); };
    const std::vector<std::string> commands = {
        absl::StrCat("openssl req -x509 -config ", cnf, " -extensions ca ",
                     new_key, " -keyout ", path("ca.key"), " -out ",
                     path("ca.pem"), " -days 2 -subj '/CN=attnserve test CA'"),
        absl::StrCat("openssl req -new -config ", cnf, " ", new_key,
                     " -keyout ", path("server.key"), " -out ",
                     path("server.csr"), " -subj '/CN=localhost'"),
        absl::StrCat("openssl x509 -req -in ", path("server.csr"), " -CA ",
                     path("ca.pem"), " -CAkey ", path("ca.key"),
                     " -set_serial 2 -days 2 -extfile ", cnf,
                     " -extensions server -out ", path("server.pem")),
        absl::StrCat("openssl req -new -config ", cnf, " ", new_key,
                     " -keyout ", path("client.key"), " -out ",
                     path("client.csr"), " -subj '/CN=attnserve test client'"),
        absl::StrCat("openssl x509 -req -in ", path("client.csr"), " -CA ",
                     path("ca.pem"), " -CAkey ", path("ca.key"),
                     " -set_serial 3 -days 2 -extfile ", cnf,
                     " -extensions client -out ", path("client.pem")),
        absl::StrCat("openssl req -x509 -config ", cnf, " -extensions client ",
                     new_key, " -keyout ", path("rogue.key"), " -out ",
                     path("rogue.pem"), " -days 2 -subj '/CN=attnserve rogue'"),
    };
    const std::string log = path("openssl.log");
    for (const std::string& command : commands) {
      if (std::system(absl::StrCat(command, " >>", log, " 2>&1").c_str()) !=
          0) {
        return absl::StrCat("`", command, "` failed:\n",
                            dir_->Read("openssl.log"));
      }
    }
    return "";
  }
};

TempDir* E2eTlsTest::dir_ = nullptr;
std::string* E2eTlsTest::setup_error_ = nullptr;

TEST_F(E2eTlsTest, TlsServerAcceptsOnlyTlsClients) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                      "--tls_cert=" + dir_->Path("server.pem"),
                                      "--tls_key=" + dir_->Path("server.key")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("tls=on"));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials(""))), GrpcOk());
  EXPECT_THAT(SmallAttend((*server)->Channel()),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
}

TEST_F(E2eTlsTest, MutualTlsRequiresASignedClientCertificate) {
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            "--tls_cert=" + dir_->Path("server.pem"),
                            "--tls_key=" + dir_->Path("server.key"),
                            "--tls_client_ca=" + dir_->Path("ca.pem")});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("tls=mtls"));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials(""))),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials("rogue"))),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel()),
              GrpcStatusIs(grpc::StatusCode::UNAVAILABLE, ConnectFailed()));
  EXPECT_THAT(SmallAttend((*server)->Channel(TlsCredentials("client"))),
              GrpcOk());
}

TEST(E2eAuthTest, BearerTokenGuardsTheApiButNotHealth) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  dir.Write("token", "s3cret\n");
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            "--auth_token_file=" + dir.Path("token")});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();

  EXPECT_THAT(SmallAttend(channel),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("authorization")));
  EXPECT_THAT(SmallAttend(channel, "Bearer wrong"),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("invalid bearer token")));
  EXPECT_THAT(SmallAttend(channel, "s3cret"),
              GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                           HasSubstr("invalid bearer token")));
  EXPECT_THAT(SmallAttend(channel, "Bearer s3cret"), GrpcOk());
  {
    auto stub = v1::AttentionService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(In(kPatience));
    v1::ServerInfo info;
    EXPECT_THAT(
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
        GrpcStatusIs(grpc::StatusCode::UNAUTHENTICATED,
                     HasSubstr("authorization")));
  }
  ExpectServing(channel, "");
  ExpectServing(channel, "attnserve.v1.AttentionService");
}

TEST(E2eMessageLimitsTest, OversizedRequestsAndResponsesAreRefused) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            absl::StrCat("--max_request_bytes=", kMiB),
                            absl::StrCat("--max_response_bytes=", kMiB)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);

  // gRPC itself refuses the message: the service never sees it.
  const Problem big = Problem::Make(1, 2048, 88, 41, "big");
  ASSERT_GT(big.request.ByteSizeLong(), 2 * kMiB);
  v1::AttendResponse response;
  EXPECT_THAT(Attend(*stub, big.request, &response),
              GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           HasSubstr("larger than max")));

  // 96 KiB in, 4 MiB of weights out: refused before computing.
  Problem weights = Problem::Make(1, 1024, 8, 43, "weights");
  weights.request.set_return_weights(true);
  ASSERT_LT(weights.request.ByteSizeLong(), kMiB);
  EXPECT_THAT(Attend(*stub, weights.request, &response),
              GrpcStatusIs(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           HasSubstr("--max_response_bytes")));

  ExpectServing(channel, "");
  EXPECT_THAT(SmallAttend(channel), GrpcOk());
  const std::string metrics = Scrape(**server);
  EXPECT_EQ(
      Sample(
          metrics,
          R"(attnserve_requests_total{code="RESOURCE_EXHAUSTED",method="Attend"})"),
      1);
  EXPECT_EQ(
      Sample(metrics, R"(attnserve_requests_total{code="OK",method="Attend"})"),
      1);
  EXPECT_EQ(Sample(metrics, "attnserve_queue_duration_seconds_count"), 1);
}

// With --max_connection_age the server closes each connection after about
// that long (GOAWAY), so the client's channel leaves READY by itself and the
// next call reconnects; without it the connection stays up.
TEST(E2eConnectionAgeTest, ConnectionsAreClosedAfterTheirAgeAndCallsGoOn) {
  for (const bool aged : {true, false}) {
    SCOPED_TRACE(aged ? "--max_connection_age=300ms" : "no age");
    std::vector<std::string> args = {"--metrics_listen="};
    if (aged) args.push_back("--max_connection_age=300ms");
    auto server = ServerProcess::Start(args);
    ASSERT_TRUE(server.ok()) << server.status();
    if (aged) {
      EXPECT_THAT((*server)->Log(), HasSubstr("max_connection_age=300ms"));
    }
    auto channel = (*server)->Channel();
    auto stub = v1::AttentionService::NewStub(channel);
    for (int call = 0; call < 2; ++call) {
      grpc::ClientContext context;
      v1::ServerInfo info;
      ASSERT_TRUE(
          stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info)
              .ok());
      ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
      // Aged: GOAWAY within ~330 ms plus the grace; waiting 1.5 s without it
      // shows the connection would otherwise stay.
      const bool left_ready = channel->WaitForStateChange(
          GRPC_CHANNEL_READY,
          std::chrono::system_clock::now() +
              std::chrono::milliseconds(aged ? 10000 : 1500));
      EXPECT_EQ(left_ready, aged) << "call " << call;
      if (!aged) break;
    }
  }
}

TEST(E2eBadFlagsTest, ExitNonZeroWithAClearMessage) {
  struct Case {
    std::string flag;
    std::string fragment;
  };
  for (const Case& c : std::vector<Case>{
           {"--max_queue=-1", "max_queue: must be >= 0, got -1"},
           {"--workers=0", "workers: must be >= 1, got 0"},
           {"--listen=bogus", R"(cannot listen on "bogus" (--listen))"},
           {"--threads_per_worker=-2", "threads_per_worker: must be >= 0"},
           {"--max_isa=sse2",
            "--max_isa must be auto, amx, avx512, avx2, sve or neon"},
           {"--max_connection_age=-1s",
            "--max_connection_age must be 0 (off) or between 100ms and 24 "
            "days, got -1s"},
           {"--max_connection_age=720h",
            "--max_connection_age must be 0 (off) or between 100ms"},
       }) {
    SCOPED_TRACE(c.flag);
    // Without the metrics endpoint, whose teardown takes a second or two.
    auto server = ServerProcess::Start({c.flag, "--metrics_listen="});
    EXPECT_THAT(server.status(),
                StatusIs(absl::StatusCode::kInternal,
                         AllOf(ContainsRegex("exit code [1-9]"),
                               HasSubstr(c.fragment))));
  }
}

}  // namespace
}  // namespace attnserve
