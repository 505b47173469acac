#include "client/step_channel.h"

#include <utility>

#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace attnserve::client {

absl::StatusOr<std::unique_ptr<StepChannel>> StepChannel::Open(
    const std::shared_ptr<grpc::Channel>& channel,
    const ConnectionOptions& connection, int64_t size, absl::Duration spin) {
  std::unique_ptr<StepChannel> c(new StepChannel());
  c->spin_ = spin;
  c->timeout_ = connection.timeout;
  ASSIGN_OR_RETURN(c->region_,
                   RegisteredRegion::Create(channel, connection, size));
  c->stub_ = v1::SessionService::NewStub(channel);
  // The call lasts as long as the channel: no deadline.
  ConnectionOptions call_options = connection;
  call_options.timeout = absl::InfiniteDuration();
  c->context_ = std::make_unique<grpc::ClientContext>();
  PrepareContext(call_options, c->context_.get());
  v1::OpenStepChannelRequest open;
  open.set_region(c->region_->name());
  c->call_ = c->stub_->StepChannel(c->context_.get(), open);
  v1::StepChannelInfo info;
  if (!c->call_->Read(&info)) {
    const grpc::Status status = c->call_->Finish();
    c->call_.reset();
    return SharedMemoryRpcError("StepChannel", status);
  }
  ASSIGN_OR_RETURN(
      c->ring_, wire::StepRing::Attach(c->region_->data(), c->region_->size()));
  return c;
}

StepChannel::~StepChannel() {
  if (call_ == nullptr) return;
  // A clean hang-up lets the server free the channel before the call ends;
  // after a step that got no answer the server may still be on it: cancel.
  if (ring_.has_value() && !unanswered_) {
    ring_->Hangup();
  } else {
    context_->TryCancel();
  }
  call_->Finish();
}

absl::Status StepChannel::Step(const v1::AttendSessionsRequest& request,
                               v1::AttendSessionsResponse* response) {
  request.SerializeToString(&request_bytes_);
  const absl::Status called = ring_->Call(request_bytes_, &response_bytes_,
                                          spin_, absl::Now() + timeout_);
  if (absl::IsDeadlineExceeded(called)) unanswered_ = true;
  RETURN_IF_ERROR(called);
  if (!response->ParseFromString(response_bytes_)) {
    return absl::InternalError(
        "the step channel's answer is not an AttendSessionsResponse");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::client
