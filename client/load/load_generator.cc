// One job, so one file past 500 lines: the Generator and its StreamLanes
// (closed and open loop, unary and streaming) share the schedule, the
// measurement window and the tally, which stay private to this file.

#include "client/load/load_generator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.pb.h"
#include "base/random.h"
#include "client/rpc_status.h"
#include "client/v2_messages.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_callback.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "inference/grpc_predict_v2.pb.h"
#include "wire/attend_call.h"
#include "wire/transport.h"

namespace attnserve::client {
namespace {

constexpr absl::Duration kLateSend = absl::Milliseconds(1);
constexpr absl::Duration kProgressInterval = absl::Seconds(1);

// When the warm-up starts, the measurement window opens and it closes.
struct Window {
  absl::Time start;
  absl::Time measure;
  absl::Time end;
  bool Measured(absl::Time scheduled) const {
    return scheduled >= measure && scheduled < end;
  }
};

// An answer's verdict: empty `code` for an OK response with the expected
// output size.
struct Verdict {
  std::string code;
  std::string message;
  absl::Duration queue;
  absl::Duration compute;
  double flops = 0;
  int64_t bytes = 0;
};

Verdict Refused(std::string code, std::string message) {
  Verdict verdict;
  verdict.code = std::move(code);
  verdict.message = std::move(message);
  return verdict;
}

// The verdict on a native answer (or a v2 answer as the native one it
// means) of `bytes` bytes on the wire.
Verdict JudgeAttendResponse(const v1::AttendResponse& response, int64_t bytes,
                            int64_t expected_output_bytes) {
  if (response.error_code() != 0) {
    return Refused(
        StatusCodeName(static_cast<grpc::StatusCode>(response.error_code())),
        response.error_message());
  }
  // An output written into shared memory (attnctl bench --shm) is as long
  // as its reference says.
  const int64_t got =
      response.output().has_shared_memory()
          ? response.output().shared_memory().byte_size()
          : static_cast<int64_t>(response.output().data().size());
  if (got != expected_output_bytes) {
    return Refused("RESPONSE_MISMATCH",
                   absl::StrCat("the output has ", got, " bytes, expected ",
                                expected_output_bytes));
  }
  Verdict verdict;
  verdict.queue = absl::Microseconds(response.timing().queue_us());
  verdict.compute = absl::Microseconds(response.timing().compute_us());
  verdict.flops = response.timing().flops();
  verdict.bytes = bytes;
  return verdict;
}

// Parses an answer's bytes into `message`.
bool ParseAnswer(grpc::ByteBuffer* buffer, google::protobuf::Message* message) {
  grpc::ProtoBufferReader reader(buffer);
  return message->ParseFromZeroCopyStream(&reader);
}

// The verdict on a ModelInferResponse, as the native answer it means.
Verdict JudgeInferResponse(inference::ModelInferResponse response,
                           int64_t bytes, int64_t expected_output_bytes) {
  absl::StatusOr<v1::AttendResponse> native =
      FromModelInferResponse(std::move(response));
  if (!native.ok()) {
    return Refused("RESPONSE_MISMATCH", std::string(native.status().message()));
  }
  return JudgeAttendResponse(*native, bytes, expected_output_bytes);
}

Verdict JudgeV2(grpc::ByteBuffer* buffer, int64_t expected_output_bytes) {
  const int64_t bytes = static_cast<int64_t>(buffer->Length());
  inference::ModelInferResponse response;
  if (!ParseAnswer(buffer, &response)) {
    return Refused("RESPONSE_MISMATCH", "the response does not parse");
  }
  return JudgeInferResponse(std::move(response), bytes, expected_output_bytes);
}

// A ModelStreamInfer message's answer: a failed message carries
// error_message "CODE: message" (attnserve's form, docs/api.md) and is
// counted under CODE; any other text (another server's) under UNKNOWN.
Verdict JudgeV2Stream(grpc::ByteBuffer* buffer, int64_t expected_output_bytes) {
  const int64_t bytes = static_cast<int64_t>(buffer->Length());
  inference::ModelStreamInferResponse answer;
  if (!ParseAnswer(buffer, &answer)) {
    return Refused("RESPONSE_MISMATCH", "the response does not parse");
  }
  if (!answer.error_message().empty()) {
    const std::string& text = answer.error_message();
    const size_t colon = text.find(": ");
    const bool coded =
        colon != std::string::npos && colon > 0 &&
        std::all_of(text.begin(), text.begin() + colon,
                    [](char c) { return (c >= 'A' && c <= 'Z') || c == '_'; });
    if (!coded) return Refused("UNKNOWN", text);
    return Refused(text.substr(0, colon), text.substr(colon + 2));
  }
  return JudgeInferResponse(std::move(*answer.mutable_infer_response()), bytes,
                            expected_output_bytes);
}

Verdict Judge(grpc::ByteBuffer* buffer, int64_t expected_output_bytes) {
  const int64_t bytes = static_cast<int64_t>(buffer->Length());
  v1::AttendResponse response;
  if (!ParseAnswer(buffer, &response)) {
    return Refused("RESPONSE_MISMATCH", "the response does not parse");
  }
  return JudgeAttendResponse(response, bytes, expected_output_bytes);
}

class Generator;

// One AttendStream: messages written one after another, answers matched to
// them in order (the stream answers in request order).
class StreamLane
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamLane(Generator* generator, int channel)
      : generator_(generator), channel_(channel) {}

