// attnctl session against a real attnserve process: every action, the
// outputs a user reads, and the exit codes of what goes wrong.

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/attnctl_runner.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CommandResult;
using ::attnserve::testing::Describe;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::testing::HasSubstr;

class AttnctlSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                        "--kv_block_tokens=16",
                                        "--shared_memory", "--step_channels=2",
                                        "--step_channel_listen=127.0.0.1:0"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  CommandResult Session(std::vector<std::string> args) {
    args.insert(args.begin(), "session");
    args.push_back("--target=" + server_->target());
    return RunAttnctl(args);
  }
  static ServerProcess* server_;
};
ServerProcess* AttnctlSessionTest::server_ = nullptr;

TEST_F(AttnctlSessionTest, EveryActionOnOneSession) {
  CommandResult r =
      Session({"create", "--session=cli", "--layers=2", "--kv_heads=2",
               "--dim=32", "--storage_dtype=bf16"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("session_id: cli\n"));
  EXPECT_THAT(r.out, HasSubstr("shape: layers 2, kv_heads 2, head_dim 32, "
                               "value_dim 32, bf16, max_tokens 8192"));
  EXPECT_THAT(r.out, HasSubstr("created: true"));

  r = Session({"append", "--session=cli", "--kv_tokens=100",
               "--chunk_tokens=30", "--position=0"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("chunks: 4\n"));
  EXPECT_THAT(r.out, HasSubstr("layer_tokens: [100, 0]"));
  // 7 blocks of 16 tokens × 2 heads × 64 elements × 2 bytes.
  EXPECT_THAT(r.out, HasSubstr("kv_bytes: 28672\n"));

  r = Session({"step", "--session=cli", "--heads=4", "--lnew=2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out,
              HasSubstr("session cli: tokens 102, output f32 [2, 4, 32]"));
  EXPECT_THAT(r.out, HasSubstr("timing: queue "));

  r = Session({"fork", "--session=cli", "--child=cli-child"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("parent_id: cli\n"));
  r = Session(
      {"step", "--session=cli,cli-child", "--heads=4", "--return_weights"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("session cli: tokens 103"));
  EXPECT_THAT(r.out, HasSubstr("session cli-child: tokens 103"));
  EXPECT_THAT(r.out, HasSubstr("weights [4, 1, 103]"));

  r = Session({"truncate", "--session=cli", "--kv_tokens=50"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("layer_tokens: [50, 0]"));
  r = Session({"info", "--session=cli-child"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("layer_tokens: [103, 0]"));

  r = Session({"close", "--session=cli"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Session({"info", "--session=cli"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err,
              HasSubstr("error: NOT_FOUND: session \"cli\" was closed at"));
  ASSERT_EQ(Session({"close", "--session=cli-child"}).exit_code, 0);
}

TEST_F(AttnctlSessionTest, ServerIdsAndErrors) {
  CommandResult r = Session({"create", "--kv_heads=1", "--dim=8"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, ::testing::ContainsRegex("session_id: s-[0-9a-f]{16}"));

  ASSERT_EQ(Session({"create", "--session=e", "--kv_heads=1"}).exit_code, 0);
  r = Session({"append", "--session=e", "--position=3"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT: position: 3 leaves a gap "
                               "after the 0 tokens"));
  r = Session({"step", "--session=e", "--heads=3", "--kv_heads=2"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);  // kv_heads is the session's: 1
  r = Session({"append"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--session is required for session append"));
  r = Session({"explode", "--session=e"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("unknown session action \"explode\""));
  r = Session({"create", "--storage_dtype=bool"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--storage_dtype"));
  r = RunAttnctl({"session"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("attnctl session create|append|step"));
  r = RunAttnctl({"session", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("--kv_tokens"));
}

// export --remove to a file, import into another server: the session moves
// with its tokens; the origin then answers UNAVAILABLE for it, and files
// that are missing or damaged are refused.
TEST_F(AttnctlSessionTest, ExportToAFileAndImportIntoAnotherServer) {
  testing::TempDir dir;
  ASSERT_EQ(Session({"create", "--session=mv", "--layers=2", "--kv_heads=2",
                     "--dim=16", "--storage_dtype=int8"})
                .exit_code,
            0);
  ASSERT_EQ(Session({"append", "--session=mv", "--kv_tokens=40"}).exit_code, 0);
  const std::string file = dir.Path("mv.snap");
  CommandResult r =
      Session({"export", "--session=mv", "--remove", "--file=" + file});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("exported_bytes: "));
  r = Session({"info", "--session=mv"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(r.err, HasSubstr("handed to another server"));

  auto other = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string there = "--target=" + (*other)->target();
  r = RunAttnctl({"session", "import", "--file=" + file, there});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("session_id: mv\n"));
  EXPECT_THAT(r.out, HasSubstr("layer_tokens: [40, 0]"));
  r = RunAttnctl({"session", "step", "--session=mv", "--heads=4", there});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("session mv: tokens 41"));

  r = RunAttnctl({"session", "import", "--file=" + file, there});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("ALREADY_EXISTS"));
  dir.Write("bad.snap", "these bytes are not a snapshot");
  r = RunAttnctl(
      {"session", "import", "--file=" + dir.Path("bad.snap"), there});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("DATA_LOSS"));
  r = RunAttnctl({"session", "import", "--file=" + dir.Path("none"), there});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Session({"import"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--file is required"));
}

TEST_F(AttnctlSessionTest, BenchDecodeAgainstStatelessAttend) {
  const double live_before =
      ::attnserve::testing::MetricSample(*server_, "attnserve_kv_sessions");
  CommandResult r =
      RunAttnctl({"bench", "--decode", "--sequences=2", "--prefill=100",
                  "--steps=5", "--layers=2", "--heads=4", "--kv_heads=2",
                  "--dim=16", "--stateless_steps=3", "--output_format=json",
                  "--target=" + server_->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = ::attnserve::testing::ParseJson(r);
  EXPECT_EQ(j["mode"], "decode");
  EXPECT_EQ(j["sessions"]["tokens"], 2 * 5);
  EXPECT_EQ(j["stateless"]["tokens"], 2 * 3);
  // Two sequences × two layers × 105 tokens × 2 heads × (16 + 16) × 4 bytes,
  // in blocks of 16 tokens: 7 blocks per layer.
  EXPECT_EQ(j["kv_bytes"], 2 * 2 * 7 * 16 * 2 * 32 * 4);
  EXPECT_GT(j["sessions"]["step_p50_us"].get<double>(), 0);
  // A session step sends one token; a stateless step the whole cache.
  EXPECT_LT(j["sessions"]["request_bytes_per_step"].get<int64_t>(),
            j["stateless"]["request_bytes_per_step"].get<int64_t>());
  // The sessions were closed.
  EXPECT_EQ(
      ::attnserve::testing::MetricSample(*server_, "attnserve_kv_sessions"),
      live_before);

  r = RunAttnctl({"bench", "--decode", "--heads=6", "--kv_heads=4",
                  "--target=" + server_->target()});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--heads a multiple of --kv_heads"));
}

// --stream: each sequence's steps are messages of one AttendSessionsStream,
// which the server counts under that method; the table says where a step's
// time goes.
TEST_F(AttnctlSessionTest, BenchDecodeOverAStepStream) {
  const std::string streamed =
      R"(attnserve_requests_total{code="OK",method="AttendSessionsStream"})";
  const double before = ::attnserve::testing::MetricSample(*server_, streamed);
  CommandResult r =
      RunAttnctl({"bench", "--decode", "--stream", "--sequences=2",
                  "--prefill=20", "--steps=4", "--layers=3", "--heads=4",
                  "--kv_heads=1", "--dim=16", "--stateless_steps=0",
                  "--output_format=json", "--target=" + server_->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = ::attnserve::testing::ParseJson(r);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["sessions"]["tokens"], 2 * 4);
  EXPECT_GT(j["sessions"]["server_p50_us"].get<double>(), 0);
  EXPECT_LE(j["sessions"]["compute_p50_us"].get<double>(),
            j["sessions"]["server_p50_us"].get<double>());
  // One message per layer and step (recorded just after each answer).
  EXPECT_EQ(::attnserve::testing::AwaitMetric(
                *server_, streamed, before + 2 * 4 * 3, absl::Seconds(5)) -
                before,
            2 * 4 * 3);

  r = RunAttnctl({"bench", "--decode", "--stream", "--sequences=1",
                  "--prefill=20", "--steps=2", "--heads=4", "--kv_heads=1",
                  "--dim=16", "--stateless_steps=0",
                  "--target=" + server_->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("(AttendSessionsStream): kernel "));
}

// --shm: each sequence's steps go through a step channel of its own (same
// host), int8 sessions; attnctl hangs up, so the server has freed its
// channels by the time attnctl exits.
TEST_F(AttnctlSessionTest, BenchDecodeThroughStepChannelsOfInt8Sessions) {
  const std::string channel =
      R"(attnserve_requests_total{code="OK",method="StepChannel"})";
  const double before = ::attnserve::testing::MetricSample(*server_, channel);
  CommandResult r =
      RunAttnctl({"bench", "--decode", "--shm", "--sequences=2", "--prefill=40",
                  "--steps=4", "--layers=2", "--heads=4", "--kv_heads=2",
                  "--dim=16", "--stateless_steps=0", "--storage_dtype=int8",
                  "--output_format=json", "--target=" + server_->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = ::attnserve::testing::ParseJson(r);
  EXPECT_EQ(j["same_host"], true);
  EXPECT_EQ(j["storage_dtype"], "int8");
  EXPECT_EQ(j["sessions"]["tokens"], 2 * 4);
  // 44 tokens per layer in blocks of 16: 3 blocks of 16 × 2 heads × (16 + 16
  // int8 + 8 bytes of scales), per layer and sequence.
  EXPECT_EQ(j["kv_bytes"], 2 * 2 * 3 * 16 * 2 * 40);
  EXPECT_EQ(::attnserve::testing::AwaitMetric(
                *server_, channel, before + 2 * 4 * 2, absl::Seconds(5)) -
                before,
            2 * 4 * 2);
  EXPECT_EQ(
      ::attnserve::testing::MetricSample(*server_, "attnserve_step_channels"),
      0);
}

// --tcp_channel: each sequence's steps go as frames on a TCP step channel of
// its own, connected to the host of the target; closing the sockets frees
// the channels.
TEST_F(AttnctlSessionTest, BenchDecodeThroughTcpStepChannels) {
  const std::string channel =
      R"(attnserve_requests_total{code="OK",method="StepChannel"})";
  const double before = ::attnserve::testing::MetricSample(*server_, channel);
  CommandResult r =
      RunAttnctl({"bench", "--decode", "--tcp_channel", "--sequences=2",
                  "--prefill=40", "--steps=4", "--layers=2", "--heads=4",
                  "--kv_heads=2", "--dim=16", "--stateless_steps=0",
                  "--output_format=json", "--target=" + server_->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = ::attnserve::testing::ParseJson(r);
  EXPECT_EQ(j["tcp_channel"], true);
  EXPECT_EQ(j["sessions"]["tokens"], 2 * 4);
  EXPECT_EQ(::attnserve::testing::AwaitMetric(
                *server_, channel, before + 2 * 4 * 2, absl::Seconds(5)) -
                before,
            2 * 4 * 2);
  EXPECT_EQ(::attnserve::testing::AwaitMetric(
                *server_, "attnserve_step_channels", 0, absl::Seconds(5)),
            0);

  // Not with another transport.
  CommandResult both = RunAttnctl(
      {"bench", "--decode", "--tcp_channel", "--shm", "--sequences=1",
       "--prefill=4", "--steps=1", "--target=" + server_->target()});
  EXPECT_EQ(both.exit_code, 2) << Describe(both);
  EXPECT_THAT(both.err, HasSubstr("at most one of --stream, --shm and "
                                  "--tcp_channel"));
}

}  // namespace
}  // namespace attnserve
