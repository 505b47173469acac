#include "server/rpc/status_util.h"

#include <chrono>
#include <string>

namespace attnserve::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  // No deadline is reported as the far end of system_clock.
  if (deadline >=
      std::chrono::system_clock::time_point::max() - std::chrono::hours(24)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

}  // namespace attnserve::server