  // Starts the stream on `stub`; `deadline_options` bound the whole stream.
  void Start(grpc::GenericStub& stub,
             const ConnectionOptions& deadline_options);
  // Queues one message scheduled at `scheduled`. False when the stream has
  // already failed (the caller counts the message as failed).
  bool Send(absl::Time scheduled);
  // The caller will call Send and Close no more from outside gRPC's
  // reactions. Until then a hold keeps the stream (and OnDone) from ending
  // under such a call.
  void Release() { RemoveHold(); }
  // No more messages: the stream half-closes once every answer has arrived.
  void Close();
  int channel() const { return channel_; }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void MaybeWritesDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Generator* const generator_;
  const int channel_;
  grpc::ClientContext context_;
  grpc::ByteBuffer answer_;

  absl::Mutex mu_;
  // Scheduled times of the messages sent and not answered, oldest first.
  std::deque<absl::Time> pending_ ABSL_GUARDED_BY(mu_);
  int unwritten_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

// One AttendPieces call: the request's pieces written one after another,
// then the answer; deletes itself when done.
class PiecesCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  PiecesCall(Generator* generator, absl::Time scheduled, int channel)
      : generator_(generator), scheduled_(scheduled), channel_(channel) {}

  void Start(grpc::GenericStub& stub, const ConnectionOptions& connection,
             const std::string& method,
             const std::vector<grpc::ByteBuffer>* pieces);

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override {}  // answer_ holds the response
  void OnDone(const grpc::Status& status) override;

 private:
  Generator* const generator_;
  const absl::Time scheduled_;
  const int channel_;
  grpc::ClientContext context_;
  grpc::ByteBuffer answer_;
  const std::vector<grpc::ByteBuffer>* pieces_ = nullptr;
  size_t next_ = 0;
};

class Generator {
 public:
  Generator(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
            const ConnectionOptions& connection,
            const google::protobuf::Message& request, const LoadSpec& spec)
      : connection_(connection),
        spec_(spec),
        tally_(static_cast<int>(channels.size())),
        in_flight_(channels.size(), 0) {
    for (const auto& channel : channels) {
      stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    // CreateChannels' order: channel i goes to target i % targets.
    const size_t targets = connection.targets.size();
    targets_ = targets > 0 && channels.size() % targets == 0 ? targets : 1;
    const std::string bytes = request.SerializeAsString();
    if (!spec_.pieces) {
      grpc::Slice slice(bytes);
      request_ = grpc::ByteBuffer(&slice, 1);
      return;
    }
    for (size_t at = 0; at < bytes.size();
         at += static_cast<size_t>(wire::kRequestPieceBytes)) {
      grpc::Slice slice(wire::PieceAt(bytes, at).SerializeAsString());
      pieces_.emplace_back(&slice, 1);
    }
  }

  LoadResult Run(const ProgressFn& progress) {
    const absl::Time now = absl::Now();
    window_ = {now, now + spec_.warmup, now + spec_.warmup + spec_.duration};
    std::thread sender;
    if (spec_.stream) StartLanes();
    if (spec_.rate > 0) {
      sender = std::thread([this] { SendOnSchedule(); });
    } else {
      StartClosedLoop();
    }
    auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return sender_done_ && outstanding_ == 0 && live_lanes_ == 0;
    };
    mu_.Lock();
    while (
        !mu_.AwaitWithTimeout(absl::Condition(&finished), kProgressInterval)) {
      mu_.Unlock();
      if (progress) progress(absl::Now() - window_.measure, tally_.Snapshot());
      mu_.Lock();
    }
    mu_.Unlock();
    if (sender.joinable()) sender.join();
    return tally_.Snapshot();
  }

