#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::DoubleEq;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Optional;

using Labels = std::map<std::string, std::string>;

// GET `path` from 127.0.0.1:`port` with HTTP/1.0, so the server closes the
// connection after the response and reading to EOF yields all of it.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", errno));
  // A hung server fails the test instead of hanging it.
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect: ", std::strerror(err)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, 0);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("send failed");
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(err)));
    }
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

// One line of the text exposition format: name{labels} value.
struct Line {
  std::string name;
  Labels labels;
  double value = 0;
};

// Parses the sample lines of a scrape (our label values hold no escapes).
std::vector<Line> ParseSamples(absl::string_view body) {
  std::vector<Line> lines;
  for (absl::string_view text : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
    if (text.front() == '#') continue;
    Line line;
    const size_t brace = text.find('{');
    const size_t space = text.rfind(' ');
    if (space == absl::string_view::npos) continue;
    if (brace != absl::string_view::npos && brace < space) {
      line.name = std::string(text.substr(0, brace));
      const size_t close = text.rfind('}');
      absl::string_view labels = text.substr(brace + 1, close - brace - 1);
      for (absl::string_view pair :
           absl::StrSplit(labels, "\",", absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> kv =
            absl::StrSplit(pair, absl::MaxSplits("=\"", 1));
        line.labels[std::string(kv.first)] =
            std::string(absl::StripSuffix(kv.second, "\""));
      }
    } else {
      line.name = std::string(text.substr(0, space));
    }
    const std::string value(text.substr(space + 1));
    line.value = std::strtod(value.c_str(), nullptr);
    lines.push_back(std::move(line));
  }
  return lines;
}

// The samples of one scrape.
using Scrape = std::vector<Line>;

// The sample named `name` with exactly `labels`.
std::optional<double> Value(const Scrape& scrape, const std::string& name,
                            const Labels& labels = {}) {
  std::optional<double> found;
  for (const Line& line : scrape) {
    if (line.name != name || line.labels != labels) continue;
    EXPECT_FALSE(found.has_value()) << "duplicate series " << name;
    found = line.value;
  }
  return found;
}

// One Metrics and one exposer serve the whole suite: stopping civetweb takes up
// to its 2 s poll quantum, so a server per test would make the suite slow.
// Tests therefore check how much a series moved between two scrapes.
class MetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    metrics_ =
        new Metrics(BuildInfo{"1.2.3", "2.6.3", "avx512"}, {"enc", "dec"});
    absl::StatusOr<int> port = metrics_->Expose("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }
  static void TearDownTestSuite() {
    delete metrics_;
    metrics_ = nullptr;
  }

  void SetUp() override { ASSERT_GT(port_, 0) << "Expose failed"; }

  // Scrapes /metrics; fails the test unless the answer is 200 with a body.
  static std::string ScrapeBody() {
    absl::StatusOr<std::string> response = HttpGet(port_, "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return "";
    EXPECT_THAT(*response, ::testing::StartsWith("HTTP/1.1 200"));
    const size_t body = response->find("\r\n\r\n");
    EXPECT_NE(body, std::string::npos);
    return body == std::string::npos ? "" : response->substr(body + 4);
  }

  static Scrape Get() { return ParseSamples(ScrapeBody()); }

  // How far the series moved from `before` to `after`; nullopt if it is missing
  // from either.
  static std::optional<double> Delta(const Scrape& before, const Scrape& after,
                                     const std::string& name,
                                     const Labels& labels = {}) {
    std::optional<double> b = Value(before, name, labels);
    std::optional<double> a = Value(after, name, labels);
    if (!a || !b) return std::nullopt;
    return *a - *b;
  }

  static Metrics* metrics_;
  static int port_;
};

Metrics* MetricsTest::metrics_ = nullptr;
int MetricsTest::port_ = 0;

TEST_F(MetricsTest, ExposesEveryFamilyWithHelpAndType) {
  const std::string body = ScrapeBody();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"attnserve_requests_total", "counter"},
      {"attnserve_request_duration_seconds", "histogram"},
      {"attnserve_queue_duration_seconds", "histogram"},
      {"attnserve_batch_size", "histogram"},
      {"attnserve_batch_fallbacks_total", "counter"},
      {"attnserve_compute_duration_seconds", "histogram"},
      {"attnserve_inflight_requests", "gauge"},
      {"attnserve_step_channels", "gauge"},
      {"attnserve_queue_depth", "gauge"},
      {"attnserve_request_bytes_total", "counter"},
      {"attnserve_response_bytes_total", "counter"},
      {"attnserve_attention_flops_total", "counter"},
      {"attnserve_rejected_total", "counter"},
      {"attnserve_build_info", "gauge"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_THAT(body, HasSubstr(absl::StrCat("# HELP ", name, " ")));
    EXPECT_THAT(body,
                HasSubstr(absl::StrCat("# TYPE ", name, " ", type, "\n")));
  }
}

TEST_F(MetricsTest, EveryLabelChildExistsUpFront) {
  const Scrape scrape = Get();
  for (const char* method : {"Attend",
                             "AttendStream",
                             "GetServerInfo",
                             "AttendModel",
                             "AttendModelStream",
                             "AttendPieces",
                             "CreateSession",
                             "AppendKv",
                             "AppendKvStream",
                             "AttendSessions",
                             "AttendSessionsStream",
                             "ForkSession",
                             "TruncateSession",
                             "CloseSession",
                             "GetSession",
                             "StepChannel",
                             "ExportSessions",
                             "ImportSessions",
                             "ServerLive",
                             "ServerReady",
                             "ModelReady",
                             "ServerMetadata",
                             "ModelMetadata",
                             "ModelConfig",
                             "ModelStatistics",
                             "ModelInfer",
                             "RegisterSharedMemory",
                             "UnregisterSharedMemory",
                             "SharedMemoryStatus",
                             "SystemSharedMemoryStatus",
                             "SystemSharedMemoryRegister",
                             "SystemSharedMemoryUnregister"}) {
    for (const char* code :
         {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
          "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
          "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
          "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
          "DATA_LOSS", "UNAUTHENTICATED"}) {
      EXPECT_NE(Value(scrape, "attnserve_requests_total",
                      {{"method", method}, {"code", code}}),
                std::nullopt)
          << method << " " << code;
    }
    EXPECT_NE(Value(scrape, "attnserve_request_duration_seconds_count",
                    {{"method", method}}),
              std::nullopt);
  }
  for (const char* kernel :
       {"flash", "decode", "materialized", "linear", "lsh"}) {
    EXPECT_NE(Value(scrape, "attnserve_compute_duration_seconds_count",
                    {{"kernel", kernel}}),
              std::nullopt);
  }
  for (const char* reason :
       {"queue_full", "deadline", "cancelled", "shutdown"}) {
    EXPECT_NE(Value(scrape, "attnserve_rejected_total", {{"reason", reason}}),
              std::nullopt);
  }
  int requests_series = 0;
  for (const Line& line : scrape) {
    requests_series += line.name == "attnserve_requests_total";
  }
  EXPECT_EQ(requests_series, 33 * 17);
  int model_series = 0;
  for (const Line& line : scrape) {
    model_series += line.name == "attnserve_model_requests_total";
  }
  EXPECT_EQ(model_series, 2 * 17);
  for (const char* model : {"enc", "dec"}) {
    EXPECT_NE(Value(scrape, "attnserve_model_request_duration_seconds_count",
                    {{"model", model}}),
              std::nullopt);
    EXPECT_NE(Value(scrape, "attnserve_model_compute_duration_seconds_count",
                    {{"model", model}}),
              std::nullopt);
  }
}

TEST_F(MetricsTest, CountsModelRequestsAndComputeByModel) {
  const Scrape before = Get();
  metrics_->RecordModelRequest(1, grpc::StatusCode::OK, 0.01);
  metrics_->RecordModelRequest(1, grpc::StatusCode::NOT_FOUND, 0.001);
  metrics_->RecordModelRequest(0, grpc::StatusCode::OK, 0.02);
  // An index outside the models records nothing rather than crash.
  metrics_->RecordModelRequest(7, grpc::StatusCode::OK, 0.02);
  metrics_->RecordModelCompute(0, 0.005, 1e6);
  const Scrape after = Get();
  EXPECT_THAT(Delta(before, after, "attnserve_model_requests_total",
                    {{"model", "dec"}, {"code", "OK"}}),
              Optional(1.0));
  EXPECT_THAT(Delta(before, after, "attnserve_model_requests_total",
                    {{"model", "dec"}, {"code", "NOT_FOUND"}}),
              Optional(1.0));
  EXPECT_THAT(Delta(before, after, "attnserve_model_requests_total",
                    {{"model", "enc"}, {"code", "OK"}}),
              Optional(1.0));
  EXPECT_THAT(
      Delta(before, after, "attnserve_model_request_duration_seconds_sum",
            {{"model", "dec"}}),
      Optional(DoubleNear(0.011, 1e-9)));
  EXPECT_THAT(
      Delta(before, after, "attnserve_model_compute_duration_seconds_count",
            {{"model", "enc"}}),
      Optional(1.0));
  EXPECT_THAT(Delta(before, after, "attnserve_attention_flops_total"),
              Optional(1e6));
}

TEST_F(MetricsTest, CountsRequestsByMethodAndCodeWithBytes) {
  const Scrape before = Get();
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::OK, 0.25, 1000,
                          400);
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::OK, 0.5, 2000,
                          800);
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::OK, 0.001, 3000,
                          0);
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::INVALID_ARGUMENT,
                          0.0001, 50, 0);
  metrics_->RecordRequest(Method::kAttendStream,
                          grpc::StatusCode::RESOURCE_EXHAUSTED, 0.002, 7, 0);
  metrics_->RecordRequest(Method::kAttendStream,
                          grpc::StatusCode::RESOURCE_EXHAUSTED, 0.002, 7, 0);
  metrics_->RecordRequest(Method::kGetServerInfo, grpc::StatusCode::OK, 0.0001,
                          0, 123);
  // Codes gRPC does not define count as UNKNOWN, as gRPC reports them (20 stays
  // within the enum's value range, so the cast is defined).
  metrics_->RecordRequest(Method::kGetServerInfo,
                          static_cast<grpc::StatusCode>(20), 0.0001, 0, 0);
  const Scrape after = Get();

  auto requests = [&](const char* method, const char* code) {
    return Delta(before, after, "attnserve_requests_total",
                 {{"method", method}, {"code", code}});
  };
  EXPECT_THAT(requests("Attend", "OK"), Optional(3.0));
  EXPECT_THAT(requests("Attend", "INVALID_ARGUMENT"), Optional(1.0));
  EXPECT_THAT(requests("AttendStream", "RESOURCE_EXHAUSTED"), Optional(2.0));
  EXPECT_THAT(requests("GetServerInfo", "OK"), Optional(1.0));
  EXPECT_THAT(requests("GetServerInfo", "UNKNOWN"), Optional(1.0));
  EXPECT_THAT(requests("AttendStream", "OK"), Optional(0.0));
  double total = 0;
  for (const Line& line : after) {
    if (line.name == "attnserve_requests_total") total += line.value;
  }
  for (const Line& line : before) {
    if (line.name == "attnserve_requests_total") total -= line.value;
  }
  EXPECT_EQ(total, 8);

  EXPECT_THAT(Delta(before, after, "attnserve_request_bytes_total"),
              Optional(6064.0));
  EXPECT_THAT(Delta(before, after, "attnserve_response_bytes_total"),
              Optional(1323.0));

  EXPECT_THAT(Delta(before, after, "attnserve_request_duration_seconds_count",
                    {{"method", "Attend"}}),
              Optional(4.0));
  EXPECT_THAT(Delta(before, after, "attnserve_request_duration_seconds_sum",
                    {{"method", "Attend"}}),
              Optional(DoubleNear(0.25 + 0.5 + 0.001 + 0.0001, 1e-9)));
  EXPECT_THAT(Delta(before, after, "attnserve_request_duration_seconds_count",
                    {{"method", "AttendStream"}}),
              Optional(2.0));
  EXPECT_THAT(Delta(before, after, "attnserve_request_duration_seconds_count",
                    {{"method", "GetServerInfo"}}),
              Optional(2.0));
}

