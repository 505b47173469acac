#include "server/step_transport.h"

#include <utility>

#include "core/status_macros.h"

namespace attnserve::server {

RingTransport::RingTransport(wire::StepRing ring,
                             std::shared_ptr<SharedRegion> region)
    : ring_(std::move(ring)), region_(std::move(region)) {}

void RingTransport::Describe(v1::StepChannelInfo* info) const {
  info->set_request_capacity(ring_.request_capacity());
  info->set_response_capacity(ring_.response_capacity());
}

absl::Status RingTransport::Connect(const std::function<bool()>&) {
  return absl::OkStatus();
}

absl::StatusOr<bool> RingTransport::Next(absl::Duration spin,
                                         const std::function<bool()>& stop,
                                         std::string* bytes,
                                         absl::Status* refused) {
  if (!ring_.WaitForRequest(spin, stop)) return false;
  // The client may have shrunk its object: touching the ring then is a
  // SIGBUS (the registry's handler makes it zeros, and Check reports it).
  RETURN_IF_ERROR(region_->Check());
  *refused = ring_.TakeRequest(bytes);
  return true;
}

int64_t RingTransport::response_capacity() const {
  return ring_.response_capacity();
}

absl::Status RingTransport::Respond(absl::string_view bytes) {
  // A region that shrank during the step is not written to.
  RETURN_IF_ERROR(region_->Check());
  ring_.Respond(bytes);
  return absl::OkStatus();
}

bool RingTransport::hung_up() const { return ring_.hung_up(); }

void RingTransport::Close() { ring_.Close(); }

void RingTransport::Interrupt() { ring_.Interrupt(); }

SocketTransport::SocketTransport(StepListener* listener,
                                 int64_t max_frame_bytes)
    : listener_(listener),
      max_frame_bytes_(max_frame_bytes),
      token_(listener->Issue()) {}

SocketTransport::~SocketTransport() { listener_->Withdraw(token_); }

void SocketTransport::Describe(v1::StepChannelInfo* info) const {
  info->set_request_capacity(max_frame_bytes_);
  info->set_response_capacity(max_frame_bytes_);
  info->set_tcp_port(listener_->port());
  info->set_tcp_token(token_);
  info->set_host_id(listener_->host_id());
}

absl::Status SocketTransport::Connect(const std::function<bool()>& stop) {
  ASSIGN_OR_RETURN(wire::StepSocket socket,
                   listener_->Await(token_, kConnectTimeout, stop));
  socket_.emplace(std::move(socket));
  return absl::OkStatus();
}

absl::StatusOr<bool> SocketTransport::Next(absl::Duration spin,
                                           const std::function<bool()>& stop,
                                           std::string* bytes,
                                           absl::Status* refused) {
  const absl::Status received = socket_->ReceiveFrame(
      max_frame_bytes_, spin, absl::InfiniteFuture(), stop, bytes);
  if (received.ok() || absl::IsInvalidArgument(received)) {
    *refused = received;
    return true;
  }
  if (absl::IsCancelled(received)) return false;
  if (absl::IsUnavailable(received)) {
    // The client closed its end: its hang-up.
    hung_up_ = true;
    return false;
  }
  return received;
}

int64_t SocketTransport::response_capacity() const { return max_frame_bytes_; }

absl::Status SocketTransport::Respond(absl::string_view bytes) {
  return socket_->SendFrame(bytes);
}

bool SocketTransport::hung_up() const { return hung_up_; }

void SocketTransport::Close() {
  // The client's wait for an answer ends with the connection closed.
  if (socket_.has_value()) socket_->Shutdown();
}

// Connect and Next poll stop() every wire::kWaitSlice; a send blocked on a
// client that reads nothing ends within the socket's send timeout.
void SocketTransport::Interrupt() {}

}  // namespace attnserve::server
