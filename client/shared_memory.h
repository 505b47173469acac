#ifndef ATTNSERVE_CLIENT_SHARED_MEMORY_H_
#define ATTNSERVE_CLIENT_SHARED_MEMORY_H_

// attnctl's --shm: one POSIX shared-memory region that holds an Attend
// request's query, key and value and receives its output (and weights), so
// that the call carries references instead of tensor bytes. The region is a
// RegisteredRegion (client/shared_region.h).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/shared_region.h"
#include "grpcpp/channel.h"

namespace attnserve::client {

class SharedMemoryPlacement {
 public:
  // Moves `request`'s query, key and value into a new region (64-byte
  // aligned spans; the request then refers to them and carries no tensor
  // bytes) with room for the output, and the weights when return_weights,
  // which the request asks the server to write there. Registers it on
  // `channel`. The server's errors keep their codes (FAILED_PRECONDITION
  // when its --shared_memory is off), prefixed with the step; Internal for a
  // local shm_open/ftruncate/mmap failure. Nothing is left behind on error.
  static absl::StatusOr<std::unique_ptr<SharedMemoryPlacement>> Create(
      const std::shared_ptr<grpc::Channel>& channel,
      const ConnectionOptions& connection, v1::AttendRequest* request);

  SharedMemoryPlacement(const SharedMemoryPlacement&) = delete;
  SharedMemoryPlacement& operator=(const SharedMemoryPlacement&) = delete;

  // The region's registered name and its size.
  const std::string& name() const { return region_->name(); }
  int64_t size() const { return region_->size(); }

  // Copies the output and weights the server wrote into the region into
  // `response`'s data, so that it reads as an ordinary response.
  // InvalidArgument when the response's references are not this region's,
  // or when it carries an output's (or the weights') bytes instead of a
  // reference: every output of a placed request is asked for in the region.
  absl::Status CollectOutputs(v1::AttendResponse* response) const;

 private:
  SharedMemoryPlacement() = default;
  absl::Status CopyOut(absl::string_view name, v1::Tensor* tensor) const;

  std::unique_ptr<RegisteredRegion> region_;
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_SHARED_MEMORY_H_
