// Fault tests that take a real attnserve process past its capacity and hold
// it there: an overload of large calls against a small memory budget, and a
// long soak at a steady share of capacity. Each runs for a fixed time (20 s,
// 60 s) and alone (RUN_SERIAL), in the Release build only: under ASan the
// memory and latency figures they check are the sanitizer's, not the
// server's. scripts/soak.sh runs the soak for as long as asked
// (ATTNSERVE_SOAK_SECONDS).

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"
#include "wire/attend_call.h"
#include "wire/transport.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AwaitMetric;
using ::attnserve::testing::AwaitMetricAtMost;
using ::attnserve::testing::MetricSample;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr char kAttendMethod[] = "/attnserve.v1.AttentionService/Attend";

std::chrono::system_clock::time_point In(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// A channel of its own connection (wire::ClientChannelArguments with its
// own key): the health checks must not queue behind the load's large
// messages on the same connection.
std::shared_ptr<grpc::Channel> OwnChannel(const ServerProcess& server,
                                          const std::string& key) {
  return grpc::CreateCustomChannel(
      server.target(), grpc::InsecureChannelCredentials(),
      wire::ClientChannelArguments(int64_t{512} << 20, key));
}

// A blocking generic Attend of one message (`request`, serialized); the
// response's bytes in `response`.
grpc::Status CallAttendUnary(grpc::GenericStub& stub,
                             const grpc::ByteBuffer& request,
                             grpc::ByteBuffer* response,
                             absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(In(timeout));
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&context, kAttendMethod, grpc::StubOptions(), &request,
                 response, [&](grpc::Status status) {
                   std::lock_guard<std::mutex> lock(mu);
                   result = std::move(status);
                   done = true;
                   done_cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return done; });
  return result;
}

// The q-th quantile (0..1) of `values`; 0 when empty.
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t at = static_cast<size_t>(
      std::min<double>(values.size() - 1, std::ceil(q * values.size()) - 1));
  return values[at];
}

// f32 BHLD self- or cross-attention of one batch element.
struct Shape {
  int64_t heads, lq, lk, dim;
  bool causal = false;
};

v1::AttendRequest MakeRequest(const Shape& s, uint64_t seed,
                              TestTensor* q = nullptr, TestTensor* k = nullptr,
                              TestTensor* v = nullptr) {
  TestTensor tq =
      TestTensor::Random(DType::kFloat32, {1, s.heads, s.lq, s.dim}, seed);
  TestTensor tk =
      TestTensor::Random(DType::kFloat32, {1, s.heads, s.lk, s.dim}, seed + 1);
  TestTensor tv =
      TestTensor::Random(DType::kFloat32, {1, s.heads, s.lk, s.dim}, seed + 2);
  v1::AttendRequest request;
  request.set_layout(v1::BHLD);
  ToWire(tq, request.mutable_query());
  ToWire(tk, request.mutable_key());
  ToWire(tv, request.mutable_value());
  request.mutable_mask()->set_causal(s.causal);
  if (q != nullptr) *q = std::move(tq);
  if (k != nullptr) *k = std::move(tk);
  if (v != nullptr) *v = std::move(tv);
  return request;
}

// A small call whose answer is checked against core's reference: the server
// serves correctly. Empty on success, else what went wrong.
std::string CheckedSmallCall(const std::shared_ptr<grpc::Channel>& channel) {
  TestTensor q, k, v;
  const v1::AttendRequest request =
      MakeRequest({4, 64, 64, 32, true}, 11, &q, &k, &v);
  auto stub = v1::AttentionService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(In(absl::Seconds(30)));
  v1::AttendResponse response;
  const grpc::Status status = stub->Attend(&context, request, &response);
  if (!status.ok()) {
    return absl::StrCat("code ", status.error_code(), ": ",
                        status.error_message());
  }
  TestTensor expected(DType::kFloat32, {1, 4, 64, 32});
  AttentionInputs in;
  in.query = q.view();
  in.key = k.view();
  in.value = v.view();
  in.mask.causal = true;
  if (!ReferenceAttention(in, {expected.mutable_view(), std::nullopt}).ok()) {
    return "reference failed";
  }
  const std::string& got = response.output().data();
  if (got.size() != static_cast<size_t>(expected.size()) * 4) {
    return absl::StrCat("output of ", got.size(), " bytes");
  }
  for (int64_t i = 0; i < expected.size(); ++i) {
    float value;
    std::memcpy(&value, got.data() + 4 * i, 4);
    if (!(std::fabs(value - expected.at(i)) <=
          1e-5f * (1 + std::fabs(value)))) {
      return absl::StrCat("element ", i, ": ", value, " vs ", expected.at(i));
    }
  }
  return "";
}

