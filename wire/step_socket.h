#ifndef ATTNSERVE_WIRE_STEP_SOCKET_H_
#define ATTNSERVE_WIRE_STEP_SOCKET_H_

// The socket of a TCP step channel (docs/api.md "StepChannel"): the client
// connects, sends the channel's kStepTokenBytes-byte token, then each step
// is one frame each way, a little-endian uint32 length followed by that many
// bytes (a serialized AttendSessionsRequest, then its AttendSessionsResponse).
// The server (after its listener matched the token) and a C++ client both
// read and write frames here; each side treats the other as untrusted.
//
// Waiting for a frame polls the socket (non-blocking reads) for a spin, then
// sleeps in poll(2) in slices of kWaitSlice, asking between slices whether to
// stop, as a ring's waits do.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attnserve::wire {

inline constexpr int kStepTokenBytes = 32;
// The length field's limit.
inline constexpr int64_t kStepFrameMaxBytes = int64_t{0xFFFFFFFF};

class StepSocket {
 public:
  // Takes `fd`, a connected stream socket (blocking or not), and sets it up
  // (blocking, TCP_NODELAY where it is TCP, a send timeout).
  explicit StepSocket(int fd);
  // The client's side: connects to host:port within `deadline` (Unavailable
  // when it cannot, naming the address).
  static absl::StatusOr<StepSocket> Connect(const std::string& host, int port,
                                            absl::Time deadline);
  StepSocket(StepSocket&& other) noexcept;
  StepSocket& operator=(StepSocket&& other) noexcept;
  StepSocket(const StepSocket&) = delete;
  StepSocket& operator=(const StepSocket&) = delete;
  ~StepSocket();  // closes the socket

  // Writes `bytes` as they are (the token) or as one frame. Unavailable when
  // the peer is gone, DeadlineExceeded when it takes none of them for
  // kStepSendTimeout (it does not read).
  absl::Status SendRaw(absl::string_view bytes);
  absl::Status SendFrame(absl::string_view frame);

  // Reads one frame into `frame`. Unavailable ("closed") when the peer
  // closed the connection before the frame began (its hang-up), DataLoss
  // when it closed inside one; Cancelled when stop() turned true and
  // DeadlineExceeded past `deadline` (the socket is then unusable: a frame
  // may be half read); InvalidArgument when the frame is longer than
  // `max_bytes`, its bytes skipped, so that the next frame can be read.
  absl::Status ReceiveFrame(int64_t max_bytes, absl::Duration spin,
                            absl::Time deadline,
                            const std::function<bool()>& stop,
                            std::string* frame);
  // Reads exactly `size` bytes (the token), as ReceiveFrame waits.
  absl::Status ReceiveRaw(char* out, int64_t size, absl::Duration spin,
                          absl::Time deadline,
                          const std::function<bool()>& stop);

  // Ends both directions (from any thread): a peer's and this side's waits
  // end at once; the descriptor stays open until destruction.
  void Shutdown();

 private:
  // Writes `first`, then `second`.
  absl::Status Send(absl::string_view first, absl::string_view second);
  // Reads `size` bytes into `out` (nullptr: discards them).
  absl::Status Read(char* out, int64_t size, absl::Time spin_end,
                    absl::Time deadline, const std::function<bool()>& stop,
                    bool frame_started);

  int fd_ = -1;
};

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_STEP_SOCKET_H_
