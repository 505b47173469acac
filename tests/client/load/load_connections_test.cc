// The load generator over a pool of connections, against in-test gRPC
// servers that record each call's peer (client address and port, one per TCP
// connection): CreateChannels' channels are distinct connections, the load
// uses every one of them, and a connection whose calls fail is counted by
// code without losing or miscounting a call.

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/connection.h"
#include "client/load/load_generator.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace attnserve::client {
namespace {

using ::testing::Each;
using ::testing::Gt;
using ::testing::SizeIs;

constexpr int64_t kOutputBytes = 16;

// Answers Attend at once with kOutputBytes of output and counts the calls of
// each peer. With FailOnePeer, every call of the first peer that called is
// refused with RESOURCE_EXHAUSTED.
class PeerRecordingService final
    : public v1::AttentionService::CallbackService {
 public:
  grpc::ServerUnaryReactor* Attend(grpc::CallbackServerContext* context,
                                   const v1::AttendRequest*,
                                   v1::AttendResponse* response) override {
    const std::string peer = context->peer();
    bool fail = false;
    {
      absl::MutexLock lock(&mu_);
      ++calls_[peer];
      if (fail_one_peer_ && failing_peer_.empty()) failing_peer_ = peer;
      fail = fail_one_peer_ && peer == failing_peer_;
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (hold_ > absl::ZeroDuration()) {
      response->mutable_output()->set_data(std::string(kOutputBytes, '\0'));
      absl::MutexLock lock(&mu_);
      const int active = ++active_[peer];
      most_active_[peer] = std::max(most_active_[peer], active);
      holders_.emplace_back([this, peer, reactor] {
        absl::SleepFor(hold_);
        {
          absl::MutexLock lock(&mu_);
          --active_[peer];
        }
        reactor->Finish(grpc::Status::OK);
      });
      return reactor;
    }
    if (fail) {
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "this connection refuses calls"));
      return reactor;
    }
    response->mutable_output()->set_data(std::string(kOutputBytes, '\0'));
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  ~PeerRecordingService() override { JoinHolders(); }

  // Answers each call after `hold` instead of at once, from a thread of its
  // own, and records the most calls each peer had in flight at once.
  void HoldCalls(absl::Duration hold) { hold_ = hold; }
  void JoinHolders() {
    std::vector<std::thread> holders;
    {
      absl::MutexLock lock(&mu_);
      holders.swap(holders_);
    }
    for (std::thread& t : holders) t.join();
  }
  std::map<std::string, int> most_active() const {
    absl::MutexLock lock(&mu_);
    return most_active_;
  }

  void FailOnePeer() {
    absl::MutexLock lock(&mu_);
    fail_one_peer_ = true;
  }
  std::map<std::string, int64_t> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int64_t total_calls() const {
    int64_t total = 0;
    for (const auto& [peer, count] : calls()) total += count;
    return total;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> calls_ ABSL_GUARDED_BY(mu_);
  bool fail_one_peer_ ABSL_GUARDED_BY(mu_) = false;
  std::string failing_peer_ ABSL_GUARDED_BY(mu_);
  absl::Duration hold_;
  std::map<std::string, int> active_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> most_active_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> holders_ ABSL_GUARDED_BY(mu_);
};

class RecordingServer {
 public:
  RecordingServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~RecordingServer() {
    service_.JoinHolders();
    server_->Shutdown();
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  PeerRecordingService& service() { return service_; }

 private:
  PeerRecordingService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

LoadSpec ClosedLoop(int concurrency) {
  LoadSpec spec;
  spec.concurrency = concurrency;
  spec.warmup = absl::ZeroDuration();
  spec.duration = absl::Milliseconds(300);
  spec.expected_output_bytes = kOutputBytes;
  return spec;
}

TEST(LoadConnectionsTest, EachConnectionIsItsOwnPeerAndCarriesCalls) {
  RecordingServer server;
  ConnectionOptions options;
  options.targets = {server.target()};
  auto channels = CreateChannels(options, 3);
  ASSERT_TRUE(channels.ok()) << channels.status();
  const absl::StatusOr<LoadResult> r =
      RunLoad(*channels, options, v1::AttendRequest(), ClosedLoop(3), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ok, r->requests);
  EXPECT_THAT(r->ok_per_channel, SizeIs(3));
  EXPECT_THAT(r->ok_per_channel, Each(Gt(0)));
  const std::map<std::string, int64_t> calls = server.service().calls();
  EXPECT_EQ(calls.size(), 3u) << "distinct peers seen by the server";
  EXPECT_THAT(calls, Each(::testing::Pair(::testing::_, Gt(0))));
  // Warm-up 0: every call the server saw was measured.
  EXPECT_EQ(server.service().total_calls(), r->requests);
}

TEST(LoadConnectionsTest, NCallsOnNConnectionsSitOneOnEach) {
  RecordingServer server;
  server.service().HoldCalls(absl::Milliseconds(2));
  ConnectionOptions options;
  options.targets = {server.target()};
  auto channels = CreateChannels(options, 4);
  ASSERT_TRUE(channels.ok()) << channels.status();
  const absl::StatusOr<LoadResult> r =
      RunLoad(*channels, options, v1::AttendRequest(), ClosedLoop(4), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ok, r->requests);
  EXPECT_THAT(r->ok_per_channel, Each(Gt(0)));
  // The call that follows an answer goes to the connection that just became
  // idle: never two calls on one connection while another has none.
  const std::map<std::string, int> most = server.service().most_active();
  EXPECT_EQ(most.size(), 4u);
  EXPECT_THAT(most, Each(::testing::Pair(::testing::_, 1)))
      << ::testing::PrintToString(most);
}

TEST(LoadConnectionsTest, EveryTargetGetsItsConnectionsAndItsShare) {
  RecordingServer a;
  RecordingServer b;
  ConnectionOptions options;
  options.targets = {a.target(), b.target()};
  auto channels = CreateChannels(options, 2);
  ASSERT_TRUE(channels.ok()) << channels.status();
  const absl::StatusOr<LoadResult> r =
      RunLoad(*channels, options, v1::AttendRequest(), ClosedLoop(4), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ok, r->requests);
  EXPECT_THAT(r->ok_per_channel, Each(Gt(0)));
  EXPECT_EQ(a.service().calls().size(), 2u);
  EXPECT_EQ(b.service().calls().size(), 2u);
  // Targets take turns call by call.
  EXPECT_NEAR(a.service().total_calls(), b.service().total_calls(), 4);
  EXPECT_EQ(a.service().total_calls() + b.service().total_calls(), r->requests);
}

TEST(LoadConnectionsTest, ErrorsOfOneConnectionAreCountedByCodeAndNoneLost) {
  RecordingServer server;
  server.service().FailOnePeer();
  ConnectionOptions options;
  options.targets = {server.target()};
  auto channels = CreateChannels(options, 3);
  ASSERT_TRUE(channels.ok()) << channels.status();
  const absl::StatusOr<LoadResult> r =
      RunLoad(*channels, options, v1::AttendRequest(), ClosedLoop(3), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->errors.size(), 1u);
  ASSERT_EQ(r->errors.count("RESOURCE_EXHAUSTED"), 1u);
  const ErrorCount& refused = r->errors.at("RESOURCE_EXHAUSTED");
  EXPECT_GT(refused.count, 0);
  EXPECT_EQ(refused.first_message, "this connection refuses calls");
  EXPECT_GT(r->ok, 0);
  EXPECT_EQ(r->requests, r->ok + r->error_total());
  EXPECT_EQ(server.service().total_calls(), r->requests);
  // The refusing connection answered nothing OK; the two others did.
  ASSERT_THAT(r->ok_per_channel, SizeIs(3));
  EXPECT_EQ(absl::c_count(r->ok_per_channel, 0), 1)
      << ::testing::PrintToString(r->ok_per_channel);
  EXPECT_EQ(server.service().calls().size(), 3u);
}

}  // namespace
}  // namespace attnserve::client
