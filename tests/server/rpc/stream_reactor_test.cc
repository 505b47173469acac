// OrderedStreamReactor driven through a real gRPC server in this process with
// a fake processor: order, per-message errors, backpressure, half-close,
// cancellation, refusal and deadlines. Long because each of those needs its
// own fake timing; the fake processor at the top is shared.

#include "server/rpc/stream_reactor.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::Pair;
using v1::AttendRequest;
using v1::AttendResponse;

constexpr absl::Duration kPatience = absl::Seconds(20);

// Stands in for the service: holds every message until the test completes it,
// except ids starting with "bad", which fail inline as a decode error would.
// Completion may come from any thread, in any order.
class FakeProcessor final
    : public StreamProcessor<AttendRequest, AttendResponse> {
 public:
  ~FakeProcessor() override {
    for (std::thread& t : threads_) t.join();
  }

  void Submit(const AttendRequest& request, AttendResponse* response,
              const StreamMessage& message,
              absl::AnyInvocable<void(absl::Status)> done) override {
    const std::string& id = request.request_id();
    {
      absl::MutexLock lock(&mu_);
      ++submitted_;
      max_outstanding_ = std::max(max_outstanding_, submitted_ - released_);
      if (!absl::StartsWith(id, "bad")) {
        held_[id] = Held{response, message, std::move(done)};
        return;
      }
    }
    done(absl::InvalidArgumentError("query: missing"));
  }

  void Answered(const AttendRequest& request, const AttendResponse& response,
                const StreamMessage& message, grpc::StatusCode code) override {
    absl::MutexLock lock(&mu_);
    answered_.emplace_back(request.request_id(), code);
  }

  void Release() override {
    absl::MutexLock lock(&mu_);
    ++released_;
  }

  // Completes a held message: on OK its response carries `marker` in
  // timing.total_us; on error it was half filled first, which the reactor
  // must clear.
  void Complete(const std::string& id, absl::Status status, int marker = 0) {
    std::optional<Held> taken = Take(id);
    if (!taken) return;
    Held& held = *taken;
    held.response->mutable_timing()->set_total_us(marker);
    held.done(std::move(status));
  }

  // Completes a held message OK with an output of `bytes` bytes, leaving
  // `reservation` where the reactor keeps it until the write is done, as the
  // service does with its memory-budget bytes.
  void CompleteLarge(const std::string& id, int64_t bytes,
                     MemoryBudget::Reservation reservation) {
    std::optional<Held> taken = Take(id);
    if (!taken) return;
    Held& held = *taken;
    held.response->mutable_output()->mutable_data()->assign(
        static_cast<size_t>(bytes), 'x');
    ASSERT_NE(held.message.held, nullptr);
    *held.message.held = std::move(reservation);
    held.done(absl::OkStatus());
  }

  // Complete() from another thread after `delay`.
  void CompleteLater(const std::string& id, absl::Duration delay, int marker) {
    std::optional<Held> taken = Take(id);
    if (!taken) return;
    threads_.emplace_back([held = *std::move(taken), delay, marker]() mutable {
      absl::SleepFor(delay);
      held.response->mutable_timing()->set_total_us(marker);
      held.done(absl::OkStatus());
    });
  }

  // The message as the reactor described it; empty unless it is held.
  StreamMessage Message(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(id);
    if (it == held_.end()) {
      ADD_FAILURE() << id << " is not held";
      return StreamMessage{};
    }
    return it->second.message;
  }

  // Fails whatever is still held, so that a failed test cannot leave a
  // stream that never finishes (server Shutdown would wait for it).
  void CancelHeld() {
    std::map<std::string, Held> held;
    {
      absl::MutexLock lock(&mu_);
      held.swap(held_);
    }
    for (auto& [id, h] : held) h.done(absl::CancelledError("test over"));
  }

  bool WaitForSubmitted(int n) { return WaitFor(&submitted_, n); }
  bool WaitForReleased(int n) { return WaitFor(&released_, n); }

  int submitted() {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }
  int released() {
    absl::MutexLock lock(&mu_);
    return released_;
  }
  int max_outstanding() {
    absl::MutexLock lock(&mu_);
    return max_outstanding_;
  }
  std::vector<std::pair<std::string, grpc::StatusCode>> answered() {
    absl::MutexLock lock(&mu_);
    return answered_;
  }

 private:
  struct Held {
    AttendResponse* response = nullptr;
    StreamMessage message;
    absl::AnyInvocable<void(absl::Status)> done;
  };

  std::optional<Held> Take(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(id);
    if (it == held_.end()) {
      ADD_FAILURE() << id << " is not held";
      return std::nullopt;
    }
    Held held = std::move(it->second);
    held_.erase(it);
    return held;
  }

  bool WaitFor(const int* counter, int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [counter, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return *counter >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kPatience);
  }

  absl::Mutex mu_;
  std::map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  int submitted_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
  // Most messages submitted and not yet released at once.
  int max_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<std::string, grpc::StatusCode>> answered_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // test thread only
};

