#ifndef ATTNSERVE_WIRE_STEP_RING_H_
#define ATTNSERVE_WIRE_STEP_RING_H_

// The ring of a same-host step channel (docs/api.md "StepChannel"): one
// request and one response slot in a shared-memory region, and a futex
// doorbell each way. The server lays it out (Create) and serves it
// (WaitForRequest, TakeRequest, Respond, Close); a C++ client attaches to it
// (Attach) and calls through it (Call). Both sides treat the other as
// untrusted: sizes are checked, bytes are copied out before they are read.
//
// Memory order: each side writes its slot, then its sequence number with
// release order and a full fence before it reads whether the other side is
// asleep; a sleeper publishes its flag, fences, and checks the number again
// before the futex wait, which checks it once more in the kernel. Futex waits
// time out every kWaitSlice all the same, so a peer that cannot fence (the
// Python client) costs at most that in the rarest race, never a lost step.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attnserve::wire {

inline constexpr uint32_t kStepRingMagic = 0x31525341;  // "ASR1"
inline constexpr uint32_t kStepRingVersion = 1;
inline constexpr int64_t kStepRingMinBytes = 16 * 1024;
// Where the request slot starts; the response slot follows it, 64-aligned.
inline constexpr int64_t kStepRingHeaderBytes = 256;
// Neither slot holds more (the fields are 32-bit).
inline constexpr int64_t kStepRingMaxSlotBytes = int64_t{1} << 30;
// The longest futex sleep before a side checks again.
inline constexpr absl::Duration kWaitSlice = absl::Milliseconds(10);

class StepRing {
 public:
  // Server: lays a ring out over `size` bytes at `base` (64-byte aligned),
  // the header's sequence numbers and flags zeroed. InvalidArgument for a
  // misaligned base or fewer than kStepRingMinBytes.
  static absl::StatusOr<StepRing> Create(char* base, int64_t size);
  // Client: a ring a server laid out over these bytes. InvalidArgument when
  // the header is not one (magic, version, slots outside the bytes).
  static absl::StatusOr<StepRing> Attach(char* base, int64_t size);

  int64_t request_capacity() const { return request_capacity_; }
  int64_t response_capacity() const { return response_capacity_; }

  // --- server ---
  // Waits for a request after the last one answered: polls for `spin`, then
  // sleeps on the doorbell. False once the client hung up or `stop()` is
  // true (both are polled while spinning and after every wake-up; Interrupt
  // and Hangup wake a sleeper).
  bool WaitForRequest(absl::Duration spin, const std::function<bool()>& stop);
  // Copies the waiting request out (WaitForRequest returned true).
  // InvalidArgument when its length exceeds the request slot.
  absl::Status TakeRequest(std::string* request);
  // Answers the waiting request; `response` must fit response_capacity().
  void Respond(absl::string_view response);
  // No further steps: sets `closed` and wakes a waiting client.
  void Close();
  // Wakes WaitForRequest (from another thread) so that it polls `stop`.
  void Interrupt();
  // Whether the client hung up (no further steps).
  bool hung_up() const;

  // --- client ---
  // One step: writes `request`, rings, and waits (polling for `spin`, then
  // sleeping) for the answer, which it copies into `response`.
  // InvalidArgument when the request does not fit; Unavailable once the
  // server closed the ring; DeadlineExceeded past `deadline` (the ring is then
  // unusable: the answer may still come).
  absl::Status Call(absl::string_view request, std::string* response,
                    absl::Duration spin,
                    absl::Time deadline = absl::InfiniteFuture());
  // No further steps: sets `hangup` and wakes the server, which then frees
  // the channel and ends its call OK.
  void Hangup();

 private:
  StepRing(char* base, int64_t request_capacity, int64_t response_capacity);
  uint32_t* Field(int64_t offset) const;

  char* base_;
  int64_t request_capacity_;
  int64_t response_capacity_;
  int64_t response_offset_;
};

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_STEP_RING_H_
