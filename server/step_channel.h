#ifndef ATTNSERVE_SERVER_STEP_CHANNEL_H_
#define ATTNSERVE_SERVER_STEP_CHANNEL_H_

// The reactor of StepChannel (docs/api.md "StepChannel"): a same-host
// channel whose steps come through a ring in a registered shared-memory
// region (wire/step_ring.h) instead of stream messages. It answers one
// StepChannelInfo, then a thread of its own waits on the ring and hands each
// step to the same StreamProcessor an AttendSessionsStream uses, one at a
// time, answering in the ring; the call stays open as the channel's lease.
//
// The channel ends when the client hangs up in the ring (OK), cancels the
// call (or vanishes), when the server drains (UNAVAILABLE), or when the
// region shrank under it (FAILED_PRECONDITION); the ring is marked closed
// first, so a client waiting for an answer is woken. The step being computed
// then finishes, and the channel is freed, before the call ends, so nothing
// stays pinned and a client that saw the end can open another at once.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.pb.h"
#include "grpcpp/support/server_callback.h"
#include "server/rpc/stream_reactor.h"
#include "server/shm/shared_memory_registry.h"
#include "wire/step_ring.h"

namespace attnserve::server {

using StepProcessor =
    StreamProcessor<v1::AttendSessionsRequest, v1::AttendSessionsResponse>;

class StepChannelReactor final
    : public grpc::ServerWriteReactor<v1::StepChannelInfo> {
 public:
  // A non-OK `ring` (admission, the channel limit, the region) finishes the
  // call at once with its status. Otherwise `ring` lies in `region`, which
  // the reactor holds until it is done. `processor` must outlive the
  // reactor; `draining` is polled between steps; `on_end` runs once, when
  // the channel is freed (before the call's status is sent, or when gRPC is
  // done with a call that never served).
  StepChannelReactor(absl::StatusOr<wire::StepRing> ring,
                     std::shared_ptr<SharedRegion> region, absl::Duration spin,
                     StepProcessor* processor, std::function<bool()> draining,
                     absl::AnyInvocable<void()> on_end);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  ~StepChannelReactor() override = default;
  // The channel's thread: steps until stopped, then finishes the call.
  void Serve();
  // One step from the ring to its answer there; a non-OK status ends the
  // channel (the region is unusable).
  absl::Status ServeStep(std::string* bytes, v1::AttendSessionsRequest* request,
                         v1::AttendSessionsResponse* response);
  // Writes `response` into the ring through `bytes`, unless the region
  // shrank (that status ends the channel).
  absl::Status Answer(const v1::AttendSessionsResponse& response,
                      std::string* bytes);
  bool Stopping() const;
  // Runs on_end_ the first time.
  void Release();

  std::optional<wire::StepRing> ring_;
  std::shared_ptr<SharedRegion> region_;
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
