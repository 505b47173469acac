#ifndef ATTNSERVE_SERVER_SESSION_PIECE_STREAM_H_
#define ATTNSERVE_SERVER_SESSION_PIECE_STREAM_H_

// What SessionService's client streams (AppendKvStream, ImportSessions)
// share: the call admitted like any other, its pieces read and applied one at
// a time in order, each held against the memory budget while it is applied
// (its bytes are held until the next read reuses the message); the first
// error, or the end of the stream, answers the call. Private to the service's
// sources.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "server/session_service.h"

namespace attnserve::server {

template <typename Piece>
class SessionService::PieceStream : public grpc::ServerReadReactor<Piece> {
 protected:
  PieceStream(SessionService* service, grpc::CallbackServerContext* context,
              Method method)
      : service_(service), method_(method), received_(absl::Now()) {
    service_->work_.Begin();
    admitted_ = service_->admission_->Admit(*context);
  }
  // Called last by the derived constructor (the calls below need it whole).
  void Start() {
    if (admitted_.ok()) {
      this->StartRead(&piece_);
    } else {
      End(admitted_);
    }
  }

  // Applies the next piece, number pieces() from 0; an error ends the call.
  virtual absl::Status Apply(const Piece& piece) = 0;
  // The error that ends the call when piece pieces() failed (`status`: the
  // budget's refusal or Apply's); by default `status` itself.
  virtual absl::Status PieceError(absl::Status status) { return status; }
  // The stream ended after pieces() pieces: the call's status.
  virtual absl::Status Finished() = 0;
  // The answer to send for `status` (the response cleared or the message
  // completed as the call needs), and the response's bytes.
  virtual absl::Status Conclude(absl::Status status) = 0;
  virtual int64_t ResponseBytes() const = 0;

  SessionService* service() const { return service_; }
  int64_t pieces() const { return pieces_; }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending (or the call was cancelled)
      End(Finished());
      return;
    }
    const int64_t piece_bytes = static_cast<int64_t>(piece_.ByteSizeLong());
    bytes_ += piece_bytes;
    absl::StatusOr<MemoryBudget::Reservation> reserved =
        service_->Reserve(piece_bytes);
    const absl::Status status =
        reserved.ok() ? Apply(piece_) : reserved.status();
    if (reserved.ok()) reserved->Release();
    if (!status.ok()) {
      End(PieceError(status));
      return;
    }
    ++pieces_;
    this->StartRead(&piece_);
  }

  void OnDone() override {
    service_->work_.End();
    delete this;
  }

  void End(absl::Status status) {
    status = Conclude(std::move(status));
    this->Finish(
        service_->Answer(method_, status, received_, bytes_, ResponseBytes()));
  }

  SessionService* const service_;
  const Method method_;
  const absl::Time received_;
  absl::Status admitted_;
  Piece piece_;
  int64_t pieces_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_PIECE_STREAM_H_
