#include "tests/server/e2e/e2e_ops_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "core/attention.h"
#include "core/reference.h"
#include "tests/util/wire_tensor.h"

namespace attnserve::testing {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

::testing::Matcher<std::string> ConnectFailed() {
  return HasSubstr("failed to connect to all addresses");
}

Problem Problem::Make(int64_t heads, int64_t len, int64_t dim, uint64_t seed,
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

void Problem::ExpectMatchesReference(const v1::Tensor& output,
                                     int64_t rows) const {
  ASSERT_EQ(output.dtype(), v1::FLOAT32);
  ASSERT_EQ(std::vector<int64_t>(output.shape().begin(), output.shape().end()),
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
                    v1::AttendResponse* response, absl::Duration timeout,
                    const std::string& authorization) {
  grpc::ClientContext context;
  context.set_deadline(In(timeout));
  if (!authorization.empty()) {
    context.AddMetadata("authorization", authorization);
  }
  return stub.Attend(&context, request, response);
}

grpc::Status SmallAttend(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& authorization) {
  const Problem p = Problem::Make(2, 16, 8, 7, "small");
  auto stub = v1::AttentionService::NewStub(channel);
  v1::AttendResponse response;
  return Attend(*stub, p.request, &response, kPatience, authorization);
}

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

std::string Scrape(const ServerProcess& server) {
  absl::StatusOr<std::string> body = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? *body : "";
}

double Sample(const std::string& exposition, const std::string& series) {
  absl::StatusOr<double> value = MetricValue(exposition, series);
  EXPECT_TRUE(value.ok()) << value.status() << " in\n" << exposition;
  return value.ok() ? *value : std::numeric_limits<double>::quiet_NaN();
}

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

ConcurrentCalls::~ConcurrentCalls() {
  for (Call* call : Snapshot()) call->context.TryCancel();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &ConcurrentCalls::AllDone));
}

void ConcurrentCalls::Start(const v1::AttendRequest& request,
                            absl::Duration timeout) {
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
                           raw->finished = true;
                           ++done_;
                         });
}

bool ConcurrentCalls::AwaitAll() {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &ConcurrentCalls::AllDone),
                              kPatience);
}

bool ConcurrentCalls::AwaitFinished(int i) {
  absl::MutexLock lock(&mu_);
  Call* call = calls_[i].get();
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](Call* c) { return c->finished; }, call),
                              kPatience);
}

void ConcurrentCalls::Cancel(int i) {
  Call* call;
  {
    absl::MutexLock lock(&mu_);
    call = calls_[i].get();
  }
  call->context.TryCancel();
}

std::vector<ConcurrentCalls::Call*> ConcurrentCalls::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<Call*> calls;
  for (const auto& call : calls_) calls.push_back(call.get());
  return calls;
}

}  // namespace attnserve::testing
