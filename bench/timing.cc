#include "bench/timing.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/status_macros.h"

namespace attnserve::bench {

absl::StatusOr<Timing> TimeMedian(const RepPolicy& policy,
                                  absl::FunctionRef<absl::Status()> fn) {
  using Clock = std::chrono::steady_clock;
  const auto cpu_us = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
  };
  auto timed = [&](std::vector<double>* samples) -> absl::Status {
    const Clock::time_point start = Clock::now();
    const double cpu_start = policy.cpu_time ? cpu_us() : 0.0;
    RETURN_IF_ERROR(fn());
    samples->push_back(
        policy.cpu_time
            ? cpu_us() - cpu_start
            : std::chrono::duration<double, std::micro>(Clock::now() - start)
                  .count());
    return absl::OkStatus();
  };

  RETURN_IF_ERROR(fn());
  std::vector<double> samples;
  RETURN_IF_ERROR(timed(&samples));
  int reps = policy.fixed_reps;
  if (reps <= 0) {
    const double wanted =
        std::ceil(policy.min_seconds * 1e6 / std::max(samples[0], 1e-3));
    reps = static_cast<int>(
        std::clamp<double>(wanted, policy.min_reps, policy.max_reps));
  }
  while (static_cast<int>(samples.size()) < reps) {
    RETURN_IF_ERROR(timed(&samples));
  }

  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  Timing t;
  t.median_us =
      n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.min_us = samples[0];
  t.reps = static_cast<int>(n);
  return t;
}

}  // namespace attnserve::bench
