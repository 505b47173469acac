// Same-host step channels through a real attnserve process, driven as a
// client does (a registered shared-memory object, the StepChannel call, the
// ring of wire/step_ring.h): steps answered bit-identical to unary
// AttendSessions on twin sessions; per-step errors (an unknown session, bytes
// that are no request) answered in the ring with the channel going on; the
// flags, the channel limit and the region rules; a cancelled channel freed;
// draining closes open channels; metrics.

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/server/e2e/step_channel_util.h"
#include "tests/util/shm_object.h"
#include "wire/step_ring.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ShmObject;
using ::attnserve::testing::StepRequest;
using ::testing::HasSubstr;

// A shared-memory object of this process's, registered while it lives.
class Region {
 public:
  Region(const std::shared_ptr<grpc::Channel>& channel, int64_t size)
      : object_(size), stub_(v1::SharedMemoryService::NewStub(channel)) {
    v1::RegisterSharedMemoryRequest request;
    request.set_name(object_.key());
    request.set_key(object_.key());
    request.set_byte_size(size);
    lease_ = stub_->Register(&context_, request);
    v1::SharedMemoryLease first;
    EXPECT_TRUE(lease_->Read(&first)) << "Register " << object_.key();
  }
  ~Region() {
    context_.TryCancel();
    lease_->Finish();
  }
  const std::string& name() const { return object_.key(); }
  char* data() const { return object_.data(); }

 private:
  ShmObject object_;
  std::unique_ptr<v1::SharedMemoryService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::SharedMemoryLease>> lease_;
};

// A step channel over a Region of its own, open while it lives.
class Channel {
 public:
  // The open call's status when it was refused (then Step must not be
  // called).
  static absl::StatusOr<std::unique_ptr<Channel>> Open(
      const std::shared_ptr<grpc::Channel>& channel, int64_t size) {
    std::unique_ptr<Channel> c(new Channel(channel, size));
    v1::OpenStepChannelRequest open;
    open.set_region(c->region_.name());
    c->call_ = c->stub_->StepChannel(&c->context_, open);
    if (!c->call_->Read(&c->info_)) {
      const grpc::Status status = c->call_->Finish();
      c->call_.reset();
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    absl::StatusOr<wire::StepRing> ring =
        wire::StepRing::Attach(c->region_.data(), size);
    if (!ring.ok()) return ring.status();
    c->ring_.emplace(*ring);
    return c;
  }
  ~Channel() {
    if (call_ != nullptr) {
      context_.TryCancel();
      call_->Finish();
    }
  }

  absl::Status Step(const v1::AttendSessionsRequest& request,
                    v1::AttendSessionsResponse* response) {
    std::string answer;
    const absl::Status status =
        ring_->Call(request.SerializeAsString(), &answer, absl::Milliseconds(1),
                    absl::Now() + absl::Seconds(30));
    if (!status.ok()) return status;
    if (!response->ParseFromString(answer)) {
      return absl::InternalError("the answer is not an AttendSessionsResponse");
    }
    return absl::OkStatus();
  }

  // Hangs up in the ring; the call's status once the server ended it.
  grpc::Status HangUp() {
    ring_->Hangup();
    const grpc::Status status = call_->Finish();
    call_.reset();
    return status;
  }

  const v1::StepChannelInfo& info() const { return info_; }
  wire::StepRing& ring() { return *ring_; }
  char* data() const { return region_.data(); }

 private:
  Channel(const std::shared_ptr<grpc::Channel>& channel, int64_t size)
      : region_(channel, size), stub_(v1::SessionService::NewStub(channel)) {}

  Region region_;
  std::unique_ptr<v1::SessionService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::StepChannelInfo>> call_;
  v1::StepChannelInfo info_;
  std::optional<wire::StepRing> ring_;
};

class StepChannelE2eTest : public testing::StepChannelTest {
 protected:
  static void SetUpTestSuite() {
    StartSuiteServer({"--workers=1", "--threads_per_worker=1",
                      "--shared_memory", "--step_channels=2"});
  }