TEST_F(MetricsTest, HistogramBucketsSpanFiftyMicrosecondsToTenSeconds) {
  const Scrape before = Get();
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::OK, 0.25, 0, 0);
  metrics_->RecordRequest(Method::kAttend, grpc::StatusCode::OK, 20.0, 0, 0);
  const Scrape after = Get();
  std::vector<double> bounds;
  for (const Line& line : after) {
    if (line.name != "attnserve_request_duration_seconds_bucket") continue;
    if (line.labels.at("method") != "Attend") continue;
    const std::optional<double> moved =
        Delta(before, after, line.name, line.labels);
    const std::string& le = line.labels.at("le");
    if (le == "+Inf") {
      EXPECT_THAT(moved, Optional(2.0));
      continue;
    }
    const double bound = std::strtod(le.c_str(), nullptr);
    bounds.push_back(bound);
    // Cumulative: 0.25 s falls in every bucket from 0.5 s up; 20 s in none.
    EXPECT_THAT(moved, Optional(bound >= 0.25 ? 1.0 : 0.0)) << "le=" << le;
  }
  ASSERT_FALSE(bounds.empty());
  EXPECT_DOUBLE_EQ(bounds.front(), 50e-6);
  EXPECT_DOUBLE_EQ(bounds.back(), 10.0);
  for (size_t i = 1; i < bounds.size(); ++i) {
    EXPECT_LE(bounds[i] / bounds[i - 1], 2.5 + 1e-9)
        << "gap above " << bounds[i - 1];
  }
}