  // A unary call, or a message on a closed-loop lane, has been answered.
  void Answered(int channel, absl::Time scheduled, const grpc::Status& status,
                grpc::ByteBuffer* answer) {
    const absl::Time done = absl::Now();
    if (window_.Measured(scheduled)) {
      if (!status.ok()) {
        tally_.RecordError(StatusCodeName(status.error_code()),
                           status.error_message(), scheduled, done);
      } else {
        const int64_t expected = spec_.expected_output_bytes;
        const Verdict verdict = spec_.protocol != Protocol::kV2
                                    ? Judge(answer, expected)
                                : spec_.stream ? JudgeV2Stream(answer, expected)
                                               : JudgeV2(answer, expected);
        if (verdict.code.empty()) {
          tally_.RecordOk(channel, scheduled, done, verdict.queue,
                          verdict.compute, verdict.flops, verdict.bytes);
        } else {
          tally_.RecordError(verdict.code, verdict.message, scheduled, done);
        }
      }
    }
  }

  // Closed loop: whether the slot that just finished sends again.
  bool SendAgain() const {
    return spec_.rate <= 0 && absl::Now() < window_.end;
  }

  void Retire(int count) {
    absl::MutexLock lock(&mu_);
    outstanding_ -= count;
  }

  void LaneDone(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    --live_lanes_;
    if (!status.ok() && live_lanes_ == 0 && absl::Now() < window_.end) {
      tally_.StopEarly(absl::StrCat("every stream failed (the last: ",
                                    StatusCodeName(status.error_code()), ": ",
                                    status.error_message(), ")"));
      stopped_ = true;
    }
  }

  // Counts the unanswered messages of a failed stream.
  void LaneFailed(const grpc::Status& status,
                  const std::deque<absl::Time>& pending) {
    const absl::Time done = absl::Now();
    for (absl::Time scheduled : pending) {
      if (!window_.Measured(scheduled)) continue;
      tally_.RecordError(
          status.ok() ? "UNKNOWN" : StatusCodeName(status.error_code()),
          status.ok() ? "the stream ended with messages unanswered"
                      : status.error_message(),
          scheduled, done);
    }
  }

  const grpc::ByteBuffer* request() const { return &request_; }
  const std::string& stream_method() const { return spec_.stream_method; }

  // Closed-loop lane: the message just answered is followed by another, or
  // the lane closes.
  void LaneAnswered(StreamLane* lane, absl::Time scheduled,
                    grpc::ByteBuffer* answer) {
    Answered(lane->channel(), scheduled, grpc::Status::OK, answer);
    if (spec_.rate > 0) {
      Retire(1);
      return;
    }
    if (SendAgain() && lane->Send(absl::Now())) return;
    Retire(1);
    lane->Close();
  }

 private:
  struct UnaryCall {
    grpc::ClientContext context;
    grpc::ByteBuffer answer;
    absl::Time scheduled;
    int channel = 0;
  };

  // Targets take turns; within the target, the connection with the fewest
  // calls in flight (the first such after the last one picked), so that N
  // outstanding calls on N connections sit one on each.
  int TakeChannel() {
    absl::MutexLock lock(&mu_);
    const size_t target = next_target_++ % targets_;
    const size_t connections = stubs_.size() / targets_;
    size_t best = 0;
    int best_load = std::numeric_limits<int>::max();
    for (size_t k = 1; k <= connections; ++k) {
      const size_t connection = (next_connection_ + k) % connections;
      const size_t channel = connection * targets_ + target;
      if (in_flight_[channel] < best_load) {
        best = channel;
        best_load = in_flight_[channel];
      }
    }
    next_connection_ = best / targets_;
    ++in_flight_[best];
    return static_cast<int>(best);
  }

  void GiveBackChannel(int channel) {
    absl::MutexLock lock(&mu_);
    --in_flight_[channel];
  }

  void StartUnary(absl::Time scheduled) {
    const int channel = TakeChannel();
    if (spec_.pieces) {
      auto* call = new PiecesCall(this, scheduled, channel);
      call->Start(*stubs_[channel], connection_, spec_.method, &pieces_);
      return;
    }
    auto* call = new UnaryCall;
    call->scheduled = scheduled;
    call->channel = channel;
    PrepareContext(connection_, &call->context);
    stubs_[call->channel]->UnaryCall(
        &call->context, spec_.method, grpc::StubOptions(), &request_,
        &call->answer, [this, call](grpc::Status status) {
          UnaryAnswered(call->channel, call->scheduled, status, &call->answer);
          delete call;  // before UnaryNext: the last Retire may end Run
          UnaryNext();
        });
  }

