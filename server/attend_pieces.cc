// AttendPieces: one Attend call whose request arrives as a stream of pieces.
// The first piece announces the request's size, and the call reserves twice
// that (the pieces and the request parsed from them) of the memory budget
// before it reads the next one; once parsed, it holds what any Attend call
// holds. A call the
// budget cannot hold is refused while its client has sent one piece, not
// after the transport has buffered the whole request. Pieces are then read
// one at a time (the transport holds at most a flow-control window of a
// stream not being read), kept, and parsed into the request when the last
// has come, each piece freed as the parser leaves it; from there on the call
// is an Attend like any other (AttentionService::Process).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "server/attention_service.h"
#include "server/log.h"
#include "server/request_kind.h"
#include "server/rpc/status_util.h"

namespace attnserve::server {
namespace {

// The pieces in order as one input for the protobuf parser; each piece is
// freed once the parser has moved past it.
class PiecesInput final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit PiecesInput(std::deque<std::string>* pieces) : pieces_(pieces) {}

  bool Next(const void** data, int* size) override {
    if (backed_up_ > 0) {  // the tail of the current piece again
      const std::string& piece = pieces_->front();
      *data = piece.data() + piece.size() - backed_up_;
      *size = static_cast<int>(backed_up_);
      count_ += backed_up_;
      backed_up_ = 0;
      return true;
    }
    if (started_) pieces_->pop_front();  // the parser is done with it
    while (!pieces_->empty() && pieces_->front().empty()) pieces_->pop_front();
    if (pieces_->empty()) return false;
    started_ = true;
    *data = pieces_->front().data();
    *size = static_cast<int>(pieces_->front().size());
    count_ += *size;
    return true;
  }
  void BackUp(int count) override {
    backed_up_ += count;
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  std::deque<std::string>* const pieces_;
  bool started_ = false;
  int64_t backed_up_ = 0;
  int64_t count_ = 0;
};

}  // namespace

class AttentionService::PiecesReactor final
    : public grpc::ServerReadReactor<v1::RequestPiece> {
 public:
  PiecesReactor(AttentionService* service, grpc::CallbackServerContext* context,
                v1::AttendResponse* response)
      : service_(service),
        context_(context),
        response_(response),
        received_(absl::Now()) {
    service_->work_.Begin();
    const absl::Status admitted = service_->admission_->Admit(*context);
    if (!admitted.ok()) {
      Answer(admitted);
      return;
    }
    StartRead(&piece_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client has sent every piece (or the call ended)
      if (received_bytes_ != request_bytes_ || request_bytes_ == 0) {
        Answer(absl::InvalidArgumentError(
            absl::StrCat("AttendPieces: the pieces ended after ",
                         received_bytes_, " bytes of the ", request_bytes_,
                         " that the first piece announced (request_bytes)")));
        return;
      }
      Submit();
      return;
    }
    const absl::Status status = Take();
    if (!status.ok()) {
      Answer(status);
      return;
    }
    StartRead(&piece_);
  }

  void OnCancel() override { service_->scheduler_->Withdraw(*ticket_); }

  void OnDone() override {
    guard_.Disarm();
    held_.Release();
    service_->work_.End();
    delete this;
  }

 private:
  // Checks and keeps piece_ (reserving the request's bytes at the first).
  absl::Status Take() {
    const int64_t announced = piece_.request_bytes();
    if (pieces_read_ == 0) {
      const int64_t limit = service_->options_.max_request_bytes;
      if (announced < 1 || announced > limit) {
        return absl::InvalidArgumentError(absl::StrCat(
            "AttendPieces: the first piece's request_bytes must be between 1 "
            "and --max_request_bytes = ",
            limit, ", got ", announced));
      }
      request_bytes_ = announced;
      if (service_->options_.budget != nullptr) {
        // The pieces, and the request parsed from them before they are
        // all freed.
        absl::StatusOr<MemoryBudget::Reservation> reserved =
            service_->options_.budget->Reserve(2 * announced);
        if (!reserved.ok()) {
          service_->metrics_->RecordRejection(Rejection::kMemoryBudget);
          return reserved.status();
        }
        receiving_ = *std::move(reserved);
      }
    } else if (announced != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AttendPieces: request_bytes is set in piece ", pieces_read_,
          "; only the first piece announces the size"));
    }
    const int64_t size = static_cast<int64_t>(piece_.data().size());
    if (size > request_bytes_ - received_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AttendPieces: the pieces carry more than the ", request_bytes_,
          " bytes that the first piece announced (request_bytes)"));
    }
    received_bytes_ += size;
    ++pieces_read_;
    pieces_.push_back(std::move(*piece_.mutable_data()));
    piece_.Clear();
    return absl::OkStatus();
  }

  // Parses the pieces into the request and hands it on.
  void Submit() {
    PiecesInput input(&pieces_);
    const bool parsed = request_.ParseFromZeroCopyStream(&input);
    pieces_.clear();
    if (!parsed) {
      Answer(absl::InvalidArgumentError(
          "AttendPieces: the pieces are not a serialized AttendRequest"));
      return;
    }
    // The call's own reservation takes over the one made while receiving
    // (Process gives back what it does not need).
    service_->Process<AttendKind>(
        request_, request_bytes_, response_, received_,
        [context = context_] { return context->IsCancelled(); },
        CallDeadline(*context_), &held_, ticket_, std::move(receiving_),
        [this](absl::Status status) { Answer(std::move(status)); });
  }

  void Answer(absl::Status status) {
    receiving_.Release();
    if (!status.ok()) response_->Clear();
    response_->set_request_id(request_.request_id());
    const grpc::Status grpc_status = ToGrpcStatus(status);
    const int64_t response_bytes =
        static_cast<int64_t>(response_->ByteSizeLong());
    service_->RecordAnswer<AttendKind>(
        request_, Method::kAttendPieces, grpc_status.error_code(),
        absl::ToDoubleSeconds(absl::Now() - received_), received_bytes_,
        response_bytes);
    service_->work_.Answered();
    ATTNSERVE_LOG(LogLevel::kDebug, "AttendPieces id=", request_.request_id(),
                  " code=", grpc_status.error_code(),
                  " bytes_in=", received_bytes_, " bytes_out=", response_bytes,
                  " ", status.message());
    if (service_->options_.watchdog != nullptr) {
      service_->options_.watchdog->Arm(context_, &guard_);
    }
    Finish(grpc_status);
  }

  AttentionService* const service_;
  grpc::CallbackServerContext* const context_;
  v1::AttendResponse* const response_;
  const absl::Time received_;
  v1::RequestPiece piece_;
  std::deque<std::string> pieces_;
  int64_t pieces_read_ = 0;
  int64_t request_bytes_ = 0;
  int64_t received_bytes_ = 0;
  // The request's bytes while it arrives; Process takes them over.
  MemoryBudget::Reservation receiving_;
  v1::AttendRequest request_;
  // The call's bytes until gRPC is done with the answer.
  MemoryBudget::Reservation held_;
  const std::shared_ptr<QueueTicket> ticket_ = std::make_shared<QueueTicket>();
  SendWatchdog::Guard guard_;
};

grpc::ServerReadReactor<v1::RequestPiece>* AttentionService::AttendPieces(
    grpc::CallbackServerContext* context, v1::AttendResponse* response) {
  return new PiecesReactor(this, context, response);
}

}  // namespace attnserve::server