// AttendStream served by the reactor under test.
class ReactorService final : public v1::AttentionService::CallbackService {
 public:
  ReactorService(FakeProcessor* processor, int max_inflight,
                 absl::Status admitted, SendWatchdog* watchdog)
      : processor_(processor),
        max_inflight_(max_inflight),
        admitted_(std::move(admitted)),
        watchdog_(watchdog) {}

  grpc::ServerBidiReactor<AttendRequest, AttendResponse>* AttendStream(
      grpc::CallbackServerContext* context) override {
    return new OrderedStreamReactor<AttendRequest, AttendResponse>(
        context, processor_, max_inflight_, admitted_, watchdog_);
  }

 private:
  FakeProcessor* const processor_;
  const int max_inflight_;
  const absl::Status admitted_;
  SendWatchdog* const watchdog_;
};

// Reads a stream's responses on its own thread, so that the test can check
// what has (not) arrived while it completes messages.
class Reader {
 public:
  explicit Reader(grpc::ClientReaderWriter<AttendRequest, AttendResponse>* rw)
      : thread_([this, rw] {
          AttendResponse response;
          while (rw->Read(&response)) {
            absl::MutexLock lock(&mu_);
            responses_.push_back(response);
          }
          absl::MutexLock lock(&mu_);
          ended_ = true;
        }) {}
  ~Reader() { thread_.join(); }

  // Waits for `n` responses, or the end of the stream; returns what came.
  std::vector<AttendResponse> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ended_ || responses_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), kPatience);
    return responses_;
  }
  bool WaitForEnd() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&ended_), kPatience);
  }
  size_t count() {
    absl::MutexLock lock(&mu_);
    return responses_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<AttendResponse> responses_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest is set up
};

AttendRequest Request(const std::string& id) {
  AttendRequest request;
  request.set_request_id(id);
  return request;
}

AttendResponse Ok(const std::string& id, int marker) {
  AttendResponse response;
  response.set_request_id(id);
  response.mutable_timing()->set_total_us(marker);
  return response;
}

AttendResponse Error(const std::string& id, absl::Status status) {
  AttendResponse response;
  response.set_request_id(id);
  response.set_error_code(static_cast<int32_t>(status.code()));
  response.set_error_message(std::string(status.message()));
  return response;
}

std::vector<std::string> Texts(const std::vector<AttendResponse>& responses) {
  std::vector<std::string> texts;
  for (const AttendResponse& r : responses) texts.push_back(r.DebugString());
  return texts;
}

class StreamReactorTest : public ::testing::Test {
 protected:
  void Start(int max_inflight, absl::Status admitted = absl::OkStatus(),
             SendWatchdog* watchdog = nullptr,
             const grpc::ChannelArguments& client_args = {}) {
    service_ = std::make_unique<ReactorService>(&processor_, max_inflight,
                                                std::move(admitted), watchdog);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = v1::AttentionService::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(),
        client_args));
  }

  void TearDown() override {
    processor_.CancelHeld();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + kPatience));
    }
  }

  // A client context that cannot hang the test.
  static void Bound(grpc::ClientContext* context) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + 2 * kPatience));
  }

  // The stream ends OK and the processor gets back all `released` messages.
  template <typename Stream>
  void ExpectEndsOkReleasing(Stream& stream, int released) {
    const grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::OK)
        << status.error_message();
    EXPECT_TRUE(processor_.WaitForReleased(released));
  }

  FakeProcessor processor_;  // outlives the server
  std::unique_ptr<ReactorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

