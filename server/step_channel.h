#ifndef ATTNSERVE_SERVER_STEP_CHANNEL_H_
#define ATTNSERVE_SERVER_STEP_CHANNEL_H_

// The reactor of StepChannel (docs/api.md "StepChannel"): a channel whose
// steps come through a transport (server/step_transport.h: a ring in a
// registered shared-memory region, or a TCP socket of its own) instead of
// stream messages. It answers one StepChannelInfo, then a thread of its own
// waits for the client's side (a socket's connection), then for each step,
// and hands it to the same StreamProcessor an AttendSessionsStream uses, one
// at a time, answering through the transport; the call stays open as the
// channel's lease.
//
// The channel ends when the client hangs up (in the ring, or by closing its
// socket: OK), cancels the call (or vanishes), when the server drains
// (UNAVAILABLE), when a socket's client does not connect in time
// (DEADLINE_EXCEEDED), or when the region shrank under it
// (FAILED_PRECONDITION); the transport is closed first, so a client waiting
// for an answer is woken. The step being computed
// then finishes, and the channel is freed, before the call ends, so nothing
// stays pinned and a client that saw the end can open another at once.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.pb.h"
#include "grpcpp/support/server_callback.h"
#include "server/rpc/stream_reactor.h"
#include "server/step_transport.h"

namespace attnserve::server {

using StepProcessor =
    StreamProcessor<v1::AttendSessionsRequest, v1::AttendSessionsResponse>;

class StepChannelReactor final
    : public grpc::ServerWriteReactor<v1::StepChannelInfo> {
 public:
  // A non-OK `transport` (admission, the channel limit, the region)
  // finishes the call at once with its status. `spin` is the longest the
  // channel's thread polls for a step (server/step_spin.h). `processor` must
  // outlive the reactor; `draining` is polled between steps; `on_end` runs
  // once, when the channel is freed (before the call's status is sent, or when
  // gRPC is done with a call that never served).
  StepChannelReactor(absl::StatusOr<std::unique_ptr<StepTransport>> transport,
                     absl::Duration spin, StepProcessor* processor,
                     std::function<bool()> draining,
                     absl::AnyInvocable<void()> on_end);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~StepChannelReactor() override = default;
  // The channel's thread: steps until stopped, then finishes the call.
  void Serve();
  // One step, taken as `bytes` (`refused` when they could not be), to its
  // answer; a non-OK status ends the channel (the transport is unusable).
  absl::Status ServeStep(const absl::Status& refused, std::string* bytes,
                         v1::AttendSessionsRequest* request,
                         v1::AttendSessionsResponse* response);
  // Sends `response` through `bytes`.
  absl::Status Answer(const v1::AttendSessionsResponse& response,
                      std::string* bytes);
  bool Stopping() const;
  // Runs on_end_ the first time.
  void Release();

  std::unique_ptr<StepTransport> transport_;
  const absl::Duration spin_;
  StepProcessor* const processor_;
  const std::function<bool()> draining_;
  absl::AnyInvocable<void()> on_end_;
  v1::StepChannelInfo info_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> released_{false};
  std::thread thread_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_STEP_CHANNEL_H_
