#ifndef ATTNSERVE_CLIENT_STEP_CHANNEL_H_
#define ATTNSERVE_CLIENT_STEP_CHANNEL_H_

// attnctl's step channel (docs/api.md "StepChannel"): session steps written
// into a ring in a RegisteredRegion (client/shared_region.h) and answered
// there (same host), or sent as frames on a TCP socket of the channel's own,
// while the StepChannel call stays open as the channel's lease.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "client/connection.h"
#include "client/shared_region.h"
#include "grpcpp/channel.h"
#include "wire/step_ring.h"
#include "wire/step_socket.h"

namespace attnserve::client {

class StepChannel {
 public:
  // A region of `size` bytes and a channel over it. The server's errors keep
  // their codes (FAILED_PRECONDITION when its --step_channels or
  // --shared_memory is off), prefixed with the step.
  static absl::StatusOr<std::unique_ptr<StepChannel>> Open(
      const std::shared_ptr<grpc::Channel>& channel,
      const ConnectionOptions& connection, int64_t size = int64_t{1} << 20,
      absl::Duration spin = absl::Milliseconds(2));
  // A TCP channel to the server of `channel`, whose host is `host` (the
  // port comes with the channel). UNAVAILABLE when the socket cannot be
  // connected.
  static absl::StatusOr<std::unique_ptr<StepChannel>> OpenTcp(
      const std::shared_ptr<grpc::Channel>& channel,
      const ConnectionOptions& connection, const std::string& host,
      absl::Duration spin = absl::Milliseconds(2));

  // Hangs up (the server frees the channel and ends the call), then
  // unregisters the region (shared memory).
  ~StepChannel();
  StepChannel(const StepChannel&) = delete;
  StepChannel& operator=(const StepChannel&) = delete;

  // One step, answered as on AttendSessionsStream: a step the server refuses
  // comes back OK with error_code and error_message set. Errors here are the
  // channel's own (the request too large for the slot or frame limit, the
  // server closed the channel, no answer within the connection's timeout,
  // an answer that does not parse).
  absl::Status Step(const v1::AttendSessionsRequest& request,
                    v1::AttendSessionsResponse* response);

 private:
  StepChannel() = default;
  // Starts the StepChannel call and reads its one StepChannelInfo.
  absl::Status Start(const std::shared_ptr<grpc::Channel>& channel,
                     const ConnectionOptions& connection,
                     const v1::OpenStepChannelRequest& open,
                     v1::StepChannelInfo* info);

  std::unique_ptr<RegisteredRegion> region_;
  std::unique_ptr<v1::SessionService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<v1::StepChannelInfo>> call_;
  // One of the two.
  std::optional<wire::StepRing> ring_;
  std::optional<wire::StepSocket> socket_;
  int64_t request_capacity_ = 0;
  int64_t response_capacity_ = 0;
  absl::Duration spin_;
  // Each step's deadline from its start: the connection's timeout.
  absl::Duration timeout_;
  std::string request_bytes_;
  std::string response_bytes_;
  // A step went unanswered in time: the ring is no one's, the call is
  // cancelled instead of hung up.
  bool unanswered_ = false;
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_STEP_CHANNEL_H_
