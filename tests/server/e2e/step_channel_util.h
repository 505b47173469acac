#ifndef ATTNSERVE_TESTS_SERVER_E2E_STEP_CHANNEL_UTIL_H_
#define ATTNSERVE_TESTS_SERVER_E2E_STEP_CHANNEL_UTIL_H_

// What the step channel suites (shared memory and TCP) share: a one-layer
// f32 session of kStepKvHeads x kStepDim and the requests that step it.

#include <signal.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/server_process.h"

namespace attnserve::testing {

inline constexpr int kStepHeads = 4;
inline constexpr int kStepKvHeads = 1;
inline constexpr int kStepDim = 64;

// Creates session `id` (one layer, f32, up to 4096 tokens); a test failure
// when the server refuses.
void CreateStepSession(const std::shared_ptr<grpc::Channel>& channel,
                       const std::string& id);

// Step `step` of session `id`: one new token's q, k, v (seeded by `step`),
// request id "step-<step>".
v1::AttendSessionsRequest StepRequest(const std::string& id, int step);

// What the step channel suites' fixtures share (each starts its server).
class StepChannelTest : public ServerTest {
 protected:
  void Create(const std::string& id) { CreateStepSession(channel(), id); }
  double OpenChannels() {
    return MetricSample(server(), "attnserve_step_channels");
  }
  // With session `id` and `steps` open on this test's server: one step
  // answered, then SIGTERM; steps go on until the channel ends, and that end
  // is UNAVAILABLE (the channel closed, or a step that raced the close
  // refused); once the channel is gone the server exits 0. `steps` is
  // anything with absl::Status Step(request, response*).
  template <typename Channel>
  void ExpectDrainEndsChannel(std::unique_ptr<Channel> steps,
                              const std::string& id) {
    v1::AttendSessionsResponse response;
    ASSERT_TRUE(steps->Step(StepRequest(id, 0), &response).ok());
    EXPECT_EQ(response.error_code(), 0);
    server().Kill(SIGTERM);
    absl::Status status;
    for (int i = 1; i <= 200 && status.ok(); ++i) {
      status = steps->Step(StepRequest(id, i), &response);
      if (status.ok() && response.error_code() != 0) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (status.ok()) {
      EXPECT_EQ(response.error_code(),
                static_cast<int>(grpc::StatusCode::UNAVAILABLE));
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    }
    steps.reset();
    absl::StatusOr<int> exit = server().WaitForExit(absl::Seconds(20));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(*exit, 0);
  }

  // Steps answered OK through step channels so far.
  double OkSteps() {
    return MetricSample(
        server(),
        "attnserve_requests_total{code=\"OK\",method=\"StepChannel\"}");
  }
};

// Steps 0 .. steps - 1 of session `through` on `channel` (as below) and of
// its twin `unary` (the same tokens) in unary AttendSessions calls: each
// answer bit-identical, with its request id and token count.
template <typename Channel>
void ExpectStepsMatchUnary(Channel& channel,
                           const std::shared_ptr<grpc::Channel>& grpc_channel,
                           const std::string& through, const std::string& unary,
                           int steps) {
  auto stub = v1::SessionService::NewStub(grpc_channel);
  for (int step = 0; step < steps; ++step) {
    v1::AttendSessionsResponse stepped, called;
    ASSERT_TRUE(channel.Step(StepRequest(through, step), &stepped).ok());
    ASSERT_EQ(stepped.error_code(), 0) << stepped.error_message();
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub->AttendSessions(&context, StepRequest(unary, step), &called).ok());
    EXPECT_EQ(stepped.request_id(), absl::StrCat("step-", step));
    ASSERT_EQ(stepped.results_size(), 1);
    EXPECT_EQ(stepped.results(0).output().data(),
              called.results(0).output().data())
        << "step " << step;
    EXPECT_EQ(stepped.results(0).tokens(), step + 1);
  }
}

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_SERVER_E2E_STEP_CHANNEL_UTIL_H_
