// SessionService's ExportSessions and ImportSessions: sessions moved between
// servers as snapshots (kvcache/session_snapshot.h), in pieces of at most
// kTransferChunkBytes, one piece in memory at a time on either side.

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/session_codec.h"
#include "server/session_piece_stream.h"
#include "server/session_service.h"

namespace attnserve::server {

// ExportSessions: the sessions' snapshots one after another. Allowed while
// the server drains (an operator moving sessions off it); the token is
// checked as for every call.
class SessionService::ExportStream final
    : public grpc::ServerWriteReactor<v1::SessionTransferChunk> {
 public:
  ExportStream(SessionService* service, grpc::CallbackServerContext* context,
               const v1::ExportSessionsRequest& request)
      : service_(service), received_(absl::Now()) {
    service_->work_.Begin();
    absl::Status status = service_->admission_->Authenticate(*context);
    if (status.ok()) {
      const std::vector<std::string> ids(request.session_ids().begin(),
                                         request.session_ids().end());
      absl::StatusOr<std::vector<kvcache::ExportedSession>> exported =
          service_->store_->Export(ids, request.remove());
      if (exported.ok()) {
        for (kvcache::ExportedSession& e : *exported) {
          writers_.emplace_back(std::move(e));
        }
      } else {
        status = exported.status();
      }
    }
    if (!status.ok()) {
      End(status);
      return;
    }
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client stopped reading"));
      return;
    }
    WriteNext();
  }

  void OnDone() override {
    service_->work_.End();
    delete this;
  }

 private:
  void WriteNext() {
    chunk_.Clear();
    std::string* data = chunk_.mutable_data();
    while (!writers_.empty() &&
           static_cast<int64_t>(data->size()) < kTransferChunkBytes) {
      kvcache::SnapshotWriter& w = writers_.front();
      w.Next(kTransferChunkBytes - static_cast<int64_t>(data->size()), data);
      // Its blocks are let go as soon as it is written.
      if (w.done()) writers_.pop_front();
    }
    if (data->empty()) {
      End(absl::OkStatus());
      return;
    }
    bytes_ += static_cast<int64_t>(data->size());
    StartWrite(&chunk_);
  }

  void End(const absl::Status& status) {
    Finish(service_->Answer(Method::kExportSessions, status, received_, 0,
                            bytes_));
  }

  SessionService* const service_;
  const absl::Time received_;
  std::deque<kvcache::SnapshotWriter> writers_;
  v1::SessionTransferChunk chunk_;
  int64_t bytes_ = 0;
};

grpc::ServerWriteReactor<v1::SessionTransferChunk>*
SessionService::ExportSessions(grpc::CallbackServerContext* context,
                               const v1::ExportSessionsRequest* request) {
  return new ExportStream(this, context, *request);
}

// ImportSessions: pieces fed to a snapshot reader in order (PieceStream);
// each session is added once its checksum is verified. Refused while the
// server drains.
class SessionService::ImportStream final
    : public PieceStream<v1::SessionTransferChunk> {
 public:
  ImportStream(SessionService* service, grpc::CallbackServerContext* context,
               v1::ImportSessionsResponse* response)
      : PieceStream(service, context, Method::kImportSessions),
        response_(response),
        reader_(service->store_->NewReader()) {
    Start();
  }

 private:
  absl::Status Apply(const v1::SessionTransferChunk& piece) override {
    absl::Status status = Announce(piece);
    const absl::Status fed = status.ok() ? reader_.Feed(piece.data()) : status;
    // The snapshots completed before a bad one are added.
    while (std::optional<kvcache::SnapshotReader::Session> s =
               reader_.TakeCompleted()) {
      absl::StatusOr<kvcache::SessionInfo> imported =
          service()->store_->Import(*std::move(s));
      if (!imported.ok()) return imported.status();
      wire::EncodeInfo(*imported, response_->add_sessions());
    }
    return status.ok() ? fed : status;
  }

  absl::Status Finished() override { return reader_.Finish(); }

  absl::Status Conclude(absl::Status status) override {
    service()->store_->EndArrivals(announced_);
    if (status.ok()) return status;
    return absl::Status(
        status.code(),
        absl::StrCat(status.message(), " (", response_->sessions_size(),
                     " sessions imported before it)"));
  }

  int64_t ResponseBytes() const override {
    return static_cast<int64_t>(response_->ByteSizeLong());
  }

  absl::Status Announce(const v1::SessionTransferChunk& piece) {
    if (piece.announce_size() == 0) return absl::OkStatus();
    if (pieces() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("announce: set on piece ", pieces(),
                       " (only the first piece may announce sessions)"));
    }
    const int64_t most = service()->store_->options().max_sessions;
    if (piece.announce_size() > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "announce: ", piece.announce_size(),
          " sessions, more than this server may hold (", most, ")"));
    }
    announced_.assign(piece.announce().begin(), piece.announce().end());
    constexpr absl::Duration kLongestArrival = absl::Minutes(10);
    service()->store_->Announce(announced_, absl::Now() + kLongestArrival);
    return absl::OkStatus();
  }

  v1::ImportSessionsResponse* const response_;
  kvcache::SnapshotReader reader_;
  std::vector<std::string> announced_;
};

grpc::ServerReadReactor<v1::SessionTransferChunk>*
SessionService::ImportSessions(grpc::CallbackServerContext* context,
                               v1::ImportSessionsResponse* response) {
  return new ImportStream(this, context, response);
}

}  // namespace attnserve::server
