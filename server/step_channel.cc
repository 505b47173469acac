#include "server/step_channel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/rpc/admission.h"
#include "server/rpc/status_util.h"

namespace attnserve::server {
namespace {

void SetError(const absl::Status& status,
              v1::AttendSessionsResponse* response) {
  response->Clear();
  response->set_error_code(static_cast<int32_t>(status.code()));
  response->set_error_message(std::string(status.message()));
}

}  // namespace

StepChannelReactor::StepChannelReactor(absl::StatusOr<wire::StepRing> ring,
                                       std::shared_ptr<SharedRegion> region,
                                       absl::Duration spin,
                                       StepProcessor* processor,
                                       std::function<bool()> draining,
                                       absl::AnyInvocable<void()> on_end)
    : region_(std::move(region)),
      spin_(spin),
      processor_(processor),
      draining_(std::move(draining)),
      on_end_(std::move(on_end)) {
  if (!ring.ok()) {
    Release();
    Finish(ToGrpcStatus(ring.status()));
    return;
  }
  ring_.emplace(*std::move(ring));
  info_.set_request_capacity(ring_->request_capacity());
  info_.set_response_capacity(ring_->response_capacity());
  info_.set_spin_us(absl::ToInt64Microseconds(spin_));
  StartWrite(&info_);
}

void StepChannelReactor::OnWriteDone(bool ok) {
  if (!ok) {
    ring_->Close();
    Release();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                        "the step channel's client is gone"));
    return;
  }
  thread_ = std::thread([this] { Serve(); });
}

void StepChannelReactor::OnCancel() {
  cancelled_.store(true);
  if (ring_.has_value()) ring_->Interrupt();
}

void StepChannelReactor::OnDone() {
  if (thread_.joinable()) {
    // Finish is the thread's last act; OnDone may run on it.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  Release();
  delete this;
}

void StepChannelReactor::Release() {
  if (!released_.exchange(true)) on_end_();
}

bool StepChannelReactor::Stopping() const {
  return cancelled_.load() || draining_();
}

void StepChannelReactor::Serve() {
  std::string bytes;
  v1::AttendSessionsRequest request;
  v1::AttendSessionsResponse response;
  absl::Status ended;
  while (ring_->WaitForRequest(spin_, [this] { return Stopping(); })) {
    ended = ServeStep(&bytes, &request, &response);
    if (!ended.ok()) break;
  }
  const bool hung_up = ring_->hung_up();
  ring_->Close();
  // Freed before the call ends: a client that saw the end may open another.
  Release();
  if (ended.ok() && !hung_up) {
    ended = cancelled_.load()
                ? absl::CancelledError("the client ended the step channel")
                : ShuttingDownError();
  }
  Finish(ToGrpcStatus(ended));
}

absl::Status StepChannelReactor::ServeStep(
    std::string* bytes, v1::AttendSessionsRequest* request,
    v1::AttendSessionsResponse* response) {
  const absl::Time received = absl::Now();
  // The client may have shrunk its object: touching the ring then is a
  // SIGBUS (the registry's handler makes it zeros, and Check reports it).
  RETURN_IF_ERROR(region_->Check());
  request->Clear();
  response->Clear();
  absl::Status status = ring_->TakeRequest(bytes);
  if (status.ok() && !request->ParseFromString(*bytes)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("the request slot's ", bytes->size(),
                     " bytes are not an AttendSessionsRequest"));
  }
  if (!status.ok()) {
    SetError(status, response);
    return Answer(*response, bytes);
  }

  MemoryBudget::Reservation held;
  StreamMessage message;
  message.received = received;
  message.request_bytes = static_cast<int64_t>(bytes->size());
  message.is_cancelled = [this] { return cancelled_.load(); };
  message.held = &held;
  absl::Notification answered;
  processor_->Submit(*request, response, message,
                     [&status, &answered](absl::Status step) {
                       status = std::move(step);
                       answered.Notify();
                     });
  answered.WaitForNotification();
  if (!status.ok()) SetError(status, response);
  response->set_request_id(request->request_id());
  if (static_cast<int64_t>(response->ByteSizeLong()) >
      ring_->response_capacity()) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", response->ByteSizeLong(),
        " bytes) does not fit the step channel's response slot (",
        ring_->response_capacity(), " bytes): use a larger region"));
    SetError(status, response);
    response->set_request_id(request->request_id());
  }
  processor_->Answered(*request, *response, message,
                       static_cast<grpc::StatusCode>(status.code()));
  const absl::Status usable = Answer(*response, bytes);
  held.Release();
  processor_->Release();
  return usable;
}

absl::Status StepChannelReactor::Answer(
    const v1::AttendSessionsResponse& response, std::string* bytes) {
  response.SerializeToString(bytes);
  // A region that shrank during the step is not written to.
  RETURN_IF_ERROR(region_->Check());
  ring_->Respond(*bytes);
  return absl::OkStatus();
}

}  // namespace attnserve::server