TEST_F(MetricsTest, RecordsQueueComputeAndFlops) {
  const Scrape before = Get();
  metrics_->RecordQueue(0.003);
  metrics_->RecordQueue(0.004);
  metrics_->RecordCompute(KernelPath::kFlash, 0.01, 1e9);
  metrics_->RecordCompute(KernelPath::kDecode, 0.02, 2.5e8);
  metrics_->RecordCompute(KernelPath::kMaterialized, 0.03, 5e8);
  metrics_->RecordCompute(KernelPath::kMaterialized, 0.04, 5e8);
  metrics_->RecordCompute(KernelPath::kLinear, 0.06, 1e3);
  metrics_->RecordCompute(KernelPath::kLsh, 0.07, 1e3);
  metrics_->RecordCompute(KernelPath::kLsh, 0.08, 1e3);
  // kAuto names no kernel: its time has no series, its FLOPs still count.
  metrics_->RecordCompute(KernelPath::kAuto, 0.05, 1e6);
  const Scrape after = Get();

  EXPECT_THAT(Delta(before, after, "attnserve_queue_duration_seconds_count"),
              Optional(2.0));
  EXPECT_THAT(Delta(before, after, "attnserve_queue_duration_seconds_sum"),
              Optional(DoubleNear(0.007, 1e-9)));
  auto compute_count = [&](const char* kernel) {
    return Delta(before, after, "attnserve_compute_duration_seconds_count",
                 {{"kernel", kernel}});
  };
  EXPECT_THAT(compute_count("flash"), Optional(1.0));
  EXPECT_THAT(compute_count("decode"), Optional(1.0));
  EXPECT_THAT(compute_count("materialized"), Optional(2.0));
  EXPECT_THAT(compute_count("linear"), Optional(1.0));
  EXPECT_THAT(compute_count("lsh"), Optional(2.0));
  EXPECT_THAT(Delta(before, after, "attnserve_compute_duration_seconds_sum",
                    {{"kernel", "materialized"}}),
              Optional(DoubleNear(0.07, 1e-9)));
  EXPECT_THAT(Delta(before, after, "attnserve_attention_flops_total"),
              Optional(DoubleEq(1e9 + 2.5e8 + 1e9 + 3e3 + 1e6)));
}