 public:
  // A unary call (or a call in pieces) on `channel` has ended: counted.
  void UnaryAnswered(int channel, absl::Time scheduled,
                     const grpc::Status& status, grpc::ByteBuffer* answer) {
    GiveBackChannel(channel);
    Answered(channel, scheduled, status, answer);
  }
  // Then, once the call is freed, its slot sends again or retires (the last
  // retirement may end Run, and with it the stubs and channels).
  void UnaryNext() {
    if (SendAgain()) {
      StartUnary(absl::Now());
    } else {
      Retire(1);
    }
  }

 private:
  void StartLanes() {
    // Each stream may live as long as the whole level plus one call timeout.
    ConnectionOptions stream_options = connection_;
    stream_options.timeout =
        spec_.warmup + spec_.duration + connection_.timeout;
    const int count =
        spec_.rate > 0 ? static_cast<int>(stubs_.size()) : spec_.concurrency;
    {
      absl::MutexLock lock(&mu_);
      live_lanes_ = count;
    }
    for (int i = 0; i < count; ++i) {
      const int channel = i % static_cast<int>(stubs_.size());
      lanes_.push_back(std::make_unique<StreamLane>(this, channel));
      lanes_.back()->Start(*stubs_[channel], stream_options);
    }
  }

  void StartClosedLoop() {
    {
      absl::MutexLock lock(&mu_);
      outstanding_ = spec_.concurrency;
      sender_done_ = true;
    }
    const absl::Time now = absl::Now();
    for (int i = 0; i < spec_.concurrency; ++i) {
      if (spec_.stream) {
        // Later sends come from the lane's own reactions.
        if (!lanes_[i]->Send(now)) {
          Answered(lanes_[i]->channel(), now,
                   grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "the stream of this message had failed"),
                   nullptr);
          Retire(1);
        }
        lanes_[i]->Release();
      } else {
        StartUnary(now);
      }
    }
  }

  void SendOnSchedule() {
    base::SplitMix64 random(spec_.seed);
    // Exponential gaps (Poisson arrivals), by inversion.
    auto gap = [&random, rate = spec_.rate] {
      return -std::log1p(-random.UnitDouble()) / rate;
    };
    absl::Time scheduled = window_.start;
    for (int64_t k = 0;; ++k) {
      scheduled = spec_.arrival == Arrival::kConstant
                      ? window_.start + absl::Seconds(k / spec_.rate)
                      : scheduled + absl::Seconds(gap());
      if (scheduled >= window_.end) break;
      for (absl::Time now = absl::Now(); now < scheduled; now = absl::Now()) {
        absl::SleepFor(std::min(scheduled - now, absl::Milliseconds(100)));
      }
      {
        absl::MutexLock lock(&mu_);
        auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return outstanding_ < spec_.max_outstanding || stopped_;
        };
        mu_.Await(absl::Condition(&room));
        if (stopped_) break;
        ++outstanding_;
      }
      if (window_.Measured(scheduled) && absl::Now() - scheduled > kLateSend) {
        tally_.RecordLateSend();
      }
      if (!spec_.stream) {
        StartUnary(scheduled);
        continue;
      }
      StreamLane& lane = *lanes_[static_cast<size_t>(k) % lanes_.size()];
      if (!lane.Send(scheduled)) {
        Answered(lane.channel(), scheduled,
                 grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the stream of this message had failed"),
                 nullptr);
        Retire(1);
      }
    }
    for (auto& lane : lanes_) {
      lane->Close();
      lane->Release();
    }
    absl::MutexLock lock(&mu_);
    sender_done_ = true;
  }

  const ConnectionOptions connection_;
  const LoadSpec spec_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  grpc::ByteBuffer request_;
  // spec_.pieces: the request's RequestPiece messages, serialized.
  std::vector<grpc::ByteBuffer> pieces_;
  Window window_;
  LoadTally tally_;
  std::vector<std::unique_ptr<StreamLane>> lanes_;

  size_t targets_ = 1;

  absl::Mutex mu_;
  uint64_t next_target_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_connection_ ABSL_GUARDED_BY(mu_) = 0;
  // Unary calls in flight per channel.
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  // Requests sent and not answered (closed loop: slots still sending).
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int live_lanes_ ABSL_GUARDED_BY(mu_) = 0;
  bool sender_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

void PiecesCall::Start(grpc::GenericStub& stub,
                       const ConnectionOptions& connection,
                       const std::string& method,
                       const std::vector<grpc::ByteBuffer>* pieces) {
  pieces_ = pieces;
  PrepareContext(connection, &context_);
  stub.PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
  StartRead(&answer_);
  StartWrite(&(*pieces_)[0]);
  StartCall();
}

