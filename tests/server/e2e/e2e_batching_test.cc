// The small-request path and dynamic batching over a real attnserve process:
// concurrent tiny calls, compatible and not, each answered with its own
// request_id and exactly the bytes a run of its own gives; the batch-size
// histogram and the memory budget afterwards; the flags' checks.

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AwaitMetric;
using ::attnserve::testing::MetricSample;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::HasSubstr;

struct TinyCall {
  v1::AttendRequest request;
  TestTensor q, k, v, mask;
  std::vector<int32_t> lengths;
  std::string expected;  // output bytes of a run of its own
};

// Call i: one of three compatible groups (B 1 or 2 of L16, or Lq 8), some
// with key_lengths, and every seventh with an explicit mask (never batched).
TinyCall MakeCall(int i) {
  TinyCall c;
  const int64_t b = i % 3 == 1 ? 2 : 1;
  const int64_t lq = i % 3 == 2 ? 8 : 16, lk = 16, h = 1, d = 64;
  c.q = TestTensor::Random(DType::kFloat32, {b, h, lq, d}, 1000 + 3 * i);
  c.k = TestTensor::Random(DType::kFloat32, {b, h, lk, d}, 1001 + 3 * i);
  c.v = TestTensor::Random(DType::kFloat32, {b, h, lk, d}, 1002 + 3 * i);
  c.request.set_request_id(absl::StrCat("tiny-", i));
  ToWire(c.q, c.request.mutable_query());
  ToWire(c.k, c.request.mutable_key());
  ToWire(c.v, c.request.mutable_value());
  if (i % 3 == 2) {
    for (int64_t x = 0; x < b; ++x) c.lengths.push_back(1 + (i + x) % lk);
    for (int32_t x : c.lengths) c.request.mutable_mask()->add_key_lengths(x);
  }
  if (i % 7 == 0) {
    c.mask = TestTensor(DType::kBool, {lq, lk});
    for (int64_t x = 0; x < c.mask.size(); ++x) {
      c.mask.Set(x, (x + i) % 3 != 0 ? 1.0f : 0.0f);
    }
    ToWire(c.mask, c.request.mutable_mask()->mutable_explicit_mask());
  }
  return c;
}

// The output of a run of its own on a one-thread engine, as bytes.
std::string RunAlone(const TinyCall& c, AttentionEngine& engine) {
  AttentionInputs in;
  in.query = c.q.view();
  in.key = c.k.view();
  in.value = c.v.view();
  in.mask.key_lengths = c.lengths;
  if (c.mask.size() > 0) in.mask.explicit_mask = c.mask.view();
  std::vector<int64_t> shape = c.q.shape();
  TestTensor out(DType::kFloat32, shape);
  const absl::Status s = engine.Run(in, {out.mutable_view(), std::nullopt});
  EXPECT_TRUE(s.ok()) << s;
  return std::string(static_cast<const char*>(out.data()),
                     static_cast<size_t>(out.size()) * sizeof(float));
}

// Sends every call at once on the callback API and waits for all.
std::vector<grpc::Status> SendAtOnce(v1::AttentionService::Stub& stub,
                                     const std::vector<TinyCall>& calls,
                                     std::vector<v1::AttendResponse>* out) {
  const size_t n = calls.size();
  out->assign(n, v1::AttendResponse());
  std::vector<grpc::Status> statuses(n);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  absl::Mutex mu;
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(60));
    stub.async()->Attend(contexts.back().get(), &calls[i].request, &(*out)[i],
                         [&, i](grpc::Status s) {
                           absl::MutexLock lock(&mu);
                           statuses[i] = std::move(s);
                           ++done;
                         });
  }
  std::pair<size_t*, size_t> all(&done, n);
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](std::pair<size_t*, size_t>* p) { return *p->first == p->second; },
      &all));
  return statuses;
}

