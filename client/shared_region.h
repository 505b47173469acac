#ifndef ATTNSERVE_CLIENT_SHARED_REGION_H_
#define ATTNSERVE_CLIENT_SHARED_REGION_H_

// A POSIX shared-memory region of attnctl's, registered with the server: the
// object is created under the server's prefix (SharedMemoryService.Status),
// mapped here, registered (its Register call is held open as the lease), and
// its name unlinked as soon as the server has mapped it, so that whatever
// happens to attnctl afterwards nothing is left in /dev/shm, and the server
// drops the registration when attnctl's connection goes. --shm's placement
// (client/shared_memory.h) and step channels (client/step_channel.h) are
// made of it.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "client/connection.h"
#include "grpcpp/channel.h"

namespace attnserve::client {

class RegisteredRegion {
 public:
  // A zeroed region of `size` bytes (> 0) registered on `channel`, named
  // "<prefix>attnctl_<pid>_<n>". The server's errors keep their codes
  // (FAILED_PRECONDITION when its --shared_memory is off), prefixed with the
  // step; Internal for a local shm_open/ftruncate/mmap failure. Nothing is
  // left behind on error.
  static absl::StatusOr<std::unique_ptr<RegisteredRegion>> Create(
      const std::shared_ptr<grpc::Channel>& channel,
      const ConnectionOptions& connection, int64_t size);

  // Unregisters (ending the lease) and unmaps.
  ~RegisteredRegion();
  RegisteredRegion(const RegisteredRegion&) = delete;
  RegisteredRegion& operator=(const RegisteredRegion&) = delete;

  // The registered name.
  const std::string& name() const { return name_; }
  // The mapping (page-aligned) and its size.
  char* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  RegisteredRegion() = default;

  std::string name_;
  char* data_ = nullptr;
  int64_t size_ = 0;
  ConnectionOptions connection_;
  std::unique_ptr<v1::SharedMemoryService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> lease_context_;
  std::unique_ptr<grpc::ClientReader<v1::SharedMemoryLease>> lease_;
};

// The server's error of a shared-memory call, with its code, prefixed with
// "shared memory: <step>: ".
absl::Status SharedMemoryRpcError(absl::string_view step,
                                  const grpc::Status& status);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_SHARED_REGION_H_