void PiecesCall::OnWriteDone(bool ok) {
  if (!ok) return;  // the call ended (refused early): OnDone has its status
  if (++next_ < pieces_->size()) {
    StartWrite(&(*pieces_)[next_]);
  } else {
    StartWritesDone();
  }
}

void PiecesCall::OnDone(const grpc::Status& status) {
  Generator* const generator = generator_;
  generator->UnaryAnswered(channel_, scheduled_, status, &answer_);
  delete this;  // before UnaryNext: the last Retire may end Run
  generator->UnaryNext();
}

void StreamLane::Start(grpc::GenericStub& stub,
                       const ConnectionOptions& deadline_options) {
  PrepareContext(deadline_options, &context_);
  stub.PrepareBidiStreamingCall(&context_, generator_->stream_method(),
                                grpc::StubOptions(), this);
  StartRead(&answer_);
  AddHold();
  StartCall();
}

bool StreamLane::Send(absl::Time scheduled) {
  {
    absl::MutexLock lock(&mu_);
    if (failed_ || closing_) return false;
    pending_.push_back(scheduled);
    if (writing_) {
      ++unwritten_;
      return true;
    }
    writing_ = true;
  }
  StartWrite(generator_->request());
  return true;
}

void StreamLane::Close() {
  bool writes_done;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    writes_done = pending_.empty() && !writing_ && !writes_done_ && !failed_;
    if (writes_done) writes_done_ = true;
  }
  if (writes_done) StartWritesDone();
}

void StreamLane::OnWriteDone(bool ok) {
  bool again = false;
  bool writes_done = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ok) {
      // The stream is broken: OnDone reports why and counts what is pending.
      failed_ = true;
      writing_ = false;
      return;
    }
    if (unwritten_ > 0) {
      --unwritten_;
      again = true;
    } else {
      writing_ = false;
      writes_done = closing_ && pending_.empty() && !writes_done_;
      if (writes_done) writes_done_ = true;
    }
  }
  if (again) StartWrite(generator_->request());
  if (writes_done) StartWritesDone();
}

void StreamLane::OnReadDone(bool ok) {
  if (!ok) {
    // The stream ended; OnDone follows and counts what is pending.
    absl::MutexLock lock(&mu_);
    failed_ = true;
    return;
  }
  absl::Time scheduled;
  bool unexpected;
  {
    absl::MutexLock lock(&mu_);
    unexpected = pending_.empty();
    if (unexpected) {
      failed_ = true;
    } else {
      scheduled = pending_.front();
      pending_.pop_front();
    }
  }
  if (unexpected) {
    // An answer to nothing: end the stream (OnDone counts the rest).
    context_.TryCancel();
    return;
  }
  generator_->LaneAnswered(this, scheduled, &answer_);
  bool writes_done;
  {
    absl::MutexLock lock(&mu_);
    writes_done =
        closing_ && pending_.empty() && !writing_ && !writes_done_ && !failed_;
    if (writes_done) writes_done_ = true;
  }
  if (writes_done) StartWritesDone();
  StartRead(&answer_);
}

void StreamLane::OnDone(const grpc::Status& status) {
  std::deque<absl::Time> pending;
  {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    pending.swap(pending_);
  }
  generator_->LaneFailed(status, pending);
  generator_->Retire(static_cast<int>(pending.size()));
  // Last: once LaneDone returns, Run may destroy this lane.
  generator_->LaneDone(status);
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    const ConnectionOptions& connection,
    const google::protobuf::Message& request, const LoadSpec& spec,
    const ProgressFn& progress) {
  if (channels.empty()) {
    return absl::InvalidArgumentError("no channel to send on");
  }
  if (spec.rate < 0 || (spec.rate == 0 && spec.concurrency < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a level needs a concurrency >= 1 or a rate > 0; got concurrency ",
        spec.concurrency, ", rate ", spec.rate));
  }
  if ((spec.stream ? spec.stream_method : spec.method).empty()) {
    return absl::InvalidArgumentError("no method to call");
  }
  if (spec.max_outstanding < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_outstanding must be >= 1, got ", spec.max_outstanding));
  }
  if (spec.duration <= absl::ZeroDuration() ||
      spec.warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--duration must be positive and --warmup not negative; got ",
        absl::FormatDuration(spec.duration), " and ",
        absl::FormatDuration(spec.warmup)));
  }
  Generator generator(channels, connection, request, spec);
  return generator.Run(progress);
}

}  // namespace attnserve::client
