// The TCP step channels' listener (server/step_listener.h) with real
// loopback connections: a token's connection handed to its waiter, a token
// sent in pieces, a wrong token closed, a token used once, waits that end on
// stop and on their timeout, connections that never send one, bad addresses.

#include "server/step_listener.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<wire::StepSocket> ConnectTo(const StepListener& listener) {
  return wire::StepSocket::Connect("127.0.0.1", listener.port(),
                                   absl::Now() + absl::Seconds(10));
}

std::unique_ptr<StepListener> Listen() {
  absl::StatusOr<std::unique_ptr<StepListener>> listener =
      StepListener::Start("127.0.0.1:0");
  EXPECT_TRUE(listener.ok()) << listener.status();
  return listener.ok() ? *std::move(listener) : nullptr;
}

const auto kNever = [] { return false; };

// Whether the server's side closed `client` within a few seconds.
bool ClosedByServer(wire::StepSocket& client) {
  std::string frame;
  return absl::IsUnavailable(
      client.ReceiveFrame(1 << 20, absl::ZeroDuration(),
                          absl::Now() + absl::Seconds(10), nullptr, &frame));
}

TEST(StepListenerTest, TheTokensConnectionReachesItsWaiter) {
  auto listener = Listen();
  ASSERT_NE(listener, nullptr);
  EXPECT_GT(listener->port(), 0);
  const std::string token = listener->Issue();
  EXPECT_EQ(token.size(), wire::kStepTokenBytes);
  EXPECT_NE(token, listener->Issue());

  auto client = ConnectTo(*listener);
  ASSERT_TRUE(client.ok()) << client.status();
  // The token in two pieces, the second after a pause.
  ASSERT_TRUE(client->SendRaw(token.substr(0, 10)).ok());
  absl::SleepFor(absl::Milliseconds(60));
  ASSERT_TRUE(client->SendRaw(token.substr(10)).ok());
  absl::StatusOr<wire::StepSocket> served =
      listener->Await(token, absl::Seconds(10), kNever);
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_TRUE(client->SendFrame("first step").ok());
  std::string frame;
  ASSERT_TRUE(served
                  ->ReceiveFrame(1 << 20, absl::ZeroDuration(),
                                 absl::Now() + absl::Seconds(10), nullptr,
                                 &frame)
                  .ok());
  EXPECT_EQ(frame, "first step");

  // Used once: a second connection with it is closed.
  auto again = ConnectTo(*listener);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(again->SendRaw(token).ok());
  EXPECT_TRUE(ClosedByServer(*again));
}

TEST(StepListenerTest, AWrongTokenIsClosedAndTheWaitTimesOut) {
  auto listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string token = listener->Issue();
  auto client = ConnectTo(*listener);
  ASSERT_TRUE(client.ok()) << client.status();
  std::string wrong = token;
  wrong[0] = static_cast<char>(wrong[0] ^ 1);
  ASSERT_TRUE(client->SendRaw(wrong).ok());
  EXPECT_TRUE(ClosedByServer(*client));
  absl::StatusOr<wire::StepSocket> served =
      listener->Await(token, absl::Milliseconds(100), kNever);
  EXPECT_EQ(served.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(served.status().message(), HasSubstr("did not connect"));
  // The token lapsed with the wait.
  auto late = ConnectTo(*listener);
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_TRUE(late->SendRaw(token).ok());
  EXPECT_TRUE(ClosedByServer(*late));
}

TEST(StepListenerTest, AWithdrawnTokenAdmitsNoConnection) {
  auto listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string token = listener->Issue();
  listener->Withdraw(token);
  listener->Withdraw(token);  // twice is fine
  auto client = ConnectTo(*listener);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(client->SendRaw(token).ok());
  EXPECT_TRUE(ClosedByServer(*client));
}

TEST(StepListenerTest, AWaitEndsWhenStopped) {
  auto listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string token = listener->Issue();
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stop.store(true);
  });
  absl::StatusOr<wire::StepSocket> served =
      listener->Await(token, absl::Seconds(30), [&] { return stop.load(); });
  stopper.join();
  EXPECT_EQ(served.status().code(), absl::StatusCode::kCancelled);
}

TEST(StepListenerTest, SilentConnectionsNeitherBlockOthersNorStayForever) {
  auto listener = Listen();
  ASSERT_NE(listener, nullptr);
  // More silent connections than may wait: the oldest are closed at once.
  std::vector<wire::StepSocket> silent;
  for (int i = 0; i < StepListener::kMaxPending + 4; ++i) {
    auto c = ConnectTo(*listener);
    ASSERT_TRUE(c.ok()) << c.status();
    silent.push_back(*std::move(c));
  }
  EXPECT_TRUE(ClosedByServer(silent.front()));
  // A real client still gets through.
  const std::string token = listener->Issue();
  auto client = ConnectTo(*listener);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(client->SendRaw(token).ok());
  EXPECT_TRUE(listener->Await(token, absl::Seconds(10), kNever).ok());
  // And a silent one is closed after the token timeout.
  EXPECT_TRUE(ClosedByServer(silent.back()));
}

TEST(StepListenerTest, BadAddressesAreRefused) {
  for (const char* address :
       {"nowhere", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:port"}) {
    absl::StatusOr<std::unique_ptr<StepListener>> listener =
        StepListener::Start(address);
    EXPECT_EQ(listener.status().code(), absl::StatusCode::kInvalidArgument)
        << address;
    EXPECT_THAT(listener.status().message(),
                HasSubstr("--step_channel_listen"));
  }
  auto taken = Listen();
  ASSERT_NE(taken, nullptr);
  absl::StatusOr<std::unique_ptr<StepListener>> again =
      StepListener::Start(absl::StrCat("127.0.0.1:", taken->port()));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace attnserve::server
