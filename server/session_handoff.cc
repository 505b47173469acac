#include "server/session_handoff.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/session_service.h"

namespace attnserve::server {

SessionHandoff::SessionHandoff(const HandoffOptions& options,
                               kvcache::SessionStore* store)
    : store_(store) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  stub_ = v1::SessionService::NewStub(
      grpc::CreateCustomChannel(options.target, options.credentials, args));
  context_.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  if (!options.token.empty()) {
    context_.AddMetadata("authorization", "Bearer " + options.token);
  }
  call_ = stub_->ImportSessions(&context_, &response_);
  v1::SessionTransferChunk announce;
  for (const std::string& id : store_->LiveIds()) announce.add_announce(id);
  announced_ = call_->Write(announce);
}

SessionHandoff::~SessionHandoff() {
  if (call_ != nullptr) context_.TryCancel();
}

absl::StatusOr<HandoffResult> SessionHandoff::Send() {
  HandoffResult result;
  if (!announced_) {
    const grpc::Status st = call_->Finish();
    call_.reset();
    return absl::UnavailableError(
        absl::StrCat("the peer took no announcement: ", st.error_message()));
  }
  absl::StatusOr<std::vector<kvcache::ExportedSession>> exported =
      store_->Export({}, /*remove=*/true);
  if (!exported.ok()) return exported.status();
  v1::SessionTransferChunk chunk;
  bool open = true;
  for (kvcache::ExportedSession& e : *exported) {
    kvcache::SnapshotWriter writer(std::move(e));
    while (open && !writer.done()) {
      writer.Next(
          kTransferChunkBytes - static_cast<int64_t>(chunk.data().size()),
          chunk.mutable_data());
      if (static_cast<int64_t>(chunk.data().size()) == kTransferChunkBytes) {
        result.bytes += static_cast<int64_t>(chunk.data().size());
        open = call_->Write(chunk);
        chunk.clear_data();
      }
    }
  }
  if (open && !chunk.data().empty()) {
    result.bytes += static_cast<int64_t>(chunk.data().size());
    open = call_->Write(chunk);
  }
  if (open) call_->WritesDone();
  const grpc::Status st = call_->Finish();
  call_.reset();
  result.sessions = response_.sessions_size();
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat("the peer refused the handoff after ",
                                     result.sessions, " of ", exported->size(),
                                     " sessions: ", st.error_message()));
  }
  return result;
}

}  // namespace attnserve::server
