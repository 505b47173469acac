// What a real attnserve tells about itself: /metrics counts known traffic
// exactly (and no socket at all when disabled), reflection lists and describes
// the API, and a bad flag exits non-zero with a clear message.

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/e2e_ops_util.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"

namespace attnserve::testing {
namespace {

using ::grpc::reflection::v1alpha::ServerReflection;
using ::grpc::reflection::v1alpha::ServerReflectionRequest;
using ::grpc::reflection::v1alpha::ServerReflectionResponse;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

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

  // The process listens on exactly the three ports it logged: gRPC, metrics
  // and, by default, TCP step channels on the loopback interface.
  EXPECT_GT((*server)->step_channel_port(), 0);
  EXPECT_EQ(ListeningPorts((*server)->pid()),
            (std::set<int>{(*server)->port(), (*server)->metrics_port(),
                           (*server)->step_channel_port()}));
}

// Disabled means no socket at all: the process's listening TCP sockets are read
// from /proc (see ListeningPorts), and only the gRPC one is there (step
// channels turned off too).
TEST(E2eMetricsTest, EmptyMetricsListenServesNoMetrics) {
  auto server =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            "--metrics_listen=", "--step_channel_listen="});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
  EXPECT_THAT((*server)->Log(), HasSubstr("metrics_listen=(disabled)"));
  EXPECT_THAT(SmallAttend((*server)->Channel()), GrpcOk());
  EXPECT_EQ(ListeningPorts((*server)->pid()), std::set<int>{(*server)->port()});
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
}  // namespace attnserve::testing
