#ifndef ATTNSERVE_SERVER_RPC_ADMISSION_H_
#define ATTNSERVE_SERVER_RPC_ADMISSION_H_

// Whether a call may start work: UNAVAILABLE "server is shutting down" once
// draining, then the bearer token (auth.h). One per server, shared by its
// services, so that one StartDraining stops new work on all of them.

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "server/rpc/auth.h"

namespace attnserve::server {

// What work refused for a drain is answered (UNAVAILABLE).
inline absl::Status ShuttingDownError() {
  return absl::UnavailableError("server is shutting down");
}

class Admission {
 public:
  // An empty `token` turns the token check off.
  explicit Admission(const std::string& token) : auth_(token) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // From now on Admit refuses. Thread-safe, idempotent.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // OK, or Unavailable while draining, or BearerTokenAuth::Check's error.
  absl::Status Admit(const grpc::CallbackServerContext& context) const {
    if (draining()) return ShuttingDownError();
    return auth_.Check(context.client_metadata());
  }

  // A message on a stream opened before draining began: the stream stays
  // open, but takes no new work (Unavailable while draining).
  absl::Status AdmitStreamMessage() const {
    return draining() ? ShuttingDownError() : absl::OkStatus();
  }

  // The token check alone, for calls that answer while draining (the v2
  // protocol's ModelReady reports "not ready" rather than failing).
  absl::Status Authenticate(const grpc::CallbackServerContext& context) const {
    return auth_.Check(context.client_metadata());
  }

 private:
  std::atomic<bool> draining_{false};
  const BearerTokenAuth auth_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_ADMISSION_H_
