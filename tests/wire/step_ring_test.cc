// The step channel's ring between two threads of one process: the layout,
// the round trip with and without polling (the futex path), and every way a
// side stops waiting.

#include "wire/step_ring.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::wire {
namespace {

using ::testing::HasSubstr;

struct Region {
  explicit Region(int64_t size)
      : size(size),
        bytes(static_cast<char*>(std::aligned_alloc(64, size)), &std::free) {
    std::memset(bytes.get(), 0xAB, size);
  }
  int64_t size;
  std::unique_ptr<char, decltype(&std::free)> bytes;
};

TEST(StepRingTest, LaysOutHalvesAndTheClientReadsTheSameLayout) {
  Region region(64 * 1024);
  absl::StatusOr<StepRing> server =
      StepRing::Create(region.bytes.get(), region.size);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->request_capacity(), (64 * 1024 - 256) / 2 / 64 * 64);
  EXPECT_EQ(server->request_capacity() + server->response_capacity(),
            64 * 1024 - 256);
  absl::StatusOr<StepRing> client =
      StepRing::Attach(region.bytes.get(), region.size);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->request_capacity(), server->request_capacity());
  EXPECT_EQ(client->response_capacity(), server->response_capacity());
  uint32_t magic;
  std::memcpy(&magic, region.bytes.get(), 4);
  EXPECT_EQ(magic, kStepRingMagic);
}

TEST(StepRingTest, RefusesSmallMisalignedAndForeignRegions) {
  Region region(kStepRingMinBytes + 64);
  absl::StatusOr<StepRing> small =
      StepRing::Create(region.bytes.get(), kStepRingMinBytes - 1);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("at least 16384"));
  EXPECT_EQ(StepRing::Create(region.bytes.get() + 8, kStepRingMinBytes)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Bytes no server laid out.
  absl::StatusOr<StepRing> foreign =
      StepRing::Attach(region.bytes.get(), region.size);
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  // A header whose slots run past the bytes given.
  ASSERT_TRUE(StepRing::Create(region.bytes.get(), region.size).ok());
  EXPECT_FALSE(StepRing::Attach(region.bytes.get(), region.size / 2).ok());
}

// A server thread that answers every request with "<request>!" until
// stopped; `spin` for both sides.
void RoundTrips(absl::Duration spin) {
  Region region(32 * 1024);
  StepRing server = *StepRing::Create(region.bytes.get(), region.size);
  StepRing client = *StepRing::Attach(region.bytes.get(), region.size);
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::thread thread([&] {
    std::string request;
    while (server.WaitForRequest(spin, [&] { return stop.load(); })) {
      ASSERT_TRUE(server.TakeRequest(&request).ok());
      server.Respond(request + "!");
      ++served;
    }
  });
  std::string response;
  for (int i = 0; i < 2000; ++i) {
    // Of changing lengths, some of them empty.
    const std::string request(static_cast<size_t>(i % 97), 'a' + i % 26);
    ASSERT_TRUE(client.Call(request, &response, spin).ok()) << i;
    ASSERT_EQ(response, request + "!") << i;
    if (i % 500 == 0) absl::SleepFor(absl::Milliseconds(2));  // a sleeper
  }
  stop = true;
  server.Interrupt();
  thread.join();
  EXPECT_EQ(served.load(), 2000);
}

TEST(StepRingTest, RoundTripsWhilePolling) {
  RoundTrips(absl::Milliseconds(5));
}

TEST(StepRingTest, RoundTripsThroughTheFutexAlone) {
  RoundTrips(absl::ZeroDuration());
}

TEST(StepRingTest, RequestsLargerThanTheSlotAreRefusedOnBothSides) {
  Region region(kStepRingMinBytes);
  StepRing server = *StepRing::Create(region.bytes.get(), region.size);
  StepRing client = *StepRing::Attach(region.bytes.get(), region.size);
  std::string response;
  const absl::Status too_big =
      client.Call(std::string(client.request_capacity() + 1, 'x'), &response,
                  absl::ZeroDuration());
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("does not fit"));
  // A client that writes a length past the slot by hand.
  uint32_t seq = 1, bytes = static_cast<uint32_t>(region.size);
  std::memcpy(region.bytes.get() + 68, &bytes, 4);
  std::memcpy(region.bytes.get() + 64, &seq, 4);
  ASSERT_TRUE(
      server.WaitForRequest(absl::ZeroDuration(), [] { return false; }));
  std::string request;
  const absl::Status taken = server.TakeRequest(&request);
  EXPECT_EQ(taken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(taken.message(), HasSubstr("request_bytes"));
}

TEST(StepRingTest, CloseWakesAWaitingClient) {
  Region region(kStepRingMinBytes);
  StepRing server = *StepRing::Create(region.bytes.get(), region.size);
  StepRing client = *StepRing::Attach(region.bytes.get(), region.size);
  std::thread closer([&] {
    ASSERT_TRUE(
        server.WaitForRequest(absl::ZeroDuration(), [] { return false; }));
    server.Close();  // never answers
  });
  std::string response;
  const absl::Status status = client.Call("x", &response, absl::ZeroDuration());
  closer.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  // And every later call at once.
  EXPECT_EQ(client.Call("y", &response, absl::ZeroDuration()).code(),
            absl::StatusCode::kUnavailable);
}

TEST(StepRingTest, InterruptWakesASleepingServerToStop) {
  Region region(kStepRingMinBytes);
  StepRing server = *StepRing::Create(region.bytes.get(), region.size);
  std::atomic<bool> stop{false};
  std::atomic<bool> returned{false};
  bool got_request = true;
  std::thread waiter([&] {
    got_request = server.WaitForRequest(absl::ZeroDuration(),
                                        [&] { return stop.load(); });
    returned = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(returned.load());
  stop = true;
  server.Interrupt();
  waiter.join();
  EXPECT_FALSE(got_request);
}

TEST(StepRingTest, AHangUpWakesASleepingServerToStop) {
  Region region(kStepRingMinBytes);
  StepRing server = *StepRing::Create(region.bytes.get(), region.size);
  StepRing client = *StepRing::Attach(region.bytes.get(), region.size);
  EXPECT_FALSE(server.hung_up());
  bool got_request = true;
  std::thread waiter([&] {
    got_request =
        server.WaitForRequest(absl::ZeroDuration(), [] { return false; });
  });
  absl::SleepFor(absl::Milliseconds(50));
  client.Hangup();
  waiter.join();
  EXPECT_FALSE(got_request);
  EXPECT_TRUE(server.hung_up());
}

TEST(StepRingTest, AClientGivesUpAtItsDeadline) {
  Region region(kStepRingMinBytes);
  ASSERT_TRUE(StepRing::Create(region.bytes.get(), region.size).ok());
  StepRing client = *StepRing::Attach(region.bytes.get(), region.size);
  std::string response;
  const absl::Status status = client.Call("x", &response, absl::ZeroDuration(),
                                          absl::Now() + absl::Milliseconds(30));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace attnserve::wire
