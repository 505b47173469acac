#ifndef ATTNSERVE_SERVER_RPC_AUTH_H_
#define ATTNSERVE_SERVER_RPC_AUTH_H_

// The bearer-token check of AttentionService calls. It is a function the
// handlers call rather than a gRPC interceptor so that it covers exactly the
// AttentionService methods: health and reflection stay open without a token,
// and the draining check keeps running before it.

#include <map>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/string_ref.h"

namespace attnserve::server {

class BearerTokenAuth {
 public:
  // An empty `token` turns the check off: every call is admitted.
  explicit BearerTokenAuth(const std::string& token);

  // OK when `metadata` (a call's client metadata) holds
  // "authorization: Bearer <token>", or the check is off. Otherwise
  // Unauthenticated: "missing \"authorization: Bearer <token>\" metadata" when
  // there is no authorization entry, "invalid bearer token" when the first one
  // holds anything else.
  absl::Status Check(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  // "Bearer <token>", or empty when the check is off.
  const std::string expected_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_AUTH_H_