TEST_F(StreamReactorTest, WritesInRequestOrderWhateverTheCompletionOrder) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream->Write(Request(absl::StrCat("r", i))));
  }
  ASSERT_TRUE(processor_.WaitForSubmitted(5));
  Reader reader(stream.get());
  processor_.Complete("r4", absl::OkStatus(), 4);
  processor_.Complete("r2", absl::OkStatus(), 2);
  processor_.Complete("r3", absl::OkStatus(), 3);
  processor_.Complete("r1", absl::OkStatus(), 1);
  // Everything but the first is ready; nothing may be written before it.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(reader.count(), 0);
  processor_.Complete("r0", absl::OkStatus(), 0);
  EXPECT_THAT(Texts(reader.WaitFor(5)),
              ElementsAreArray(Texts({Ok("r0", 0), Ok("r1", 1), Ok("r2", 2),
                                      Ok("r3", 3), Ok("r4", 4)})));
  // Answered as they completed, written as they were asked.
  EXPECT_THAT(processor_.answered(),
              ElementsAre(Pair("r4", grpc::StatusCode::OK),
                          Pair("r2", grpc::StatusCode::OK),
                          Pair("r3", grpc::StatusCode::OK),
                          Pair("r1", grpc::StatusCode::OK),
                          Pair("r0", grpc::StatusCode::OK)));
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(reader.WaitForEnd());
  ExpectEndsOkReleasing(*stream, 5);
}

TEST_F(StreamReactorTest, AFailedMessageGetsAnErrorResponseAndTheStreamGoesOn) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (const char* id : {"r0", "bad1", "r2", "r3"}) {
    ASSERT_TRUE(stream->Write(Request(id)));
  }
  ASSERT_TRUE(stream->WritesDone());
  ASSERT_TRUE(processor_.WaitForSubmitted(4));
  const absl::Status full = absl::ResourceExhaustedError(
      "queue is full (max_queue = 0); retry later or raise --max_queue");
  processor_.Complete("r2", full);
  processor_.Complete("r3", absl::OkStatus(), 3);
  processor_.Complete("r0", absl::OkStatus(), 7);
  Reader reader(stream.get());
  EXPECT_TRUE(reader.WaitForEnd());
  // Error responses hold only the id and the error, not what the processor
  // had filled in before it failed.
  EXPECT_THAT(Texts(reader.WaitFor(4)),
              ElementsAreArray(Texts(
                  {Ok("r0", 7),
                   Error("bad1", absl::InvalidArgumentError("query: missing")),
                   Error("r2", full), Ok("r3", 3)})));
  EXPECT_THAT(processor_.answered(),
              ElementsAre(Pair("bad1", grpc::StatusCode::INVALID_ARGUMENT),
                          Pair("r2", grpc::StatusCode::RESOURCE_EXHAUSTED),
                          Pair("r3", grpc::StatusCode::OK),
                          Pair("r0", grpc::StatusCode::OK)));
  ExpectEndsOkReleasing(*stream, 4);
}

TEST_F(StreamReactorTest, ReadsNoMoreThanMaxInflightAheadOfTheWrites) {
  Start(/*max_inflight=*/2);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream->Write(Request(absl::StrCat("r", i))));
  }
  ASSERT_TRUE(stream->WritesDone());
  ASSERT_TRUE(processor_.WaitForSubmitted(2));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(processor_.submitted(), 2);
  // A completed message still counts until it is written, and r1 cannot be
  // written before r0.
  processor_.Complete("r1", absl::OkStatus(), 1);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(processor_.submitted(), 2);
  Reader reader(stream.get());
  processor_.Complete("r0", absl::OkStatus(), 0);
  ASSERT_TRUE(processor_.WaitForSubmitted(4));
  processor_.Complete("r3", absl::OkStatus(), 3);
  processor_.Complete("r2", absl::OkStatus(), 2);
  ASSERT_TRUE(processor_.WaitForSubmitted(5));
  processor_.Complete("r4", absl::OkStatus(), 4);
  EXPECT_TRUE(reader.WaitForEnd());
  EXPECT_THAT(Texts(reader.WaitFor(5)),
              ElementsAreArray(Texts({Ok("r0", 0), Ok("r1", 1), Ok("r2", 2),
                                      Ok("r3", 3), Ok("r4", 4)})));
  EXPECT_EQ(processor_.max_outstanding(), 2);
  ExpectEndsOkReleasing(*stream, 5);
}