TEST_F(MetricsTest, RecordsBatchSizesInPowerOfTwoBuckets) {
  const Scrape before = Get();
  metrics_->RecordBatch(1);
  metrics_->RecordBatch(3);
  metrics_->RecordBatch(32);
  const Scrape after = Get();
  EXPECT_THAT(Delta(before, after, "attnserve_batch_size_count"),
              Optional(3.0));
  EXPECT_THAT(Delta(before, after, "attnserve_batch_size_sum"),
              Optional(DoubleEq(36.0)));
  auto bucket = [&](const char* le) {
    return Delta(before, after, "attnserve_batch_size_bucket", {{"le", le}});
  };
  EXPECT_THAT(bucket("1"), Optional(1.0));
  EXPECT_THAT(bucket("2"), Optional(1.0));
  EXPECT_THAT(bucket("4"), Optional(2.0));
  EXPECT_THAT(bucket("16"), Optional(2.0));
  EXPECT_THAT(bucket("32"), Optional(3.0));
  EXPECT_THAT(bucket("256"), Optional(3.0));
}

TEST_F(MetricsTest, SessionFiguresAreReadAtEachScrape) {
  EXPECT_EQ(Value(Get(), "attnserve_kv_sessions", {}), std::nullopt);
  kvcache::StoreStats stats;
  stats.budget_bytes = 1000;
  stats.used_bytes = 300;
  stats.sessions = 2;
  stats.tokens_appended = 40;
  stats.blocks_shared = 6;
  stats.ended_closed = 3;
  stats.ended_expired = 4;
  stats.ended_evicted = 5;
  stats.ended_moved = 8;
  stats.imported = 9;
  metrics_->SetSessionStatsSource([&stats] { return stats; });
  Scrape scrape = Get();
  EXPECT_EQ(Value(scrape, "attnserve_kv_bytes", {{"state", "used"}}), 300);
  EXPECT_EQ(Value(scrape, "attnserve_kv_bytes", {{"state", "free"}}), 700);
  EXPECT_EQ(Value(scrape, "attnserve_kv_sessions", {}), 2);
  EXPECT_EQ(Value(scrape, "attnserve_kv_tokens_appended_total", {}), 40);
  EXPECT_EQ(Value(scrape, "attnserve_kv_blocks_shared_total", {}), 6);
  EXPECT_EQ(Value(scrape, "attnserve_kv_sessions_ended_total",
                  {{"reason", "closed"}}),
            3);
  EXPECT_EQ(Value(scrape, "attnserve_kv_sessions_ended_total",
                  {{"reason", "expired"}}),
            4);
  EXPECT_EQ(Value(scrape, "attnserve_kv_sessions_ended_total",
                  {{"reason", "evicted"}}),
            5);
  EXPECT_EQ(
      Value(scrape, "attnserve_kv_sessions_ended_total", {{"reason", "moved"}}),
      8);
  EXPECT_EQ(Value(scrape, "attnserve_kv_sessions_imported_total", {}), 9);
  stats.sessions = 7;  // no call records it: the scrape reads it
  EXPECT_EQ(Value(Get(), "attnserve_kv_sessions", {}), 7);
  metrics_->SetSessionStatsSource(nullptr);
  EXPECT_EQ(Value(Get(), "attnserve_kv_sessions", {}), std::nullopt);
}

