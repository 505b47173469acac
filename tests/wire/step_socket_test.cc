// The TCP step channel's framing (wire/step_socket.h) over a socket pair and
// over loopback TCP: frames both ways, a frame past the limit refused with its
// bytes skipped, the peer closing before or inside a frame, stop and deadline,
// a connection to a port where nobody listens.

#include "wire/step_socket.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::wire {
namespace {

using ::testing::HasSubstr;

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a.emplace(fds[0]);
    b.emplace(fds[1]);
  }
  std::optional<StepSocket> a, b;
};

absl::Status Receive(StepSocket& s, std::string* frame,
                     int64_t max_bytes = 1 << 20,
                     absl::Duration within = absl::Seconds(10)) {
  return s.ReceiveFrame(max_bytes, absl::Microseconds(50), absl::Now() + within,
                        nullptr, frame);
}

TEST(StepSocketTest, FramesGoBothWays) {
  Pair p;
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  // A large frame needs the reader going while it is written.
  std::thread writer([&] {
    ASSERT_TRUE(p.a->SendFrame("hello").ok());
    ASSERT_TRUE(p.a->SendFrame("").ok());
    ASSERT_TRUE(p.a->SendFrame(big).ok());
  });
  std::string frame;
  ASSERT_TRUE(Receive(*p.b, &frame).ok());
  EXPECT_EQ(frame, "hello");
  ASSERT_TRUE(Receive(*p.b, &frame).ok());
  EXPECT_EQ(frame, "");
  ASSERT_TRUE(Receive(*p.b, &frame).ok());
  EXPECT_EQ(frame, big);
  writer.join();
  ASSERT_TRUE(p.b->SendFrame("back").ok());
  ASSERT_TRUE(Receive(*p.a, &frame).ok());
  EXPECT_EQ(frame, "back");
}

TEST(StepSocketTest, AFramePastTheLimitIsSkippedAndTheNextOneRead) {
  Pair p;
  ASSERT_TRUE(p.a->SendFrame(std::string(5000, 'x')).ok());
  ASSERT_TRUE(p.a->SendFrame("next").ok());
  std::string frame;
  const absl::Status refused = Receive(*p.b, &frame, 4096);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("5000 bytes"));
  EXPECT_THAT(refused.message(), HasSubstr("4096"));
  ASSERT_TRUE(Receive(*p.b, &frame, 4096).ok());
  EXPECT_EQ(frame, "next");
}

TEST(StepSocketTest, APeerClosingBeforeAFrameIsUnavailableInsideOneDataLoss) {
  {
    Pair p;
    p.a.reset();
    std::string frame;
    EXPECT_EQ(Receive(*p.b, &frame).code(), absl::StatusCode::kUnavailable);
  }
  {
    Pair p;
    // A length of 100 and 3 bytes of it.
    ASSERT_TRUE(p.a->SendRaw(std::string("\x64\0\0\0abc", 7)).ok());
    p.a.reset();
    std::string frame;
    EXPECT_EQ(Receive(*p.b, &frame).code(), absl::StatusCode::kDataLoss);
  }
}

TEST(StepSocketTest, ALongFrameAnnouncedHoldsOnlyWhatCame) {
  Pair p;
  // 64 MiB announced, 10 bytes sent.
  ASSERT_TRUE(p.a->SendRaw(std::string("\0\0\0\x04"
                                       "0123456789",
                                       14))
                  .ok());
  std::string frame;
  EXPECT_EQ(
      Receive(*p.b, &frame, int64_t{1} << 30, absl::Milliseconds(30)).code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_LE(frame.capacity(), size_t{4} << 20);
}

TEST(StepSocketTest, WaitsEndOnStopAndOnTheDeadline) {
  Pair p;
  std::string frame;
  EXPECT_EQ(Receive(*p.b, &frame, 1 << 20, absl::Milliseconds(30)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(30));
    stop.store(true);
  });
  const absl::Status stopped = p.b->ReceiveFrame(
      1 << 20, absl::ZeroDuration(), absl::InfiniteFuture(),
      [&] { return stop.load(); }, &frame);
  stopper.join();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled);
}

TEST(StepSocketTest, ShutdownWakesTheOtherSide) {
  Pair p;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    p.a->Shutdown();
  });
  std::string frame;
  EXPECT_EQ(Receive(*p.b, &frame).code(), absl::StatusCode::kUnavailable);
  closer.join();
}

TEST(StepSocketTest, ConnectsOverLoopbackTcpAndNamesAnAddressNobodyListensOn) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t size = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size);
  const int port = ntohs(address.sin_port);

  absl::StatusOr<StepSocket> client =
      StepSocket::Connect("127.0.0.1", port, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  StepSocket server(accept(listener, nullptr, nullptr));
  ASSERT_TRUE(client->SendRaw(std::string(kStepTokenBytes, 't')).ok());
  char token[kStepTokenBytes];
  ASSERT_TRUE(server
                  .ReceiveRaw(token, kStepTokenBytes, absl::ZeroDuration(),
                              absl::Now() + absl::Seconds(10), nullptr)
                  .ok());
  EXPECT_EQ(std::string(token, kStepTokenBytes),
            std::string(kStepTokenBytes, 't'));
  ASSERT_TRUE(client->SendFrame("step").ok());
  std::string frame;
  ASSERT_TRUE(Receive(server, &frame).ok());
  EXPECT_EQ(frame, "step");
  close(listener);

  // The port is free again: nobody listens there.
  absl::StatusOr<StepSocket> refused =
      StepSocket::Connect("127.0.0.1", port, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", port)));
}

}  // namespace
}  // namespace attnserve::wire