TEST_F(StreamReactorTest, HalfCloseWaitsForSlowMessagesThenEndsOk) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Write(Request(absl::StrCat("r", i))));
  }
  ASSERT_TRUE(stream->WritesDone());
  ASSERT_TRUE(processor_.WaitForSubmitted(3));
  processor_.CompleteLater("r0", absl::Milliseconds(300), 0);
  processor_.CompleteLater("r1", absl::Milliseconds(100), 1);
  processor_.CompleteLater("r2", absl::Milliseconds(200), 2);
  Reader reader(stream.get());
  EXPECT_TRUE(reader.WaitForEnd());
  EXPECT_THAT(Texts(reader.WaitFor(3)),
              ElementsAreArray(Texts({Ok("r0", 0), Ok("r1", 1), Ok("r2", 2)})));
  ExpectEndsOkReleasing(*stream, 3);
}

TEST_F(StreamReactorTest, HalfCloseWithoutMessagesEndsOk) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  ASSERT_TRUE(stream->WritesDone());
  AttendResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK)
      << status.error_message();
  EXPECT_EQ(processor_.submitted(), 0);
}

TEST_F(StreamReactorTest, CancelMidStreamReleasesEveryMessage) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Write(Request(absl::StrCat("r", i))));
  }
  ASSERT_TRUE(processor_.WaitForSubmitted(3));
  processor_.Complete("r0", absl::OkStatus(), 0);
  AttendResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.DebugString(), Ok("r0", 0).DebugString());
  ASSERT_TRUE(processor_.WaitForReleased(1));

  const StreamMessage r1 = processor_.Message("r1");
  ASSERT_TRUE(r1.is_cancelled);
  EXPECT_FALSE(r1.is_cancelled());
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // What the scheduler polls before running a message.
  const absl::Time give_up = absl::Now() + kPatience;
  while (!r1.is_cancelled() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(r1.is_cancelled());

  // r1's write fails (the stream is gone), which finishes the stream while r2
  // is still being processed; its completion then ends the reactor, whose
  // destructor releases the never-written r2.
  processor_.Complete("r1", absl::CancelledError("cancelled"));
  EXPECT_TRUE(processor_.WaitForReleased(2));
  processor_.Complete("r2", absl::CancelledError("cancelled"));
  EXPECT_TRUE(processor_.WaitForReleased(3));
  EXPECT_THAT(processor_.answered(),
              ElementsAre(Pair("r0", grpc::StatusCode::OK),
                          Pair("r1", grpc::StatusCode::CANCELLED),
                          Pair("r2", grpc::StatusCode::CANCELLED)));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(processor_.released(), 3);
}

TEST_F(StreamReactorTest, RefusedAdmissionFailsTheStreamWithThatStatus) {
  Start(/*max_inflight=*/16,
        absl::UnauthenticatedError("invalid bearer token"));
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  stream->Write(Request("r0"));  // may fail: the server may have finished
  stream->WritesDone();
  AttendResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "invalid bearer token");
  EXPECT_EQ(processor_.submitted(), 0);
}

TEST_F(StreamReactorTest, MessagesCarryTheCallDeadlineAndTheirSize) {
  Start(/*max_inflight=*/16);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  auto stream = stub_->AttendStream(&context);
  const AttendRequest request = Request("r0");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(processor_.WaitForSubmitted(1));
  const StreamMessage message = processor_.Message("r0");
  EXPECT_LT(absl::AbsDuration(message.deadline - deadline), absl::Seconds(1));
  EXPECT_EQ(message.request_bytes,
            static_cast<int64_t>(request.ByteSizeLong()));
  EXPECT_LE(message.received, absl::Now());
  processor_.Complete("r0", absl::OkStatus(), 0);
  ASSERT_TRUE(stream->WritesDone());
  AttendResponse response;
  EXPECT_TRUE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::OK);
}

