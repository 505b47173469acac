// TCP step channels through a real attnserve process, driven as a client
// does (the StepChannel call with tcp, a connection to the port it names,
// the token, frames of wire/step_socket.h): steps answered bit-identical to
// unary AttendSessions on twin sessions; per-step errors (an unknown session,
// bytes that are no request, a frame past the limit) answered on the socket
// with the channel going on; a wrong token; the channel limit shared with
// shared-memory channels; a hang-up (closing the socket) ending the call OK
// with the channel freed; a cancelled call closing the socket; draining; the
// default listener on loopback naming the server's host; the flags that
// turn them off or refuse to start.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/server/e2e/step_channel_util.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"
#include "wire/step_socket.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::StepRequest;
using ::testing::HasSubstr;

// A TCP step channel, open while it lives.
class TcpChannel {
 public:
  // The open call's status when it was refused. With `connect` false the
  // socket is not connected (a test connects it by hand).
  static absl::StatusOr<std::unique_ptr<TcpChannel>> Open(
      const std::shared_ptr<grpc::Channel>& channel, bool connect = true) {
    std::unique_ptr<TcpChannel> c(new TcpChannel(channel));
    v1::OpenStepChannelRequest open;
    open.set_tcp(true);
    c->call_ = c->stub_->StepChannel(&c->context_, open);
    if (!c->call_->Read(&c->info_)) {
      const grpc::Status status = c->call_->Finish();
      c->call_.reset();
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    if (connect) {
      absl::StatusOr<wire::StepSocket> socket =
          c->Connect(c->info_.tcp_token());
      if (!socket.ok()) return socket.status();
      c->socket_.emplace(*std::move(socket));
    }
    return c;
  }
  ~TcpChannel() {
    if (call_ != nullptr) {
      context_.TryCancel();
      call_->Finish();
    }
  }

  // A connection to the channel's port that sent `token`.
  absl::StatusOr<wire::StepSocket> Connect(const std::string& token) const {
    absl::StatusOr<wire::StepSocket> socket = wire::StepSocket::Connect(
        "127.0.0.1", info_.tcp_port(), absl::Now() + absl::Seconds(10));
    if (socket.ok()) {
      absl::Status sent = socket->SendRaw(token);
      if (!sent.ok()) return sent;
    }
    return socket;
  }

  absl::Status StepBytes(const std::string& bytes, std::string* answer) {
    absl::Status status = socket_->SendFrame(bytes);
    if (!status.ok()) return status;
    return socket_->ReceiveFrame(
        info_.response_capacity(), absl::Microseconds(100),
        absl::Now() + absl::Seconds(30), nullptr, answer);
  }

  absl::Status Step(const v1::AttendSessionsRequest& request,
                    v1::AttendSessionsResponse* response) {
    std::string answer;
    absl::Status status = StepBytes(request.SerializeAsString(), &answer);
    if (!status.ok()) return status;
    if (!response->ParseFromString(answer)) {
      return absl::InternalError("the answer is not an AttendSessionsResponse");
    }
    return absl::OkStatus();
  }

  // Closes the socket; the call's status once the server ended it.
  grpc::Status HangUp() {
    socket_.reset();
    const grpc::Status status = call_->Finish();
    call_.reset();
    return status;
  }

  void Cancel() { context_.TryCancel(); }

  const v1::StepChannelInfo& info() const { return info_; }
  wire::StepSocket& socket() { return *socket_; }

 private:
  explicit TcpChannel(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(v1::SessionService::NewStub(channel)) {}

  std::unique_ptr<v1::SessionService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::StepChannelInfo>> call_;
  v1::StepChannelInfo info_;
  std::optional<wire::StepSocket> socket_;
};

class TcpStepChannelE2eTest : public testing::StepChannelTest {
 protected:
  static void SetUpTestSuite() {
    StartSuiteServer({"--workers=1", "--threads_per_worker=1",
                      "--step_channels=2", "--step_channel_listen=127.0.0.1:0",
                      "--max_message_bytes=2097152"});
  }

  absl::StatusOr<std::unique_ptr<TcpChannel>> Open(bool connect = true) {
    return TcpChannel::Open(channel(), connect);
  }
};

TEST_F(TcpStepChannelE2eTest, StepsAreBitIdenticalToUnaryCalls) {
  Create("tcp-twin");
  Create("tcp-unary-twin");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_GT((*steps)->info().tcp_port(), 0);
  EXPECT_EQ((*steps)->info().tcp_token().size(), wire::kStepTokenBytes);
  EXPECT_EQ((*steps)->info().request_capacity(), 2097152);
  testing::ExpectStepsMatchUnary(**steps, channel(), "tcp-twin",
                                 "tcp-unary-twin", 300);
  EXPECT_GE(OkSteps(), 300);
}

TEST_F(TcpStepChannelE2eTest, BadStepsAreAnsweredAndTheChannelGoesOn) {
  Create("tcp-goes-on");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  TcpChannel& c = **steps;
  v1::AttendSessionsResponse response;
  ASSERT_TRUE(c.Step(StepRequest("no-such-session", 0), &response).ok());
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(response.error_message(), HasSubstr("no-such-session"));
  EXPECT_EQ(response.request_id(), "step-0");

  std::string answer;
  ASSERT_TRUE(c.StepBytes("\xff\xff\xff garbage", &answer).ok());
  ASSERT_TRUE(response.ParseFromString(answer));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(response.error_message(),
              HasSubstr("not an AttendSessionsRequest"));

  // A frame past --max_message_bytes: skipped, refused.
  ASSERT_TRUE(c.StepBytes(std::string(2097153, 'x'), &answer).ok());
  ASSERT_TRUE(response.ParseFromString(answer));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(response.error_message(), HasSubstr("2097153 bytes"));

  ASSERT_TRUE(c.Step(StepRequest("tcp-goes-on", 0), &response).ok());
  EXPECT_EQ(response.error_code(), 0) << response.error_message();
  EXPECT_EQ(response.results(0).tokens(), 1);
}

TEST_F(TcpStepChannelE2eTest, OnlyTheTokenOpensTheSocket) {
  auto steps = Open(/*connect=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::string wrong = (*steps)->info().tcp_token();
  wrong[5] = static_cast<char>(wrong[5] ^ 0x40);
  absl::StatusOr<wire::StepSocket> intruder = (*steps)->Connect(wrong);
  ASSERT_TRUE(intruder.ok()) << intruder.status();
  std::string frame;
  EXPECT_EQ(intruder
                ->ReceiveFrame(1 << 20, absl::ZeroDuration(),
                               absl::Now() + absl::Seconds(10), nullptr, &frame)
                .code(),
            absl::StatusCode::kUnavailable);
  // The right one still works, once.
  absl::StatusOr<wire::StepSocket> client =
      (*steps)->Connect((*steps)->info().tcp_token());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(client->SendFrame("x").ok());
  ASSERT_TRUE(client
                  ->ReceiveFrame(1 << 20, absl::ZeroDuration(),
                                 absl::Now() + absl::Seconds(10), nullptr,
                                 &frame)
                  .ok());
  v1::AttendSessionsResponse response;
  ASSERT_TRUE(response.ParseFromString(frame));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  absl::StatusOr<wire::StepSocket> twice =
      (*steps)->Connect((*steps)->info().tcp_token());
  ASSERT_TRUE(twice.ok()) << twice.status();
  EXPECT_EQ(twice
                ->ReceiveFrame(1 << 20, absl::ZeroDuration(),
                               absl::Now() + absl::Seconds(10), nullptr, &frame)
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TcpStepChannelE2eTest, TheLimitHoldsAndEveryEndFreesTheChannel) {
  Create("tcp-hangup");
  const double before = OpenChannels();
  auto first = Open();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Open();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(OpenChannels(), before + 2);
  auto third = Open();
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("--step_channels"));

  // Closing the socket is the hang-up: the call ends OK, the channel freed
  // before.
  v1::AttendSessionsResponse response;
  ASSERT_TRUE((*first)->Step(StepRequest("tcp-hangup", 0), &response).ok());
  const grpc::Status ended = (*first)->HangUp();
  EXPECT_TRUE(ended.ok()) << ended.error_message();
  auto replacement = Open();
  ASSERT_TRUE(replacement.ok()) << replacement.status();

  // A cancelled call frees the channel and closes its socket.
  (*second)->Cancel();
  EXPECT_EQ(testing::AwaitMetricAtMost(server(), "attnserve_step_channels",
                                       before + 1),
            before + 1);
  EXPECT_EQ((*second)->Step(StepRequest("tcp-hangup", 1), &response).code(),
            absl::StatusCode::kUnavailable);
  auto another = Open();
  EXPECT_TRUE(another.ok()) << another.status();
}

TEST_F(TcpStepChannelE2eTest, RequestRules) {
  auto stub = v1::SessionService::NewStub(channel());
  v1::OpenStepChannelRequest open;
  open.set_tcp(true);
  open.set_region("a-region");
  grpc::ClientContext context;
  auto call = stub->StepChannel(&context, open);
  v1::StepChannelInfo info;
  EXPECT_FALSE(call->Read(&info));
  const grpc::Status both = call->Finish();
  EXPECT_EQ(both.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(both.error_message(), HasSubstr("takes no region"));

  // This server has no --shared_memory: rings are refused, naming it.
  open.set_tcp(false);
  grpc::ClientContext ring_context;
  auto ring = stub->StepChannel(&ring_context, open);
  EXPECT_FALSE(ring->Read(&info));
  const grpc::Status refused = ring->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("--shared_memory"));
}

TEST_F(TcpStepChannelE2eTest, OffWithAnEmptyListenFlag) {
  StartServer(
      {"--shared_memory", "--step_channels=1", "--step_channel_listen="});
  auto steps = Open();
  EXPECT_EQ(steps.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(steps.status().message(), HasSubstr("--step_channel_listen"));
}

TEST_F(TcpStepChannelE2eTest, OnByDefaultOnLoopbackNamingTheServersHost) {
  StartServer({});
  EXPECT_THAT(server().Log(), HasSubstr("step_channels=8 "));
  Create("tcp-default");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  // "<boot id>/net:[inode]": the kernel's boot and this network namespace.
  const std::string& host = (*steps)->info().host_id();
  EXPECT_THAT(host, ::testing::MatchesRegex("[0-9a-f-]{36}/net:\\[[0-9]+\\]"));
  v1::AttendSessionsResponse response;
  ASSERT_TRUE((*steps)->Step(StepRequest("tcp-default", 0), &response).ok());
  EXPECT_EQ(response.error_code(), 0) << response.error_message();
  EXPECT_EQ(response.results_size(), 1);
}

TEST_F(TcpStepChannelE2eTest, OffWithZeroChannels) {
  StartServer({"--step_channels=0"});
  EXPECT_THAT(server().Log(), ::testing::Not(HasSubstr("step_channel_port=")));
  auto steps = Open();
  EXPECT_EQ(steps.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(steps.status().message(), HasSubstr("--step_channels"));
}

TEST_F(TcpStepChannelE2eTest, DrainingClosesOpenChannels) {
  StartServer({"--step_channels=1", "--step_channel_listen=127.0.0.1:0",
               "--shutdown_grace=5s"});
  Create("tcp-drained");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ExpectDrainEndsChannel(*std::move(steps), "tcp-drained");
}

TEST(TcpStepChannelFlagsTest, RefusedCombinationsExitWithAClearMessage) {
  struct Case {
    std::vector<std::string> flags;
    std::string fragment;
  };
  for (const Case& c : std::vector<Case>{
           {{"--step_channels=0", "--step_channel_listen=127.0.0.1:0"},
            "--step_channel_listen needs --step_channels=N"},
           {{"--step_channels=1", "--step_channel_listen=127.0.0.1:99999"},
            "--step_channel_listen: the port"},
           {{"--step_channels=1", "--step_channel_listen=127.0.0.1:0",
             "--tls_cert=/nonexistent/cert.pem",
             "--tls_key=/nonexistent/key.pem"},
            "TCP step channels are not encrypted"},
       }) {
    SCOPED_TRACE(c.flags.front());
    std::vector<std::string> flags = c.flags;
    flags.push_back("--metrics_listen=");
    auto server = ServerProcess::Start(flags);
    EXPECT_THAT(server.status(),
                StatusIs(absl::StatusCode::kInternal, HasSubstr(c.fragment)));
  }
}

}  // namespace
}  // namespace attnserve
