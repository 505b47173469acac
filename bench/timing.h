#ifndef ATTNSERVE_BENCH_TIMING_H_
#define ATTNSERVE_BENCH_TIMING_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve::bench {

// How many timed repetitions a measurement takes.
struct RepPolicy {
  // > 0: exactly this many timed reps.
  int fixed_reps = 0;
  // Otherwise enough reps to fill this many seconds, within [min_reps,
  // max_reps].
  double min_seconds = 0.5;
  int min_reps = 5;
  int max_reps = 10000;
  // Time each rep by the CPU time the process spent in it instead of the
  // wall time: on a shared machine other processes' slices then do not
  // count. Meaningful for one-thread work only (idle threads of a team would
  // count as they spin).
  bool cpu_time = false;
};

struct Timing {
  double median_us = 0;
  double min_us = 0;
  int reps = 0;
};

// Calls `fn` once untimed (warm-up: primitive creation, page faults, caches),
// then as many timed times as `policy` asks, and returns the median wall time.
// Stops at the first error `fn` returns.
absl::StatusOr<Timing> TimeMedian(const RepPolicy& policy,
                                  absl::FunctionRef<absl::Status()> fn);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_TIMING_H_