class E2eBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.num_threads = 1;
    auto engine = AttentionEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  // Starts a server with `args`, sends `n` tiny calls at once, and checks
  // every answer against a run of its own.
  void SendAndCheck(const std::vector<std::string>& args, int n,
                    std::unique_ptr<ServerProcess>* server) {
    auto started = ServerProcess::Start(args);
    ASSERT_TRUE(started.ok()) << started.status();
    *server = *std::move(started);
    auto stub = v1::AttentionService::NewStub((*server)->Channel());
    std::vector<TinyCall> calls;
    for (int i = 0; i < n; ++i) calls.push_back(MakeCall(i));
    for (TinyCall& c : calls) c.expected = RunAlone(c, *engine_);
    std::vector<v1::AttendResponse> responses;
    const std::vector<grpc::Status> statuses =
        SendAtOnce(*stub, calls, &responses);
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE(calls[i].request.request_id());
      ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
      EXPECT_EQ(responses[i].request_id(), calls[i].request.request_id());
      EXPECT_EQ(responses[i].output().shape_size(), 4);
      EXPECT_TRUE(responses[i].output().data() == calls[i].expected);
      EXPECT_GE(responses[i].timing().total_us(),
                responses[i].timing().compute_us());
    }
    AwaitMetric(**server,
                R"(attnserve_requests_total{code="OK",method="Attend"})", n);
  }

  std::unique_ptr<AttentionEngine> engine_;
};

TEST_F(E2eBatchingTest, ConcurrentTinyCallsAreBatchedEachWithItsOwnAnswer) {
  constexpr int kCalls = 48;
  std::unique_ptr<ServerProcess> server;
  // Inline runs off and a generous delay, so that batches surely form.
  SendAndCheck({"--workers=1", "--threads_per_worker=2", "--batch_max_size=8",
                "--batch_max_delay_us=20000", "--inline_small_requests=false"},
               kCalls, &server);
  if (HasFatalFailure()) return;
  const double runs = MetricSample(*server, "attnserve_batch_size_count");
  const double tasks = MetricSample(*server, "attnserve_batch_size_sum");
  // Every call was computed in exactly one run, and some runs held several.
  EXPECT_EQ(tasks, kCalls);
  EXPECT_LT(runs, kCalls);
  EXPECT_GT(MetricSample(*server, R"(attnserve_batch_size_bucket{le="8"})") -
                MetricSample(*server, R"(attnserve_batch_size_bucket{le="1"})"),
            0);
  // Batches were formed and answered: nothing is left reserved or queued.
  EXPECT_EQ(testing::AwaitMetricAtMost(
                *server, R"(attnserve_inflight_bytes{state="used"})", 0),
            0);
  EXPECT_EQ(MetricSample(*server, "attnserve_queue_depth"), 0);
  EXPECT_EQ(MetricSample(*server,
                         R"(attnserve_batch_fallbacks_total{reason="error"})"),
            0);
}

TEST_F(E2eBatchingTest, WithoutBatchingEveryCallRunsAlone) {
  constexpr int kCalls = 24;
  std::unique_ptr<ServerProcess> server;
  SendAndCheck({"--workers=2", "--threads_per_worker=1"}, kCalls, &server);
  if (HasFatalFailure()) return;
  EXPECT_EQ(MetricSample(*server, "attnserve_batch_size_count"), kCalls);
  EXPECT_EQ(MetricSample(*server, "attnserve_batch_size_sum"), kCalls);
}

TEST_F(E2eBatchingTest, BadFlagsStopTheServerWithAMessage) {
  for (const auto& [flag, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"--batch_max_size=0",
            "--batch_max_size must be in [1, 1024] (1 = no batching), got 0"},
           {"--batch_max_delay_us=-5",
            "--batch_max_delay_us must be in [0, 100000], got -5"},
           {"--small_request_flops=-1",
            "--small_request_flops must be >= 0, got -1"}}) {
    SCOPED_TRACE(flag);
    auto server = ServerProcess::Start({flag});
    ASSERT_FALSE(server.ok());
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(message));
  }
}

}  // namespace
}  // namespace attnserve
