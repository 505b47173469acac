#ifndef ATTNSERVE_SERVER_STEP_TRANSPORT_H_
#define ATTNSERVE_SERVER_STEP_TRANSPORT_H_

// How a step channel's steps reach the server and its answers go back
// (docs/api.md "StepChannel"): through a ring in a registered shared-memory
// region (RingTransport: same host) or as frames on a TCP socket of the
// channel's own (SocketTransport). The channel's reactor
// (server/step_channel.h) serves either the same way.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.pb.h"
#include "server/shm/shared_memory_registry.h"
#include "server/step_listener.h"
#include "wire/step_ring.h"
#include "wire/step_socket.h"

namespace attnserve::server {

class StepTransport {
 public:
  virtual ~StepTransport() = default;

  // What the client is told once the channel is ready.
  virtual void Describe(v1::StepChannelInfo* info) const = 0;
  // Before the first step: the client's side is there (a socket's client
  // connected). Not OK ends the channel with that status.
  virtual absl::Status Connect(const std::function<bool()>& stop) = 0;
  // Waits for the next step (polling for `spin`, then sleeping): true with
  // its bytes in `bytes`, or with a non-OK `refused` when they cannot be
  // taken (answered as that step's error, the channel going on); false when
  // the client hung up or stop() turned true. Not OK: the channel is
  // unusable and ends with that status.
  virtual absl::StatusOr<bool> Next(absl::Duration spin,
                                    const std::function<bool()>& stop,
                                    std::string* bytes,
                                    absl::Status* refused) = 0;
  // The longest answer Respond takes.
  virtual int64_t response_capacity() const = 0;
  // Answers the step Next returned. Not OK: the channel is unusable.
  virtual absl::Status Respond(absl::string_view bytes) = 0;
  // Whether the client hung up (rather than the server stopping).
  virtual bool hung_up() const = 0;
  // No further steps; a waiting client wakes with the channel closed.
  virtual void Close() = 0;
  // From another thread: Connect and Next return soon to poll stop().
  virtual void Interrupt() = 0;
};

// The ring laid out over a registered region (the region held until the
// transport goes).
class RingTransport final : public StepTransport {
 public:
  RingTransport(wire::StepRing ring, std::shared_ptr<SharedRegion> region);

  void Describe(v1::StepChannelInfo* info) const override;
  absl::Status Connect(const std::function<bool()>& stop) override;
  absl::StatusOr<bool> Next(absl::Duration spin,
                            const std::function<bool()>& stop,
                            std::string* bytes, absl::Status* refused) override;
  int64_t response_capacity() const override;
  absl::Status Respond(absl::string_view bytes) override;
  bool hung_up() const override;
  void Close() override;
  void Interrupt() override;

 private:
  wire::StepRing ring_;
  std::shared_ptr<SharedRegion> region_;
};

// A socket handed over by the listener once the client presents the token
// issued with the channel. Frames are limited to `max_frame_bytes` each way.
class SocketTransport final : public StepTransport {
 public:
  // How long a client has to connect after the channel's info was sent.
  static constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

  SocketTransport(StepListener* listener, int64_t max_frame_bytes);
  ~SocketTransport() override;  // the token lapses if never awaited

  void Describe(v1::StepChannelInfo* info) const override;
  absl::Status Connect(const std::function<bool()>& stop) override;
  absl::StatusOr<bool> Next(absl::Duration spin,
                            const std::function<bool()>& stop,
                            std::string* bytes, absl::Status* refused) override;
  int64_t response_capacity() const override;
  absl::Status Respond(absl::string_view bytes) override;
  bool hung_up() const override;
  void Close() override;
  void Interrupt() override;

 private:
  StepListener* const listener_;
  const int64_t max_frame_bytes_;
  const std::string token_;
  std::optional<wire::StepSocket> socket_;
  bool hung_up_ = false;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_STEP_TRANSPORT_H_
