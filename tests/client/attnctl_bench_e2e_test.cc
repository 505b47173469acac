// attnctl bench against real attnserve processes: counts that add up and
// agree with the servers' own metrics, ordered percentiles, open-loop rates,
// sweeps, streams, round-robin over two servers, and the exit codes of what
// goes wrong.

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/attnctl_runner.h"
#include "tests/util/server_process.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::AwaitMetric;
using ::attnserve::testing::CommandResult;
using ::attnserve::testing::Describe;
using ::attnserve::testing::MetricSample;
using ::attnserve::testing::ParseJson;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr char kOkAttend[] =
    R"(attnserve_requests_total{code="OK",method="Attend"})";
constexpr char kOkStream[] =
    R"(attnserve_requests_total{code="OK",method="AttendStream"})";

// Established TCP connections whose local port is `port` (the server's end
// of each client connection), from /proc/net/tcp and tcp6; -1 when neither
// can be read.
int ServerSideConnections(int port) {
  int count = 0;
  bool read_any = false;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream table(path);
    if (!table) continue;
    read_any = true;
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      const std::vector<std::string> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (fields.size() < 4 || fields[3] != "01") continue;  // ESTABLISHED
      const size_t colon = fields[1].rfind(':');
      if (colon == std::string::npos) continue;
      if (std::stoi(fields[1].substr(colon + 1), nullptr, 16) == port) {
        ++count;
      }
    }
  }
  return read_any ? count : -1;
}

void ExpectConsistent(const Json& level) {
  int64_t errors = 0;
  for (const auto& [code, count] : level["errors"].items()) {
    errors += count.get<int64_t>();
  }
  EXPECT_EQ(level["requests"].get<int64_t>(),
            level["ok"].get<int64_t>() + errors)
      << level.dump(2);
  const Json& l = level["latency_us"];
  double previous = 0;
  for (const char* key : {"p50", "p90", "p95", "p99", "p999", "max"}) {
    ASSERT_TRUE(l.contains(key)) << key << " in " << level.dump(2);
    EXPECT_GE(l[key].get<double>(), previous) << key << " in " << l.dump();
    previous = l[key].get<double>();
  }
}

class AttnctlBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server =
        ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  // `attnctl bench <small request> args... --target=<the server>`.
  static CommandResult Bench(std::vector<std::string> args) {
    std::vector<std::string> all = {"bench", "--heads=2", "--lq=16", "--dim=16",
                                    "--warmup=0s"};
    all.insert(all.end(), args.begin(), args.end());
    if (!absl::c_any_of(all, [](const std::string& a) {
          return absl::StartsWith(a, "--target");
        })) {
      all.push_back("--target=" + server_->target());
    }
    return RunAttnctl(all);
  }

  static ServerProcess* server_;
};

ServerProcess* AttnctlBenchTest::server_ = nullptr;

