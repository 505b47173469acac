// Stopping and ageing a real attnserve: SIGTERM drains the calls in flight and
// refuses new ones, SIGINT exits cleanly, health turns NOT_SERVING while the
// server drains, and --max_connection_age closes connections that calls
// outlive. Each test starts its own server.

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/e2e_ops_util.h"
#include "tests/util/server_process.h"

namespace attnserve::testing {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// --shutdown_grace of the shutdown tests, and how long their exit may take.
// A server exits as soon as its calls end, so a long grace costs a passing
// test nothing and leaves a loaded, sanitized build room to finish them.
constexpr absl::Duration kGrace = absl::Seconds(60);

// Refused by a server that is shutting down: its own answer while it drains,
// or the connection is refused once its listener is closed.
::testing::Matcher<std::string> RefusedWhileShuttingDown() {
  return AnyOf(HasSubstr("server is shutting down"), ConnectFailed());
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

}  // namespace
}  // namespace attnserve::testing