  absl::StatusOr<std::unique_ptr<Channel>> Open(int64_t size = int64_t{1}
                                                               << 20) {
    return Channel::Open(channel(), size);
  }
};

TEST_F(StepChannelE2eTest, StepsAreBitIdenticalToUnaryCalls) {
  Create("channel-twin");
  Create("unary-twin");
  auto channel_steps = Open();
  ASSERT_TRUE(channel_steps.ok()) << channel_steps.status();
  testing::ExpectStepsMatchUnary(**channel_steps, channel(), "channel-twin",
                                 "unary-twin", 300);
  EXPECT_GE(OkSteps(), 300);
}

TEST_F(StepChannelE2eTest, AFailedStepIsAnsweredAndTheChannelGoesOn) {
  Create("goes-on");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  v1::AttendSessionsResponse response;
  ASSERT_TRUE(
      (*steps)->Step(StepRequest("no-such-session", 0), &response).ok());
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(response.error_message(), HasSubstr("no-such-session"));
  EXPECT_EQ(response.request_id(), "step-0");
  ASSERT_TRUE((*steps)->Step(StepRequest("goes-on", 0), &response).ok());
  EXPECT_EQ(response.error_code(), 0) << response.error_message();
  EXPECT_EQ(response.results(0).tokens(), 1);
}

TEST_F(StepChannelE2eTest, BytesThatAreNoRequestGetInvalidArgument) {
  Create("after-garbage");
  auto steps = Open(64 * 1024);
  ASSERT_TRUE(steps.ok()) << steps.status();
  Channel& c = **steps;
  EXPECT_EQ(c.info().request_capacity() + c.info().response_capacity(),
            64 * 1024 - wire::kStepRingHeaderBytes);
  EXPECT_EQ(c.info().spin_us(), 5000);  // --step_channel_spin's default
  std::string answer;
  ASSERT_TRUE(c.ring()
                  .Call("\xff\xff\xff garbage", &answer, absl::Milliseconds(1))
                  .ok());
  v1::AttendSessionsResponse response;
  ASSERT_TRUE(response.ParseFromString(answer));
  EXPECT_EQ(response.error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(response.error_message(),
              HasSubstr("not an AttendSessionsRequest"));
  // A length past the slot, written by hand.
  uint32_t seq, bytes = 1u << 30;
  std::memcpy(&seq, c.data() + 128, 4);
  ++seq;
  std::memcpy(c.data() + 68, &bytes, 4);
  __atomic_store_n(reinterpret_cast<uint32_t*>(c.data() + 64), seq,
                   __ATOMIC_SEQ_CST);
  for (int i = 0;
       i < 10000 && __atomic_load_n(reinterpret_cast<uint32_t*>(c.data() + 128),
                                    __ATOMIC_SEQ_CST) != seq;
       ++i) {
    absl::SleepFor(absl::Microseconds(100));
  }
  uint32_t answered_bytes;
  std::memcpy(&answered_bytes, c.data() + 132, 4);
  const int64_t response_offset =
      wire::kStepRingHeaderBytes + c.info().request_capacity();
  ASSERT_TRUE(response.ParseFromArray(c.data() + response_offset,
                                      static_cast<int>(answered_bytes)));
  EXPECT_THAT(response.error_message(), HasSubstr("request_bytes"));
  // And a real step after both.
  ASSERT_TRUE(c.Step(StepRequest("after-garbage", 0), &response).ok());
  EXPECT_EQ(response.error_code(), 0) << response.error_message();
}

TEST_F(StepChannelE2eTest, TheLimitHoldsAndAClosedChannelIsFreed) {
  const double before = OpenChannels();
  {
    auto first = Open();
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = Open();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(OpenChannels(), before + 2);
    auto third = Open();
    EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(third.status().message(), HasSubstr("--step_channels"));
  }
  // Cancelled by the destructors: the server frees both.
  EXPECT_LE(
      testing::AwaitMetricAtMost(server(), "attnserve_step_channels", before),
      before);
  auto again = Open();
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(StepChannelE2eTest, AHangUpEndsTheCallOkWithTheChannelAlreadyFreed) {
  Create("channel-hangup");
  auto first = Open();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Open();
  ASSERT_TRUE(second.ok()) << second.status();
  v1::AttendSessionsResponse response;
  ASSERT_TRUE((*first)->Step(StepRequest("channel-hangup", 0), &response).ok());
  EXPECT_EQ(response.error_code(), 0) << response.error_message();

  const grpc::Status ended = (*first)->HangUp();
  EXPECT_TRUE(ended.ok()) << ended.error_message();
  // No waiting: the server freed the channel before the call ended.
  auto third = Open();
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_F(StepChannelE2eTest, RegionRules) {
  auto small = Open(wire::kStepRingMinBytes - 64);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("at least 16384"));

  auto stub = v1::SessionService::NewStub(channel());
  v1::OpenStepChannelRequest open;
  open.set_region("never-registered");
  grpc::ClientContext context;
  auto call = stub->StepChannel(&context, open);
  v1::StepChannelInfo info;
  EXPECT_FALSE(call->Read(&info));
  EXPECT_EQ(call->Finish().error_code(), grpc::StatusCode::NOT_FOUND);

  // One channel per region.
  Region region(channel(), 64 * 1024);
  open.set_region(region.name());
  grpc::ClientContext first_context, second_context;
  auto first = stub->StepChannel(&first_context, open);
  ASSERT_TRUE(first->Read(&info));
  auto second = stub->StepChannel(&second_context, open);
  EXPECT_FALSE(second->Read(&info));
  const grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("already holds"));
  first_context.TryCancel();
  first->Finish();
}

TEST_F(StepChannelE2eTest, OffWithZeroChannels) {
  StartServer({"--shared_memory", "--step_channels=0"});
  auto steps = Open();
  EXPECT_EQ(steps.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(steps.status().message(), HasSubstr("--step_channels"));
}

TEST_F(StepChannelE2eTest, DrainingClosesOpenChannels) {
  StartServer({"--shared_memory", "--step_channels=1", "--shutdown_grace=5s"});
  Create("drained");
  auto steps = Open();
  ASSERT_TRUE(steps.ok()) << steps.status();
  ExpectDrainEndsChannel(*std::move(steps), "drained");
}

}  // namespace
}  // namespace attnserve
