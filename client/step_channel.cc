#include "client/step_channel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace attnserve::client {

absl::Status StepChannel::Start(const std::shared_ptr<grpc::Channel>& channel,
                                const ConnectionOptions& connection,
                                const v1::OpenStepChannelRequest& open,
                                v1::StepChannelInfo* info) {
  timeout_ = connection.timeout;
  stub_ = v1::SessionService::NewStub(channel);
  // The call lasts as long as the channel: no deadline.
  ConnectionOptions call_options = connection;
  call_options.timeout = absl::InfiniteDuration();
  context_ = std::make_unique<grpc::ClientContext>();
  PrepareContext(call_options, context_.get());
  call_ = stub_->StepChannel(context_.get(), open);
  if (!call_->Read(info)) {
    const grpc::Status status = call_->Finish();
    call_.reset();
    return SharedMemoryRpcError("StepChannel", status);
  }
  request_capacity_ = info->request_capacity();
  response_capacity_ = info->response_capacity();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepChannel>> StepChannel::Open(
    const std::shared_ptr<grpc::Channel>& channel,
    const ConnectionOptions& connection, int64_t size, absl::Duration spin) {
  std::unique_ptr<StepChannel> c(new StepChannel());
  c->spin_ = spin;
  ASSIGN_OR_RETURN(c->region_,
                   RegisteredRegion::Create(channel, connection, size));
  v1::OpenStepChannelRequest open;
  open.set_region(c->region_->name());
  v1::StepChannelInfo info;
  RETURN_IF_ERROR(c->Start(channel, connection, open, &info));
  ASSIGN_OR_RETURN(
      c->ring_, wire::StepRing::Attach(c->region_->data(), c->region_->size()));
  return c;
}

absl::StatusOr<std::unique_ptr<StepChannel>> StepChannel::OpenTcp(
    const std::shared_ptr<grpc::Channel>& channel,
    const ConnectionOptions& connection, const std::string& host,
    absl::Duration spin) {
  std::unique_ptr<StepChannel> c(new StepChannel());
  c->spin_ = spin;
  v1::OpenStepChannelRequest open;
  open.set_tcp(true);
  v1::StepChannelInfo info;
  RETURN_IF_ERROR(c->Start(channel, connection, open, &info));
  if (info.tcp_token().size() != wire::kStepTokenBytes ||
      info.tcp_port() <= 0 || info.tcp_port() > 65535) {
    return absl::InternalError(absl::StrCat(
        "StepChannel: the server's answer names no TCP channel (port ",
        info.tcp_port(), ", a token of ", info.tcp_token().size(), " bytes)"));
  }
  ASSIGN_OR_RETURN(c->socket_,
                   wire::StepSocket::Connect(host, info.tcp_port(),
                                             absl::Now() + connection.timeout));
  if (absl::Status sent = c->socket_->SendRaw(info.tcp_token()); !sent.ok()) {
    c->socket_.reset();  // the server never got the token: cancel the call
    return sent;
  }
  return c;
}

StepChannel::~StepChannel() {
  if (call_ == nullptr) return;
  // A clean hang-up lets the server free the channel before the call ends;
  // after a step that got no answer the server may still be on it: cancel.
  if (unanswered_ || (!ring_.has_value() && !socket_.has_value())) {
    context_->TryCancel();
  } else if (ring_.has_value()) {
    ring_->Hangup();
  } else {
    socket_->Shutdown();
  }
  call_->Finish();
}

absl::Status StepChannel::Step(const v1::AttendSessionsRequest& request,
                               v1::AttendSessionsResponse* response) {
  request.SerializeToString(&request_bytes_);
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Status called;
  if (ring_.has_value()) {
    called = ring_->Call(request_bytes_, &response_bytes_, spin_, deadline);
  } else if (static_cast<int64_t>(request_bytes_.size()) > request_capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("request: ", request_bytes_.size(),
                     " bytes are past the step channel's limit of ",
                     request_capacity_, " bytes"));
  } else {
    called = socket_->SendFrame(request_bytes_);
    if (called.ok()) {
      called = socket_->ReceiveFrame(response_capacity_, spin_, deadline,
                                     nullptr, &response_bytes_);
    }
    if (absl::IsUnavailable(called)) {
      called = absl::UnavailableError(
          "step channel: the server closed it before answering");
    }
  }
  if (absl::IsDeadlineExceeded(called)) unanswered_ = true;
  RETURN_IF_ERROR(called);
  if (!response->ParseFromString(response_bytes_)) {
    return absl::InternalError(
        "the step channel's answer is not an AttendSessionsResponse");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::client
