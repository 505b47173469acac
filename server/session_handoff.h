#ifndef ATTNSERVE_SERVER_SESSION_HANDOFF_H_
#define ATTNSERVE_SERVER_SESSION_HANDOFF_H_

// A draining server's sessions handed to a peer (--handoff_to): on SIGTERM the
// server announces its live sessions to the peer at once (the peer answers
// calls on them UNAVAILABLE "arriving", not NOT_FOUND), lets its calls in
// flight finish, then moves every session (SessionStore::Export with remove)
// in one ImportSessions call. Calls on a moved session answer UNAVAILABLE
// here; their retries, routed to the peer by the balancer, continue the
// sequence there (docs/operations.md, "Rolling updates without losing
// sessions").

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kvcache/session_store.h"

namespace attnserve::server {

struct HandoffOptions {
  // The peer's gRPC address (host:port).
  std::string target;
  // Credentials for the peer and the bearer token its calls carry (empty =
  // none).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;
  // The whole handoff, announcement to the peer's answer.
  absl::Duration timeout = absl::Seconds(60);
};

// What a handoff moved.
struct HandoffResult {
  int64_t sessions = 0;
  int64_t bytes = 0;
};

class SessionHandoff {
 public:
  // Opens the ImportSessions call on the peer and announces every live
  // session of `store` (which must outlive this object).
  SessionHandoff(const HandoffOptions& options, kvcache::SessionStore* store);
  ~SessionHandoff();
  SessionHandoff(const SessionHandoff&) = delete;
  SessionHandoff& operator=(const SessionHandoff&) = delete;

  // Moves every live session to the peer: each ends here (calls on it answer
  // UNAVAILABLE) as it is exported. The peer's error, naming what it refused;
  // sessions sent before a failure live on the peer, the rest are lost (they
  // were ending with this server).
  absl::StatusOr<HandoffResult> Send();

 private:
  kvcache::SessionStore* const store_;
  std::unique_ptr<v1::SessionService::Stub> stub_;
  grpc::ClientContext context_;
  v1::ImportSessionsResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::SessionTransferChunk>> call_;
  // Whether the announcement was written (false: the peer is unreachable).
  bool announced_ = false;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_HANDOFF_H_
