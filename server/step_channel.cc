#include "server/step_channel.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "server/rpc/admission.h"
#include "server/rpc/status_util.h"
#include "server/step_spin.h"

namespace attnserve::server {
namespace {

void SetError(const absl::Status& status,
              v1::AttendSessionsResponse* response) {
  response->Clear();
  response->set_error_code(static_cast<int32_t>(status.code()));
  response->set_error_message(std::string(status.message()));
}

}  // namespace

StepChannelReactor::StepChannelReactor(
    absl::StatusOr<std::unique_ptr<StepTransport>> transport,
    absl::Duration spin, StepProcessor* processor,
    std::function<bool()> draining, absl::AnyInvocable<void()> on_end)
    : spin_(spin),
      processor_(processor),
      draining_(std::move(draining)),
      on_end_(std::move(on_end)) {
  if (!transport.ok()) {
    Release();
    Finish(ToGrpcStatus(transport.status()));
    return;
  }
  transport_ = *std::move(transport);
  transport_->Describe(&info_);
  info_.set_spin_us(absl::ToInt64Microseconds(spin_));
  StartWrite(&info_);
}

void StepChannelReactor::OnWriteDone(bool ok) {
  if (!ok) {
    transport_->Close();
    Release();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                        "the step channel's client is gone"));
    return;
  }
  thread_ = std::thread([this] { Serve(); });
}

void StepChannelReactor::OnCancel() {
  cancelled_.store(true);
  if (transport_ != nullptr) transport_->Interrupt();
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
  const auto stop = [this] { return Stopping(); };
  absl::Status ended = transport_->Connect(stop);
  // Stopped before the client's side was there: ended as a stop below.
  const bool connected = ended.ok();
  if (absl::IsCancelled(ended)) ended = absl::OkStatus();
  StepSpin spin(spin_);
  std::optional<absl::Time> answered;
  while (connected && ended.ok()) {
    absl::Status refused;
    absl::StatusOr<bool> next =
        transport_->Next(spin.Window(), stop, &bytes, &refused);
    if (!next.ok()) {
      ended = next.status();
    } else if (!*next) {
      break;
    } else {
      if (answered.has_value()) spin.Observe(absl::Now() - *answered);
      ended = ServeStep(refused, &bytes, &request, &response);
      answered = absl::Now();
    }
  }
  const bool hung_up = transport_->hung_up();
  transport_->Close();
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
    const absl::Status& refused, std::string* bytes,
    v1::AttendSessionsRequest* request, v1::AttendSessionsResponse* response) {
  const absl::Time received = absl::Now();
  request->Clear();
  response->Clear();
  absl::Status status = refused;
  if (status.ok() && !request->ParseFromString(*bytes)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("the step's ", bytes->size(),
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
      transport_->response_capacity()) {
    status = absl::ResourceExhaustedError(absl::StrCat(
        "the answer (", response->ByteSizeLong(),
        " bytes) is past the step channel's ", transport_->response_capacity(),
        " bytes for answers: open it over a larger region (shared memory) or "
        "raise the server's --max_message_bytes and --max_request_bytes "
        "(TCP)"));
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
  return transport_->Respond(*bytes);
}

}  // namespace attnserve::server