// Health/Check of the whole server: empty when answered SERVING within
// `timeout`, else what happened.
std::string NotServing(Health::Stub& health, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(In(timeout));
  HealthCheckResponse response;
  const grpc::Status status =
      health.Check(&context, HealthCheckRequest(), &response);
  if (!status.ok()) {
    return absl::StrCat("code ", status.error_code(), ": ",
                        status.error_message());
  }
  if (response.status() != HealthCheckResponse::SERVING) {
    return absl::StrCat("status ", response.status());
  }
  return "";
}

// Samples the server's RSS every `period` until stopped.
class RssSampler {
 public:
  RssSampler(const ServerProcess& server, absl::Duration period)
      : thread_([this, &server, period] {
          const absl::Time start = absl::Now();
          while (!stop_.load()) {
            const int64_t rss = server.ResidentBytes();
            {
              std::lock_guard<std::mutex> lock(mu_);
              samples_.push_back(
                  {absl::ToDoubleSeconds(absl::Now() - start), rss});
            }
            absl::SleepFor(period);
          }
        }) {}
  ~RssSampler() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // (seconds since start, bytes).
  std::vector<std::pair<double, int64_t>> samples() {
    std::lock_guard<std::mutex> lock(mu_);
    return samples_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<double, int64_t>> samples_;
  std::thread thread_;
};

// Callers send 100 MiB calls in a closed loop for 20 s to a server whose
// budget (1 GiB) holds nine of them: far past 2x what it can admit, over two
// shared connections and many connections of their own, the way attnserve's
// clients send them (in pieces, AttendPieces), and one caller as one message
// past the message limit. The server
// stays within the idle RSS + the budget + 512 MiB (the transport's quota of
// 256 MiB and what the heap keeps around it), answers every call OK or
// RESOURCE_EXHAUSTED, answers health throughout, holds nothing once the load
// stops and serves correctly right after.
TEST(E2eOverloadTest, LargeCallsPastTheBudgetHoldMemoryAndHealth) {
  constexpr int64_t kBudget = 1024 * kMiB;
  constexpr int64_t kOverhead = 512 * kMiB;
  constexpr int kSharedConnections = 2;
  constexpr int kSharedCallers = 32;  // over the two shared connections
  constexpr int kOwnCallers = 16;     // a connection each
  // A client that ignores the message limit and sends the whole request as
  // one message (refused RESOURCE_EXHAUSTED once received; many such clients
  // at once fill the transport's quota, docs/operations.md).
  constexpr int kUnaryCallers = 1;
  constexpr absl::Duration kLoad = absl::Seconds(20);
  // One worker of one thread: the kernels take one core, the other is left
  // to gRPC and this process's callers and health checks (with both cores
  // computing, a health check on a slow CI machine once waited past its 5 s).
  // Every other setting is the default.
  auto server =
      ServerProcess::Start({absl::StrCat("--max_inflight_bytes=", kBudget),
                            "--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::shared_ptr<grpc::Channel>> shared_channels;
  for (int c = 0; c < kSharedConnections; ++c) {
    shared_channels.push_back(OwnChannel(**server, absl::StrCat("shared-", c)));
  }
  auto health_channel = OwnChannel(**server, "health");
  ASSERT_EQ(CheckedSmallCall(health_channel), "");
  const int64_t idle_rss = (*server)->ResidentBytes();
  ASSERT_GT(idle_rss, 0);

  // q 4 MiB, k and v 48 MiB each, 4 MiB out: 100 MiB of request. About 52
  // GFLOP each, so a worker needs several times as long to compute a call
  // as the transport needs to deliver one (0.3-0.4 s against 60 ms here):
  // the callers fill the queue past the budget on any CPU whose f32 GEMM is
  // within a few times this one's.
  const Shape big{16, 1024, 12288, 64};
  const std::string request = MakeRequest(big, 3).SerializeAsString();
  const int64_t request_bytes = static_cast<int64_t>(request.size());
  ASSERT_GE(request_bytes, 96 * kMiB);
  grpc::Slice unary_slice(request);
  const grpc::ByteBuffer unary_request(&unary_slice, 1);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> ok{0}, exhausted{0};
  std::mutex mu;
  std::vector<double> ok_seconds;
  std::map<std::string, int> other;  // "code: message" of anything else
  std::map<std::string, int> exhausted_messages;
  auto record = [&](const grpc::Status& status, double seconds,
                    const char* kind) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) {
      ++ok;
      ok_seconds.push_back(seconds);
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      ++exhausted_messages[status.error_message()];
    } else {
      ++other[absl::StrCat(kind, ": ", status.error_code(), ": ",
                           status.error_message())];
    }
  };
  std::vector<std::thread> callers;
  for (int c = 0; c < kSharedCallers + kOwnCallers; ++c) {
    callers.emplace_back([&, c] {
      auto stub = v1::AttentionService::NewStub(
          c < kSharedCallers ? shared_channels[c % kSharedConnections]
                             : OwnChannel(**server, absl::StrCat("own-", c)));
      while (!stop.load()) {
        grpc::ClientContext context;
        context.set_deadline(In(absl::Seconds(120)));
        v1::AttendResponse response;
        const absl::Time start = absl::Now();
        const grpc::Status status =
            wire::CallAttendInPieces(*stub, &context, request, &response);
        record(status, absl::ToDoubleSeconds(absl::Now() - start), "in pieces");
      }
    });
  }
  std::atomic<int64_t> unary_calls{0};
  for (int c = 0; c < kUnaryCallers; ++c) {
    callers.emplace_back([&, c] {
      grpc::GenericStub stub(OwnChannel(**server, absl::StrCat("unary-", c)));
      while (!stop.load()) {
        grpc::ByteBuffer response;
        const grpc::Status status =
            CallAttendUnary(stub, unary_request, &response, absl::Seconds(120));
        ++unary_calls;
        record(status, 0, "one message");
      }
    });
  }
  // Health every 200 ms on its own connection, each answered within 5 s.
  std::atomic<int> health_checks{0}, health_failures{0};
  std::vector<std::string> health_errors;  // the health thread's own
  std::thread health_thread([&] {
    auto health = Health::NewStub(health_channel);
    while (!stop.load()) {
      ++health_checks;
      const std::string error = NotServing(*health, absl::Seconds(5));
      if (!error.empty()) {
        ++health_failures;
        health_errors.push_back(error);
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  });
  RssSampler rss(**server, absl::Milliseconds(20));

  absl::SleepFor(kLoad);
  const absl::Time load_end = absl::Now();
  stop.store(true);
  for (std::thread& t : callers) t.join();
  health_thread.join();
  const absl::Time drained = absl::Now();

  // Right after: nothing is held and a normal call is served correctly.
  const std::string after = CheckedSmallCall(health_channel);
  const absl::Time recovered = absl::Now();
  rss.Stop();
  EXPECT_EQ(after, "");
  EXPECT_EQ(AwaitMetricAtMost(**server,
                              R"(attnserve_inflight_bytes{state="used"})", 0),
            0);

  int64_t peak_sampled = 0;
  for (const auto& [t, bytes] : rss.samples()) {
    peak_sampled = std::max(peak_sampled, bytes);
  }
  const int64_t peak = (*server)->PeakResidentBytes();
  const int64_t allowed = idle_rss + kBudget + kOverhead;
  const int64_t calls = ok + exhausted;
  std::vector<double> served;
  {
    std::lock_guard<std::mutex> lock(mu);
    served = ok_seconds;
  }
  std::printf(
      "overload: %d callers in pieces (%d on %d connections, %d on their "
      "own) and %d in one message, x %lld MiB for %.0f s, budget %lld MiB: "
      "%lld calls, %lld OK, %lld RESOURCE_EXHAUSTED (%.1f%%), p50/p99 of "
      "the served %.2f/%.2f s; peak RSS %lld MiB (sampled %lld MiB, idle "
      "%lld MiB, allowed %lld MiB); health %d/%d; the last calls ended %.2f "
      "s after the load stopped, a checked call then took %.3f s\n",
      kSharedCallers + kOwnCallers, kSharedCallers, kSharedConnections,
      kOwnCallers, kUnaryCallers, static_cast<long long>(request_bytes / kMiB),
      absl::ToDoubleSeconds(kLoad), static_cast<long long>(kBudget / kMiB),
      static_cast<long long>(calls), static_cast<long long>(ok.load()),
      static_cast<long long>(exhausted.load()),
      calls > 0 ? 100.0 * exhausted / calls : 0.0, Quantile(served, 0.5),
      Quantile(served, 0.99), static_cast<long long>(peak / kMiB),
      static_cast<long long>(peak_sampled / kMiB),
      static_cast<long long>(idle_rss / kMiB),
      static_cast<long long>(allowed / kMiB),
      health_checks.load() - health_failures.load(), health_checks.load(),
      absl::ToDoubleSeconds(drained - load_end),
      absl::ToDoubleSeconds(recovered - drained));

  for (const auto& [what, count] : exhausted_messages) {
    std::printf("  %d RESOURCE_EXHAUSTED: %s\n", count, what.c_str());
  }
  for (const auto& [what, count] : other) {
    ADD_FAILURE() << count << " calls ended neither OK nor "
                  << "RESOURCE_EXHAUSTED: " << what;
  }
  EXPECT_GT(ok, 0) << "nothing was served";
  EXPECT_GT(unary_calls, 0);
  const double budget_refused = MetricSample(
      **server, R"(attnserve_rejected_total{reason="memory_budget"})");
  EXPECT_GT(budget_refused, 0) << "the budget never refused: no overload";
  // Each RESOURCE_EXHAUSTED is the budget's, the message limit's (the calls
  // in one message), or gRPC's quota cancelling a stream it was receiving
  // (RST_STREAM code 11, ENHANCE_YOUR_CALM).
  int budget_messages = 0;
  for (const auto& [what, count] : exhausted_messages) {
    if (what.find("--max_inflight_bytes") != std::string::npos) {
      budget_messages += count;
    } else if (what.find("larger than max") == std::string::npos) {
      EXPECT_EQ(what, "Received RST_STREAM with error code 11");
    }
  }
  EXPECT_EQ(budget_refused, budget_messages);
  EXPECT_EQ(health_failures, 0)
      << "of " << health_checks << " health checks; first: "
      << (health_errors.empty() ? "" : health_errors[0]);
  EXPECT_GT(health_checks, 20);
  EXPECT_LE(peak, allowed) << "peak RSS " << peak / kMiB
                           << " MiB against a budget of " << kBudget / kMiB
                           << " MiB and an idle RSS of " << idle_rss / kMiB
                           << " MiB";
}

// A stopped client process (SIGSTOP: it reads nothing more, and its
// connection stays open, as a client stuck or gone without closing) whose
// answer is 64 MiB: the server finishes the call, keeps its budget bytes
// while the answer cannot be sent, cancels the call at --send_timeout,
// counts it, and holds nothing afterwards.
TEST(E2eSlowClientTest, AStoppedClientIsCancelledAtTheSendTimeout) {
  auto server = ServerProcess::Start({"--send_timeout=1s"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string used = R"(attnserve_inflight_bytes{state="used"})";
  // attnctl sends a request this large in pieces.
  const std::string answered =
      R"(attnserve_requests_total{code="OK",method="AttendPieces"})";
  const std::string target = (*server)->target();
  // q 64 MiB and a 64 MiB output; k and v 1 MiB. About 17 GFLOP, so the
  // call is still computing when the client is stopped.
  std::vector<std::string> args = {ATTNSERVE_ATTNCTL_BINARY,
                                   "infer",
                                   "--target=" + target,
                                   "--heads=16",
                                   "--lq=16384",
                                   "--lk=256",
                                   "--dim=64",
                                   "--timeout=120s"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t client = fork();
  ASSERT_GE(client, 0);
  if (client == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Stopped once the server computes the call (received whole, reserved,
  // out of the queue).
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (MetricSample(**server, "attnserve_queue_duration_seconds_count") < 1 &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(kill(client, SIGSTOP), 0);
  const double held = MetricSample(**server, used);
  EXPECT_GT(held, 128 * kMiB) << "request and response bytes";
  // The server answers (counted when handed to gRPC) but cannot send it
  // all: the bytes stay reserved.
  EXPECT_GE(AwaitMetric(**server, answered, 1, absl::Seconds(60)), 1);
  const absl::Time answered_at = absl::Now();
  EXPECT_GT(MetricSample(**server, used), 0)
      << "released before the answer was sent";
  // Then --send_timeout cancels it.
  EXPECT_GE(AwaitMetric(**server, "attnserve_send_timeouts_total", 1,
                        absl::Seconds(30)),
            1);
  EXPECT_EQ(AwaitMetricAtMost(**server, used, 0), 0);
  std::printf("slow client: %.0f MiB held, freed %.2f s after the answer\n",
              held / kMiB, absl::ToDoubleSeconds(absl::Now() - answered_at));
  kill(client, SIGKILL);
  int status = 0;
  waitpid(client, &status, 0);
  // The server serves on.
  EXPECT_EQ(CheckedSmallCall((*server)->Channel()), "");
}

// The soak's length: 60 s (30 s, three windows, in sanitized builds, which
// repeat the soak of the release build for what the sanitizers find), or
// ATTNSERVE_SOAK_SECONDS (scripts/soak.sh).
absl::Duration SoakLength() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kDefaultSeconds = 30;
#else
  constexpr int kDefaultSeconds = 60;
#endif
  const char* env = std::getenv("ATTNSERVE_SOAK_SECONDS");
  int seconds = kDefaultSeconds;
  if (env != nullptr && !absl::SimpleAtoi(env, &seconds)) seconds = -1;
  if (seconds < 20) {
    ADD_FAILURE() << "ATTNSERVE_SOAK_SECONDS must be a whole number >= 20";
    seconds = kDefaultSeconds;
  }
  return absl::Seconds(seconds);
}

// One shape of the soak's mix, its request and the first answer (the
// kernels are deterministic for a fixed thread count: every later answer of
// the same request must be the same bytes).
struct SoakCase {
  Shape shape;
  v1::AttendRequest request;
  std::string expected;
};

// Open-loop load at 70% of the capacity measured just before, over a mix of
// shapes (self and cross attention, causal, decode-like Lq = 1), for
// SoakLength():
// no call fails or changes its answer, RSS does not grow once warm, and each
// 10 s window's p99 stays within 2x of the first window's.
TEST(E2eSoakTest, SteadyLoadKeepsLatencyAndMemoryFlat) {
  const absl::Duration length = SoakLength();
  constexpr absl::Duration kWindow = absl::Seconds(10);
  // The decode-like shape is a 16 MiB message: past the default
  // --max_message_bytes, which one-message callers raise.
  auto server = ServerProcess::Start({"--max_message_bytes=32MiB"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = v1::AttentionService::NewStub(channel);

  std::vector<SoakCase> cases;
  for (const Shape& s : {Shape{8, 128, 128, 64}, Shape{4, 512, 512, 64, true},
                         Shape{2, 1024, 1024, 64, true}, Shape{16, 1, 2048, 64},
                         Shape{8, 256, 1024, 32}}) {
    SoakCase c{s, MakeRequest(s, 100 + cases.size()), ""};
    grpc::ClientContext context;
    context.set_deadline(In(absl::Seconds(30)));
    v1::AttendResponse response;
    const grpc::Status status = stub->Attend(&context, c.request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    c.expected = response.output().data();
    cases.push_back(std::move(c));
  }

  // Capacity: two closed-loop callers (the machine's two cores) for 4 s.
  std::atomic<int64_t> capacity_calls{0};
  {
    std::atomic<bool> stop{false};
    std::vector<std::thread> callers;
    for (int t = 0; t < 2; ++t) {
      callers.emplace_back([&, t] {
        for (size_t i = t; !stop.load(); ++i) {
          grpc::ClientContext context;
          context.set_deadline(In(absl::Seconds(30)));
          v1::AttendResponse response;
          if (stub->Attend(&context, cases[i % cases.size()].request, &response)
                  .ok()) {
            ++capacity_calls;
          }
        }
      });
    }
    absl::SleepFor(absl::Seconds(4));
    stop.store(true);
    for (std::thread& t : callers) t.join();
  }
  const double capacity = capacity_calls / 4.0;
  ASSERT_GT(capacity, 5) << "calls/s";
  const double rate = 0.7 * capacity;
  const absl::Duration interval = absl::Seconds(1) / rate;

  struct Call {
    grpc::ClientContext context;
    v1::AttendResponse response;
    absl::Time start;
    size_t which;
  };
  std::mutex mu;
  std::condition_variable all_done;
  int64_t outstanding = 0, sent = 0, failed = 0, wrong = 0;
  std::map<std::string, int> errors;
  std::vector<std::vector<double>> window_seconds;
  const absl::Time begin = absl::Now();
  RssSampler rss(**server, absl::Seconds(1));
  for (absl::Time next = begin; next < begin + length; next += interval) {
    absl::SleepFor(next - absl::Now());
    auto* call = new Call;
    call->which = static_cast<size_t>(sent % cases.size());
    call->context.set_deadline(In(absl::Seconds(30)));
    call->start = absl::Now();
    {
      std::lock_guard<std::mutex> lock(mu);
      ++outstanding;
      ++sent;
    }
    stub->async()->Attend(&call->context, &cases[call->which].request,
                          &call->response, [&, call](grpc::Status status) {
                            const absl::Time end = absl::Now();
                            std::lock_guard<std::mutex> lock(mu);
                            if (!status.ok()) {
                              ++failed;
                              ++errors[absl::StrCat(status.error_code(), ": ",
                                                    status.error_message())];
                            } else if (call->response.output().data() !=
                                       cases[call->which].expected) {
                              ++wrong;
                            } else {
                              const size_t w =
                                  static_cast<size_t>(absl::FDivDuration(
                                      call->start - begin, kWindow));
                              if (window_seconds.size() <= w)
                                window_seconds.resize(w + 1);
                              window_seconds[w].push_back(
                                  absl::ToDoubleSeconds(end - call->start));
                            }
                            --outstanding;
                            delete call;
                            all_done.notify_all();
                          });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    all_done.wait(lock, [&] { return outstanding == 0; });
  }
  rss.Stop();

  // RSS after the first window (warm-up: primitives, pools, allocator
  // arenas), fitted by least squares.
  double n = 0, st = 0, sb = 0, stt = 0, stb = 0;
  int64_t first = -1, last = -1;
  for (const auto& [t, bytes] : rss.samples()) {
    if (t < absl::ToDoubleSeconds(kWindow) || bytes < 0) continue;
    if (first < 0) first = bytes;
    last = bytes;
    n += 1;
    st += t;
    sb += static_cast<double>(bytes);
    stt += t * t;
    stb += t * static_cast<double>(bytes);
  }
  ASSERT_GE(n, 5) << "RSS samples after the first window";
  const double slope = (n * stb - st * sb) / (n * stt - st * st);  // bytes/s
  // The growth of each window after the first (its last sample against the
  // previous window's). The server keeps freed heap up to its peak, so a
  // burst of queued calls (a noisy neighbour) raises RSS once, in one
  // window, and it stays; a leak raises it in every window. The median
  // growth tells them apart.
  std::vector<int64_t> window_rss;
  for (const auto& [t, bytes] : rss.samples()) {
    const size_t w = static_cast<size_t>(t / absl::ToDoubleSeconds(kWindow));
    if (bytes < 0) continue;
    if (window_rss.size() <= w) window_rss.resize(w + 1, -1);
    window_rss[w] = bytes;
  }
  std::vector<double> growth;
  for (size_t w = 2; w < window_rss.size(); ++w) {
    if (window_rss[w] >= 0 && window_rss[w - 1] >= 0) {
      growth.push_back(static_cast<double>(window_rss[w] - window_rss[w - 1]));
    }
  }
  ASSERT_GE(growth.size(), 1u) << "windows after the first two";
  const double median_growth = Quantile(growth, 0.5);

  std::string windows_text;
  std::vector<double> p99s;
  for (const std::vector<double>& w : window_seconds) {
    p99s.push_back(Quantile(w, 0.99));
    absl::StrAppend(&windows_text, windows_text.empty() ? "" : " ",
                    absl::StrFormat("%.2f", 1e3 * p99s.back()));
  }
  std::printf(
      "soak: %.0f s at %.1f calls/s (70%% of %.1f), %lld calls, %lld failed, "
      "%lld wrong; p99 per %.0f s window (ms): %s; RSS %lld -> %lld MiB after "
      "warm-up, slope %.1f KiB/s, median growth per window %.2f MiB\n",
      absl::ToDoubleSeconds(length), rate, capacity,
      static_cast<long long>(sent), static_cast<long long>(failed),
      static_cast<long long>(wrong), absl::ToDoubleSeconds(kWindow),
      windows_text.c_str(), static_cast<long long>(first / kMiB),
      static_cast<long long>(last / kMiB), slope / 1024, median_growth / kMiB);

  for (const auto& [what, count] : errors) {
    ADD_FAILURE() << count << " calls failed: " << what;
  }
  EXPECT_EQ(wrong, 0) << "answers that differ from the first of their shape";
  ASSERT_GE(p99s.size(), 2u);
  absl::Duration unused_remainder;
  // Below 15 ms a p99 here is the scheduling of two shared cores (server,
  // client and the machine's neighbours), not the server's: the first
  // window's counts as at least that. The windows past `length` hold only
  // the last calls.
  const double first_p99 = std::max(p99s[0], 0.015);
  const size_t whole_windows = static_cast<size_t>(std::min<int64_t>(
      p99s.size(), absl::IDivDuration(length, kWindow, &unused_remainder)));
  // As for memory: the neighbours' bursts raise a window's p99 now and then
  // (2x and 4.2x the first in CI runs), a server that degrades raises every
  // window's. So the median window is held to 2x the first; one window may
  // pass 4x (a neighbour's burst), and none may pass 20x (a stall of the
  // server itself: 300 ms and more).
  std::vector<double> later_p99s;
  int windows_past_4x = 0;
  for (size_t w = 1; w < whole_windows; ++w) {
    later_p99s.push_back(p99s[w]);
    if (p99s[w] > 4 * first_p99) ++windows_past_4x;
    EXPECT_LE(p99s[w], 20 * first_p99)
        << "window " << w << " p99 against the first window's";
  }
  EXPECT_LE(windows_past_4x, 1)
      << "windows whose p99 is past 4x the first window's";
  ASSERT_FALSE(later_p99s.empty());
  EXPECT_LE(Quantile(later_p99s, 0.5), 2 * first_p99)
      << "the median window's p99 against the first window's";
  // "Flat": at most 2 MiB a window (200 KiB/s) in the median window; a leak
  // of 2 KB a call would be more, of one request (768 KB and up) far more.
  EXPECT_LE(median_growth, 2.0 * kMiB)
      << "RSS slope " << slope / 1024 << " KiB/s";
}

}  // namespace
}  // namespace attnserve
