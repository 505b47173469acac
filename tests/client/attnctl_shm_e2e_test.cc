// attnctl --shm against a real attnserve process: infer through a
// shared-memory region gives the bytes path's output bit for bit, bench loads
// through it (native and v2 calls), a server without --shared_memory refuses it
// by name, and an attnctl killed mid-run leaves neither a registration on the
// server nor an object in /dev/shm (the client "going away").

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/attnctl_runner.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

extern char** environ;

namespace attnserve::client {
namespace {

using ::attnserve::testing::CommandResult;
using ::attnserve::testing::Describe;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TempDir;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The objects in /dev/shm whose names start with `prefix`.
std::vector<std::string> ShmObjects(const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix)) found.push_back(name);
  }
  return found;
}

class AttnctlShmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start(
        {"--workers=1", "--threads_per_worker=1", "--shared_memory"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  static CommandResult Run(std::vector<std::string> args) {
    args.push_back("--target=" + server_->target());
    return RunAttnctl(args);
  }

  // The regions registered on the server now.
  static int Regions() {
    auto stub = v1::SharedMemoryService::NewStub(server_->Channel());
    grpc::ClientContext context;
    v1::SharedMemoryStatusResponse response;
    const grpc::Status status =
        stub->Status(&context, v1::SharedMemoryStatusRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.regions_size();
  }

  // attnctl bench --shm --protocol=v2 (with --stream when `stream`).
  void ExpectV2LoadThroughTheRegion(bool stream);

  static ServerProcess* server_;
  TempDir dir_;
};

ServerProcess* AttnctlShmTest::server_ = nullptr;

TEST_F(AttnctlShmTest, InferGivesTheBytesPathsOutputBitForBit) {
  const std::vector<std::string> shape = {"--heads=4", "--lq=96",  "--lk=80",
                                          "--dim=32",  "--causal", "--seed=21"};
  const std::string bytes_out = dir_.path() + "/bytes.npy";
  const std::string shm_out = dir_.path() + "/shm.npy";
  const std::string bytes_weights = dir_.path() + "/bytes_w.npy";
  const std::string shm_weights = dir_.path() + "/shm_w.npy";
  std::vector<std::string> bytes_args = shape;
  bytes_args.insert(bytes_args.begin(), "infer");
  bytes_args.push_back("--out=" + bytes_out);
  bytes_args.push_back("--weights_out=" + bytes_weights);
  std::vector<std::string> shm_args = shape;
  shm_args.insert(shm_args.begin(), "infer");
  shm_args.push_back("--out=" + shm_out);
  shm_args.push_back("--weights_out=" + shm_weights);
  shm_args.push_back("--shm");
  shm_args.push_back("--check");
  const CommandResult bytes = Run(bytes_args);
  ASSERT_EQ(bytes.exit_code, 0) << Describe(bytes);
  const CommandResult shm = Run(shm_args);
  ASSERT_EQ(shm.exit_code, 0) << Describe(shm);
  EXPECT_THAT(shm.out, HasSubstr("shm      region \"attnserve_attnctl_"));
  EXPECT_THAT(shm.out, HasSubstr("check    output: "));
  EXPECT_EQ(ReadFile(shm_out), ReadFile(bytes_out));
  EXPECT_EQ(ReadFile(shm_weights), ReadFile(bytes_weights));
  EXPECT_FALSE(ReadFile(shm_out).empty());
  EXPECT_EQ(Regions(), 0);
}

// infer --protocol=v2: the ModelInfer call of the same request gives the
// native output and weights bit for bit, with the bytes in the message and
// through the region.
TEST_F(AttnctlShmTest, InferOverV2GivesTheNativeResultsBitForBit) {
  const std::vector<std::string> shape = {"infer",    "--heads=3", "--lq=33",
                                          "--lk=70",  "--dim=16",  "--causal",
                                          "--seed=5", "--check"};
  std::vector<std::string> results;
  for (const std::vector<std::string>& how :
       std::vector<std::vector<std::string>>{
           {}, {"--protocol=v2"}, {"--protocol=v2", "--shm"}}) {
    const std::string output =
        dir_.path() + "/out" + std::to_string(results.size()) + ".npy";
    const std::string weights =
        dir_.path() + "/w" + std::to_string(results.size()) + ".npy";
    std::vector<std::string> args = shape;
    args.insert(args.end(), how.begin(), how.end());
    args.push_back("--out=" + output);
    args.push_back("--weights_out=" + weights);
    const CommandResult r = Run(args);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(absl::StrContains(
                  r.out, "protocol v2 ModelInfer of model \"attention\""),
              !how.empty());
    EXPECT_THAT(r.out, HasSubstr("check    weights: "));
    results.push_back(ReadFile(output) + ReadFile(weights));
  }
  EXPECT_GT(results[0].size(), 3u * 33 * 16 * 4);
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
  EXPECT_EQ(Regions(), 0);
}

TEST_F(AttnctlShmTest, InferOverV2RefusesALongSequenceVariant) {
  const CommandResult r = Run({"infer", "--protocol=v2", "--method=linear"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--protocol=v2 cannot carry linear attention"));
}

TEST_F(AttnctlShmTest, BenchLoadsThroughTheRegion) {
  const CommandResult r =
      Run({"bench", "--shm", "--heads=2", "--lq=64", "--lk=64", "--dim=32",
           "--duration=1s", "--warmup=0s", "--concurrency=2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("; shm region attnserve_attnctl_"));
  EXPECT_THAT(r.out, HasSubstr("errors 0"));
  EXPECT_EQ(Regions(), 0);
}

// ModelInfer calls with Triton's shared-memory parameters: small messages
// both ways (an output sent back as bytes would be 16 KiB), every answer
// understood, nothing left registered.
TEST_F(AttnctlShmTest, BenchLoadsThroughTheRegionOverV2) {
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "ModelStreamInfer" : "ModelInfer");
    ExpectV2LoadThroughTheRegion(stream);
  }
}

void AttnctlShmTest::ExpectV2LoadThroughTheRegion(bool stream) {
  std::vector<std::string> args = {"bench",
                                   "--shm",
                                   "--protocol=v2",
                                   "--heads=2",
                                   "--lq=64",
                                   "--lk=64",
                                   "--dim=32",
                                   "--duration=1s",
                                   "--warmup=0s",
                                   "--concurrency=2",
                                   "--output_format=json"};
  if (stream) args.push_back("--stream");
  const CommandResult r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["method"], stream ? "ModelStreamInfer" : "ModelInfer");
  EXPECT_THAT(j["request"]["description"].get<std::string>(),
              HasSubstr("; shm region attnserve_attnctl_"));
  EXPECT_THAT(j["request"]["description"].get<std::string>(),
              HasSubstr("v2 of "));
  // q, k and v are 16 KiB each: the message carries references only.
  EXPECT_LT(j["request"]["bytes"].get<int64_t>(), 1024);
  ASSERT_GT(j["ok"].get<int64_t>(), 0);
  const double bytes_per_call = j["mb_per_s"].get<double>() * 1e6 *
                                j["elapsed_s"].get<double>() /
                                j["ok"].get<double>();
  EXPECT_LT(bytes_per_call, 2048);
  EXPECT_TRUE(j["errors"].empty()) << j["errors"].dump();
  EXPECT_GT(j["server_us"]["compute_p50"].get<double>(), 0);
  EXPECT_EQ(Regions(), 0);
}

TEST_F(AttnctlShmTest, BenchRefusesShmWithAHostedModel) {
  const CommandResult r =
      Run({"bench", "--shm", "--model=mha_post", "--duration=1s"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--shm loads Attend calls (native or v2)"));
}

TEST_F(AttnctlShmTest, AKilledClientLeavesNoRegistrationAndNoObject) {
  std::vector<std::string> args = {ATTNSERVE_ATTNCTL_BINARY,
                                   "bench",
                                   "--shm",
                                   "--heads=2",
                                   "--lq=64",
                                   "--dim=32",
                                   "--duration=60s",
                                   "--warmup=0s",
                                   "--target=" + server_->target()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                   O_WRONLY, 0);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  const std::string objects = absl::StrCat("attnserve_attnctl_", pid, "_");
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Regions() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(Regions(), 1);
  // Registered means unlinked: nothing to clean up even after SIGKILL.
  EXPECT_THAT(ShmObjects(objects), ::testing::IsEmpty());
  absl::SleepFor(absl::Milliseconds(300));  // under load
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  deadline = absl::Now() + absl::Seconds(10);
  while (Regions() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Regions(), 0) << server_->Log();
  EXPECT_THAT(server_->Log(), HasSubstr("\" released"));
  EXPECT_THAT(ShmObjects(objects), ::testing::IsEmpty());
}

TEST(AttnctlShmOffTest, AServerWithoutSharedMemoryRefusesByName) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  const CommandResult r =
      RunAttnctl({"infer", "--shm", "--heads=2", "--lq=8", "--dim=8",
                  "--target=" + (*server)->target()});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: FAILED_PRECONDITION: shared memory: "
                               "Status: FAILED_PRECONDITION: shared memory "
                               "is off on this server (start it with "
                               "--shared_memory)"));
}

}  // namespace
}  // namespace attnserve::client
