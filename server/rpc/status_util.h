#ifndef ATTNSERVE_SERVER_RPC_STATUS_UTIL_H_
#define ATTNSERVE_SERVER_RPC_STATUS_UTIL_H_

// Conversions between gRPC's and Abseil's types at the service's edge.

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace attnserve::server {

// The one place absl::Status becomes grpc::Status (the codes share numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The call's deadline; absl::InfiniteFuture() when the client set none.
absl::Time CallDeadline(const grpc::CallbackServerContext& context);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_STATUS_UTIL_H_
