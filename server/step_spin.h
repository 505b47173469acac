#ifndef ATTNSERVE_SERVER_STEP_SPIN_H_
#define ATTNSERVE_SERVER_STEP_SPIN_H_

// How long a step channel's thread polls for the next step before it sleeps
// (--step_channel_spin is the longest): long enough to catch a client that
// steps at a steady pace, such as a decoder's layer calls with the model's
// own work between them, so that its steps never wait for a wake-up; and only
// a moment when the client's pauses are longer than the longest poll, which
// would burn a CPU for nothing before the sleep. Not thread-safe: one per
// channel, used by its thread.

#include "absl/time/time.h"

namespace attnserve::server {

class StepSpin {
 public:
  // Under a steady pace the poll lasts twice the recent pauses, but at least
  // kFloor; when they are longer than the longest poll, kShort.
  static constexpr absl::Duration kFloor = absl::Milliseconds(1);
  static constexpr absl::Duration kShort = absl::Microseconds(50);

  // `longest` >= 0; 0 sleeps at once, always.
  explicit StepSpin(absl::Duration longest) : longest_(longest) {}

  // How long to poll for the next step: `longest` until a pause was seen.
  absl::Duration Window() const;
  // The pause between an answer and the step that followed it.
  void Observe(absl::Duration pause);

 private:
  const absl::Duration longest_;
  // The recent pauses, smoothed (each weighs a quarter), each counted as at
  // most 4 × longest_ so that a few steady ones outweigh one long pause.
  absl::Duration recent_ = absl::ZeroDuration();
  bool seen_ = false;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_STEP_SPIN_H_