TEST_F(StreamReactorTest, NoCallDeadlineIsTheInfiniteFuture) {
  Start(/*max_inflight=*/16);
  grpc::ClientContext context;
  auto stream = stub_->AttendStream(&context);
  ASSERT_TRUE(stream->Write(Request("r0")));
  ASSERT_TRUE(processor_.WaitForSubmitted(1));
  EXPECT_EQ(processor_.Message("r0").deadline, absl::InfiniteFuture());
  processor_.Complete("r0", absl::OkStatus(), 0);
  ASSERT_TRUE(stream->WritesDone());
  AttendResponse response;
  EXPECT_TRUE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::OK);
}

// A client that takes at most 64 KiB of a stream before it reads: its HTTP/2
// window stays at that size while it does not read.
grpc::ChannelArguments SmallWindowClient() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetMaxReceiveMessageSize(64 << 20);
  return args;
}

// A client that stops reading: the write of a 32 MiB response cannot
// complete, so the watchdog cancels the stream after its timeout; the
// message's budget bytes are held until then and released with it. The
// timeout leaves room for a slow (sanitized, loaded) build to fill and start
// writing 32 MiB before the check that the bytes are still held.
TEST_F(StreamReactorTest, AClientThatStopsReadingIsCancelledAfterTheTimeout) {
  constexpr absl::Duration kTimeout = absl::Seconds(1);
  std::atomic<int> timeouts{0};
  SendWatchdog watchdog(kTimeout, [&timeouts] { ++timeouts; });
  MemoryBudget budget(int64_t{1} << 30);
  Start(/*max_inflight=*/16, absl::OkStatus(), &watchdog, SmallWindowClient());
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  ASSERT_TRUE(stream->Write(Request("big")));
  ASSERT_TRUE(processor_.WaitForSubmitted(1));
  absl::StatusOr<MemoryBudget::Reservation> reserved = budget.Reserve(32 << 20);
  ASSERT_TRUE(reserved.ok());
  const absl::Time written = absl::Now();
  processor_.CompleteLarge("big", 32 << 20, *std::move(reserved));
  // Held while the write is stuck: the client reads nothing.
  absl::SleepFor(absl::Milliseconds(100));
  const int64_t held = budget.used();
  const int released = processor_.released();
  ASSERT_LT(absl::Now() - written, kTimeout)
      << "the build was too slow to check the bytes before the timeout";
  EXPECT_EQ(held, 32 << 20);
  EXPECT_EQ(released, 0);
  // Then the watchdog cancels the stream, which releases the message.
  EXPECT_TRUE(processor_.WaitForReleased(1));
  EXPECT_GE(absl::Now() - written, kTimeout);
  EXPECT_EQ(budget.used(), 0);
  EXPECT_EQ(watchdog.cancelled(), 1);
  // The client, reading at last, finds the stream cut off mid-message.
  AttendResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(timeouts.load(), 1);
}

// A client that reads is never cancelled, however long the stream lives:
// each write is watched only while it is in flight.
TEST_F(StreamReactorTest, AReadingClientOutlivesTheTimeout) {
  SendWatchdog watchdog(absl::Milliseconds(200), nullptr);
  MemoryBudget budget(int64_t{1} << 30);
  Start(/*max_inflight=*/16, absl::OkStatus(), &watchdog, SmallWindowClient());
  grpc::ClientContext context;
  Bound(&context);
  auto stream = stub_->AttendStream(&context);
  for (int i = 0; i < 4; ++i) {
    const std::string id = absl::StrCat("m", i);
    ASSERT_TRUE(stream->Write(Request(id)));
    ASSERT_TRUE(processor_.WaitForSubmitted(i + 1));
    absl::StatusOr<MemoryBudget::Reservation> reserved =
        budget.Reserve(1 << 20);
    ASSERT_TRUE(reserved.ok());
    processor_.CompleteLarge(id, 1 << 20, *std::move(reserved));
    AttendResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.output().data().size(), size_t{1} << 20);
    ASSERT_TRUE(processor_.WaitForReleased(i + 1));
    EXPECT_EQ(budget.used(), 0);
    absl::SleepFor(absl::Milliseconds(100));  // 400 ms in all
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(watchdog.cancelled(), 0);
}

}  // namespace
}  // namespace attnserve::server