TEST_F(MetricsTest, GaugesAndRejections) {
  const Scrape before = Get();
  metrics_->SetQueueDepth(7);
  metrics_->SetQueueDepth(5);
  metrics_->AddInflight(3);
  metrics_->AddInflight(-1);
  metrics_->RecordRejection(Rejection::kQueueFull);
  metrics_->RecordRejection(Rejection::kQueueFull);
  metrics_->RecordRejection(Rejection::kDeadline);
  metrics_->RecordRejection(Rejection::kCancelled);
  metrics_->RecordRejection(Rejection::kShutdown);
  metrics_->RecordRejection(Rejection::kShutdown);
  metrics_->RecordRejection(Rejection::kShutdown);
  const Scrape after = Get();
  metrics_->AddInflight(-2);

  EXPECT_THAT(Value(after, "attnserve_queue_depth"), Optional(5.0));
  EXPECT_THAT(Delta(before, after, "attnserve_inflight_requests"),
              Optional(2.0));
  auto rejected = [&](const char* reason) {
    return Delta(before, after, "attnserve_rejected_total",
                 {{"reason", reason}});
  };
  EXPECT_THAT(rejected("queue_full"), Optional(2.0));
  EXPECT_THAT(rejected("deadline"), Optional(1.0));
  EXPECT_THAT(rejected("cancelled"), Optional(1.0));
  EXPECT_THAT(rejected("shutdown"), Optional(3.0));
}

TEST_F(MetricsTest, BuildInfoCarriesItsLabels) {
  EXPECT_THAT(
      Value(Get(), "attnserve_build_info",
            {{"version", "1.2.3"}, {"onednn", "2.6.3"}, {"isa", "avx512"}}),
      Optional(1.0));
}

TEST_F(MetricsTest, ExposeOnAnAddressInUseIsUnavailableAndNamesTheFlag) {
  Metrics other(BuildInfo{"1.2.3", "2.6.3", "avx2"});
  const std::string address = absl::StrCat("127.0.0.1:", port_);
  EXPECT_THAT(
      other.Expose(address).status(),
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr(address), HasSubstr("--metrics_listen"))));
  // The first exposer still answers.
  EXPECT_THAT(ScrapeBody(), HasSubstr("attnserve_build_info"));
}

TEST_F(MetricsTest, ExposeOnAMalformedAddressIsUnavailable) {
  Metrics other(BuildInfo{"1.2.3", "2.6.3", "avx2"});
  EXPECT_THAT(
      other.Expose("not-an-address:http").status(),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--metrics_listen")));
}

}  // namespace
}  // namespace attnserve::server
