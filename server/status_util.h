#ifndef ATTNSERVE_SERVER_STATUS_UTIL_H_
#define ATTNSERVE_SERVER_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace attnserve::server {

// The one place absl::Status becomes grpc::Status (the codes share numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_STATUS_UTIL_H_
