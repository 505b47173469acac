// AttendPieces: one Attend call whose request arrives as a stream of pieces.
// The first piece announces the request's size, and the call reserves twice
// that (the pieces and the request parsed from them) of the memory budget
// before it reads the next one; once parsed, it holds what any Attend call
// holds. A call the budget cannot hold is refused while its client has sent
// one piece, not after the transport has buffered the whole request. Pieces
// are then read one at a time (the transport holds at most a flow-control
// window of a stream not being read) and put together by RequestPieces
// (request_pieces.h); from there on the call is an Attend like any other
// (AttentionService::Process).

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "server/attention_service.h"
#include "server/log.h"
#include "server/request_kind.h"
#include "server/request_pieces.h"
#include "server/rpc/status_util.h"

namespace attnserve::server {

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
    guard_.Disarm();
    if (!ok) {  // the client has sent every piece (or the call ended)
      Submit();
      return;
    }
    const absl::Status status = Take();
    if (!status.ok()) {
      Answer(status);
      return;
    }
    // A client that stops sending would hold the bytes reserved for its
    // request for ever: without a next piece within --send_timeout the call
    // is cancelled, as one whose answer is not taken.
    if (service_->options_.watchdog != nullptr) {
      service_->options_.watchdog->Arm(context_, &guard_);
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
  // Checks and keeps piece_, reserving the request's bytes at the first.
  absl::Status Take() {
    const bool first = pieces_.request_bytes() == 0;
    absl::Status status = pieces_.Add(piece_);
    piece_.Clear();
    if (!status.ok() || !first || service_->options_.budget == nullptr) {
      return status;
    }
    // The pieces, and the request parsed from them before they are all freed.
    absl::StatusOr<MemoryBudget::Reservation> reserved =
        service_->options_.budget->Reserve(2 * pieces_.request_bytes());
    if (!reserved.ok()) {
      service_->metrics_->RecordRejection(Rejection::kMemoryBudget);
      return reserved.status();
    }
    receiving_ = *std::move(reserved);
    return absl::OkStatus();
  }

  // Parses the pieces into the request and hands it on.
  void Submit() {
    const absl::Status parsed = pieces_.Parse(&request_);
    if (!parsed.ok()) {
      Answer(parsed);
      return;
    }
    // The call's own reservation takes over the one made while receiving
    // (Process gives back what it does not need).
    service_->Process<AttendKind>(
        request_, pieces_.request_bytes(), response_, received_,
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
        absl::ToDoubleSeconds(absl::Now() - received_),
        pieces_.received_bytes(), response_bytes);
    service_->work_.Answered();
    ATTNSERVE_LOG(LogLevel::kDebug, "AttendPieces id=", request_.request_id(),
                  " code=", grpc_status.error_code(),
                  " bytes_in=", pieces_.received_bytes(),
                  " bytes_out=", response_bytes, " ", status.message());
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
  RequestPieces pieces_{service_->options_.max_request_bytes};
  // The request's bytes while it arrives; Process takes them over.
  MemoryBudget::Reservation receiving_;
  v1::AttendRequest request_;
  // The call's bytes until gRPC is done with the answer.
  MemoryBudget::Reservation held_;
  const std::shared_ptr<QueueTicket> ticket_ = std::make_shared<QueueTicket>();
  // Armed while the next piece is awaited, and while the answer is sent.
  SendWatchdog::Guard guard_;
};

grpc::ServerReadReactor<v1::RequestPiece>* AttentionService::AttendPieces(
    grpc::CallbackServerContext* context, v1::AttendResponse* response) {
  return new PiecesReactor(this, context, response);
}

}  // namespace attnserve::server