TEST_F(AttnctlBenchTest, ClosedLoopCountsAgreeWithTheServersMetrics) {
  const double before = MetricSample(*server_, kOkAttend);
  const CommandResult r =
      Bench({"--concurrency=2", "--duration=1s", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  EXPECT_EQ(j["mode"], "closed_loop");
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 10);
  EXPECT_GT(j["throughput_rps"].get<double>(), 0);
  EXPECT_GT(j["gflops"].get<double>(), 0);
  EXPECT_GT(j["latency_us"]["p50"].get<double>(), 0);
  EXPECT_GT(j["server_us"]["compute_p50"].get<double>(), 0);
  EXPECT_EQ(j["targets"][server_->target()], ok);
  // No warm-up and a GetServerInfo pre-flight: the server saw exactly these.
  EXPECT_EQ(AwaitMetric(*server_, kOkAttend, before + ok), before + ok);
}

// A request larger than one piece goes in pieces, as attnctl infer and the
// Python package send it: counted by the server as AttendPieces.
TEST_F(AttnctlBenchTest, ALargeRequestGoesInPieces) {
  const std::string series =
      R"(attnserve_requests_total{code="OK",method="AttendPieces"})";
  const double before = MetricSample(*server_, series);
  // q, k and v of [1, 4, 1024, 64] f32: 3 MiB.
  const CommandResult r =
      Bench({"--heads=4", "--lq=1024", "--dim=64", "--concurrency=2",
             "--duration=1s", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  EXPECT_EQ(j["method"], "AttendPieces");
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 0);
  EXPECT_EQ(AwaitMetric(*server_, series, before + ok), before + ok);
}

// --new_connections: after the load, calls each on a new connection of its
// own, in pieces as the load's, set against the load's p50; the server counts
// every one.
TEST_F(AttnctlBenchTest, NewConnectionsTimeTheirFirstCalls) {
  const std::string series =
      R"(attnserve_requests_total{code="OK",method="AttendPieces"})";
  const double before = MetricSample(*server_, series);
  const CommandResult r =
      Bench({"--heads=4", "--lq=1024", "--dim=64", "--duration=500ms",
             "--new_connections=3", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  const Json& first = j["new_connections"];
  EXPECT_EQ(first["count"], 3) << j.dump(2);
  const double p50 = first["first_call_p50_us"].get<double>();
  EXPECT_GT(p50, 0);
  EXPECT_GE(first["first_call_max_us"].get<double>(), p50);
  EXPECT_NEAR(first["ratio_to_p50"].get<double>(),
              p50 / j["latency_us"]["p50"].get<double>(), 1e-9 * p50);
  const double ok = j["ok"].get<double>();
  EXPECT_EQ(AwaitMetric(*server_, series, before + ok + 3), before + ok + 3);

  const CommandResult table =
      Bench({"--duration=200ms", "--new_connections=2"});
  ASSERT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_THAT(table.out,
              HasSubstr("new conns   2 first calls, each on a new connection: "
                        "p50 "));
  EXPECT_THAT(table.out, HasSubstr("the p50 of concurrency 1\n"));
}

// ModelInfer calls, and with --stream ModelStreamInfer messages: the server
// counts each under its own method and none as Attend or as the other one.
TEST_F(AttnctlBenchTest, ProtocolV2SendsModelInferCallsOrStreamMessages) {
  const auto ok_series = [](const std::string& method) {
    return absl::StrCat(R"(attnserve_requests_total{code="OK",method=")",
                        method, R"("})");
  };
  for (const bool stream : {false, true}) {
    const std::string method = stream ? "ModelStreamInfer" : "ModelInfer";
    const std::string other = stream ? "ModelInfer" : "ModelStreamInfer";
    SCOPED_TRACE(method);
    const double before = MetricSample(*server_, ok_series(method));
    const double other_before = MetricSample(*server_, ok_series(other));
    const double attend_before = MetricSample(*server_, kOkAttend);
    std::vector<std::string> args = {"--protocol=v2", "--concurrency=2",
                                     "--duration=500ms",
                                     "--output_format=json"};
    if (stream) args.push_back("--stream");
    const CommandResult r = Bench(args);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const Json j = ParseJson(r);
    ExpectConsistent(j);
    EXPECT_EQ(j["method"], method);
    EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
    const int64_t ok = j["ok"].get<int64_t>();
    EXPECT_GT(ok, 0);
    // The server's timing and FLOPs come back in the response's parameters.
    EXPECT_GT(j["gflops"].get<double>(), 0);
    EXPECT_GT(j["server_us"]["compute_p50"].get<double>(), 0);
    EXPECT_EQ(AwaitMetric(*server_, ok_series(method), before + ok),
              before + ok);
    EXPECT_EQ(MetricSample(*server_, ok_series(other)), other_before);
    EXPECT_EQ(MetricSample(*server_, kOkAttend), attend_before);
  }
}

TEST_F(AttnctlBenchTest, WarmupRequestsAreSentButNotCounted) {
  const double before = MetricSample(*server_, kOkAttend);
  const CommandResult r =
      Bench({"--warmup=500ms", "--duration=500ms", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 0);
  EXPECT_GT(AwaitMetric(*server_, kOkAttend, before + ok + 1), before + ok);
}

TEST_F(AttnctlBenchTest, OpenLoopReachesItsRate) {
  const CommandResult r =
      Bench({"--rate=50", "--duration=3s", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  EXPECT_EQ(j["mode"], "open_loop");
  EXPECT_EQ(j["arrival"], "constant");
  // Sends at 0, 20, ..., 2980 ms: the schedule itself.
  EXPECT_EQ(j["requests"], 150);
  // The rate reached, within 10 %: the answers kept up with the schedule
  // (throughput counts to the last answer, so a slow tail lowers it).
  EXPECT_NEAR(j["throughput_rps"].get<double>(), 50, 5);
}

TEST_F(AttnctlBenchTest, PoissonArrivalsReachTheirMeanRate) {
  const CommandResult r = Bench({"--rate=100", "--arrival=poisson",
                                 "--duration=2s", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  // A Poisson count of mean 200 lies within ±25 % with near certainty.
  EXPECT_NEAR(j["requests"].get<double>(), 200, 50);
  EXPECT_NEAR(j["throughput_rps"].get<double>(), 100, 25);
}

TEST_F(AttnctlBenchTest, ASweepReportsEveryLevel) {
  const CommandResult r = Bench(
      {"--concurrency=1:4:x2", "--duration=300ms", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ASSERT_EQ(j["levels"].size(), 3u) << j.dump(2);
  int64_t requests = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["levels"][i]["concurrency"], 1 << i);
    ExpectConsistent(j["levels"][i]);
    requests += j["levels"][i]["requests"].get<int64_t>();
  }
  EXPECT_EQ(j["requests"], requests);
}

TEST_F(AttnctlBenchTest, CsvGoesToTheOutputFileAndATableToStdout) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const CommandResult r =
      Bench({"--concurrency=1,2", "--duration=300ms", "--output_format=csv",
             "--output=" + dir.Path("bench.csv")});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("closed loop, 2 levels"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + dir.Path("bench.csv")));
  const std::vector<std::string> lines =
      absl::StrSplit(dir.Read("bench.csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("concurrency,requests,ok,errors,"));
  EXPECT_THAT(lines[1], StartsWith("1,"));
  EXPECT_THAT(lines[2], StartsWith("2,"));
}

TEST_F(AttnctlBenchTest, TableIsTheDefault) {
  const CommandResult r = Bench({"--duration=300ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("load        closed loop, concurrency 1, "
                                "unary Attend, 0.3 s measured"));
  EXPECT_THAT(r.out, HasSubstr("\nlatency     p50 "));
  EXPECT_THAT(r.out, HasSubstr("\nserver      queue p50 "));
  // stderr is not a terminal here: no progress line.
  EXPECT_EQ(r.err, "");
}

TEST_F(AttnctlBenchTest, StreamMessagesAreCountedByTheServer) {
  const double before = MetricSample(*server_, kOkStream);
  const CommandResult r = Bench({"--stream", "--concurrency=2",
                                 "--duration=500ms", "--output_format=json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  EXPECT_EQ(j["method"], "AttendStream");
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 0);
  EXPECT_EQ(AwaitMetric(*server_, kOkStream, before + ok), before + ok);
}

// AttendStream, and ModelStreamInfer with --protocol=v2.
TEST_F(AttnctlBenchTest, OpenLoopOverAStream) {
  for (const std::string protocol : {"native", "v2"}) {
    SCOPED_TRACE(protocol);
    const CommandResult r =
        Bench({"--stream", "--protocol=" + protocol, "--rate=40",
               "--duration=1s", "--connections=2", "--output_format=json"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const Json j = ParseJson(r);
    ExpectConsistent(j);
    EXPECT_EQ(j["requests"], 40);
    EXPECT_EQ(j["ok"], 40);
  }
}

// Unary Attend calls, and ModelStreamInfer messages, where a refused message
// is answered on the stream with error_message "CODE: message" and the
// stream goes on: every request counts under CODE, the message without it.
TEST_F(AttnctlBenchTest, RefusedRequestsAreCountedByCode) {
  for (const bool v2_stream : {false, true}) {
    SCOPED_TRACE(v2_stream ? "ModelStreamInfer" : "Attend");
    // Hq = 3 is not a multiple of Hkv = 2: the server refuses every call.
    std::vector<std::string> args = {"--heads=3", "--kv_heads=2",
                                     "--duration=300ms",
                                     "--output_format=json"};
    if (v2_stream) args.insert(args.end(), {"--protocol=v2", "--stream"});
    const CommandResult r = Bench(args);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    const Json j = ParseJson(r);
    ExpectConsistent(j);
    const int64_t requests = j["requests"].get<int64_t>();
    EXPECT_GT(requests, 1);
    EXPECT_EQ(j["ok"], 0);
    EXPECT_EQ(j["errors"]["INVALID_ARGUMENT"], requests) << j.dump(2);
    const std::string message =
        j["error_messages"]["INVALID_ARGUMENT"].get<std::string>();
    EXPECT_THAT(message, HasSubstr("multiple"));
    EXPECT_FALSE(absl::StartsWith(message, "INVALID_ARGUMENT")) << message;
    EXPECT_FALSE(j.contains("stopped_early")) << j.dump(2);
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("error: ", requests, " of ",
                                              requests, " requests failed")));
  }
}

TEST_F(AttnctlBenchTest, AnUnreachableTargetFailsBeforeTheLoad) {
  const CommandResult r =
      Bench({"--target=127.0.0.1:1", "--timeout=2s", "--duration=300ms"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: 127.0.0.1:1: UNAVAILABLE: "));
  EXPECT_EQ(r.out, "");
}

TEST_F(AttnctlBenchTest, UsageErrorsExitWith2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--concurrency=0"}, "--concurrency \"0\": 0 is not positive"},
      {{"--concurrency=2", "--rate=10"}, "do not go together"},
      {{"--arrival=poisson"}, "--arrival applies to --rate only"},
      {{"--rate=10", "--arrival=bursty"}, "is not constant or poisson"},
      {{"--output_format=xml"}, "is not table, csv or json"},
      {{"--duration=0s"}, "--duration must be positive"},
      {{"--connections=0"},
       "--connections must be auto or a count in [1, 256], got \"0\""},
      {{"--connections=-1"}, "got \"-1\""},
      {{"--connections=257"}, "got \"257\""},
      {{"--connections=many"}, "got \"many\""},
      {{"--connections=99999999999"}, "got \"99999999999\""},
      {{"--protocol=v3"}, "--protocol \"v3\" is not native or v2"},
      {{"--new_connections=-1"},
       "--new_connections must be between 0 and 1000"},
      {{"--new_connections=2", "--stream"},
       "--new_connections times unary native Attend calls"},
      {{"--new_connections=2", "--rate=10"},
       "--new_connections times unary native Attend calls"},
      {{"--q=x.npy"}, "unknown flag"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult r = Bench(args);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(message)) << Describe(r);
  }
}

TEST_F(AttnctlBenchTest, TheServerSeesOneConnectionPerPoolMember) {
  struct Case {
    std::vector<std::string> args;
    int connections;
    bool automatic;
  };
  const std::vector<Case> cases = {
      {{"--concurrency=3"}, 3, true},
      {{"--concurrency=16"}, 8, true},
      {{"--concurrency=3", "--connections=1"}, 1, false},
      {{"--concurrency=2", "--connections=5"}, 5, false},
  };
  ASSERT_GE(ServerSideConnections(server_->port()), 0)
      << "neither /proc/net/tcp nor /proc/net/tcp6 can be read";
  for (const Case& c : cases) {
    // The previous run's connections close as its process exits.
    for (int i = 0; i < 100 && ServerSideConnections(server_->port()) > 0;
         ++i) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_EQ(ServerSideConnections(server_->port()), 0);
    // What the server sees for most of the run: one connection per pool
    // member. Now and then one more shows for a moment (once in a CI run,
    // once in 30 runs here; not explained yet — no code of the client
    // changed), which is not what this test is about; the maximum only has
    // to reach the pool size.
    std::atomic<bool> done = false;
    std::map<int, int> seen;  // connections -> samples
    std::thread watcher([&] {
      while (!done) {
        ++seen[ServerSideConnections(server_->port())];
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
    std::vector<std::string> args = c.args;
    args.push_back("--duration=1s");
    args.push_back("--output_format=json");
    const CommandResult r = Bench(args);
    done = true;
    watcher.join();
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const Json j = ParseJson(r);
    int steady = 0, steady_samples = 0, most = 0;
    for (const auto& [connections, samples] : seen) {
      most = std::max(most, connections);
      if (connections > 0 && samples > steady_samples) {
        steady = connections;
        steady_samples = samples;
      }
    }
    EXPECT_EQ(steady, c.connections) << c.args[0];
    EXPECT_GE(most, c.connections) << c.args[0];
    EXPECT_EQ(j["connections_per_target"], c.connections);
    EXPECT_EQ(j["connections_auto"], c.automatic);
    ASSERT_EQ(j["ok_per_connection"].size(), static_cast<size_t>(c.connections))
        << j.dump(2);
    for (const Json& ok : j["ok_per_connection"]) {
      EXPECT_GT(ok.get<int64_t>(), 0) << j["ok_per_connection"].dump();
    }
  }
  const CommandResult r = Bench({"--concurrency=3", "--duration=300ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("targets     ", server_->target(),
                                            " (3 connections each, auto)\n")));
}

TEST_F(AttnctlBenchTest, AnUnwritableOutputIsAFileError) {
  const CommandResult r =
      Bench({"--duration=200ms", "--output=/nonexistent-dir/bench.json"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent-dir/bench.json"));
}

TEST_F(AttnctlBenchTest, HelpListsTheLoadFlags) {
  const CommandResult r = RunAttnctl({"bench", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* flag : {"--concurrency", "--rate", "--arrival", "--stream",
                           "--output_format", "--connections", "--target"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST(AttnctlBenchRoundRobinTest, EveryServerAnswersItsShare) {
  auto a = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  auto b = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const ServerProcess& sa = **a;
  const ServerProcess& sb = **b;
  const CommandResult r =
      RunAttnctl({"bench", "--heads=2", "--lq=16", "--dim=16", "--warmup=0s",
                  "--concurrency=2", "--duration=1s", "--output_format=json",
                  "--target=" + sa.target() + "," + sb.target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  ExpectConsistent(j);
  const int64_t on_a = j["targets"][sa.target()].get<int64_t>();
  const int64_t on_b = j["targets"][sb.target()].get<int64_t>();
  EXPECT_GT(on_a, 0);
  EXPECT_GT(on_b, 0);
  EXPECT_EQ(on_a + on_b, j["ok"].get<int64_t>());
  EXPECT_EQ(AwaitMetric(sa, kOkAttend, on_a), on_a);
  EXPECT_EQ(AwaitMetric(sb, kOkAttend, on_b), on_b);
}

// kill -9 of one of two replicas under load: the bench keeps going on the
// survivor, reports the failed calls by code, and the replica restarted on
// its port serves again before the bench ends.
TEST(AttnctlFailoverTest, KillNineOfAReplicaUnderLoad) {
  auto a = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  auto b = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const int a_port = (*a)->port();
  const std::string a_target = (*a)->target(), b_target = (*b)->target();
  CommandResult result;
  std::thread bench([&] {
    result =
        RunAttnctl({"bench", "--heads=2", "--lq=64", "--dim=16", "--warmup=0s",
                    "--duration=10s", "--concurrency=4", "--output_format=json",
                    "--target=" + a_target + "," + b_target});
  });
  absl::SleepFor(absl::Seconds(2));
  (*a)->Kill(SIGKILL);
  EXPECT_FALSE((*a)->WaitForExit(absl::Seconds(10)).ok())
      << "a SIGKILLed server reports no exit code";
  absl::SleepFor(absl::Milliseconds(500));
  auto restarted =
      ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                            absl::StrCat("--listen=127.0.0.1:", a_port)});
  bench.join();
  ASSERT_TRUE(restarted.ok()) << restarted.status();

  // Failures make the exit code 1; the report still has every request.
  EXPECT_EQ(result.exit_code, 1) << Describe(result);
  const Json j = ParseJson(result);
  ExpectConsistent(j);
  EXPECT_GT(j["ok"].get<int64_t>(), 0);
  ASSERT_TRUE(j["errors"].contains("UNAVAILABLE")) << j.dump(2);
  EXPECT_GT(j["errors"]["UNAVAILABLE"].get<int64_t>(), 0);
  // The survivor served throughout, and the restarted replica rejoined:
  // its own (new) counters show calls of the bench.
  EXPECT_GT(j["targets"][b_target].get<int64_t>(), 0) << j.dump(2);
  EXPECT_GT(MetricSample(**restarted, kOkAttend), 0)
      << "the restarted replica served no call; log:\n"
      << (*restarted)->Log();
}

}  // namespace
}  // namespace attnserve::client
