#ifndef ATTNSERVE_BENCH_PEAK_RSS_H_
#define ATTNSERVE_BENCH_PEAK_RSS_H_

// Extra resident memory of one engine Run, measured in a fresh process so that
// nothing the parent allocated (other cases, baselines, the OpenMP pool)
// counts. Resident memory is read from /proc/self/status (VmRSS, VmHWM); the
// high-water mark is reset through /proc/self/clear_refs before each measured
// Run, which getrusage's ru_maxrss cannot do. Only touched pages count: that is
// the memory a kernel really uses.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/cases.h"

namespace attnserve::bench {

// Resident memory in MiB. "Baseline" is the RSS after the inputs and outputs
// were allocated and touched and the engine created, before any Run.
struct PeakRss {
  // Peak during a warm (second) Run over the baseline: what a call needs beyond
  // its inputs and outputs once the engine has seen the shape, including the
  // workspaces and primitives the engine keeps.
  double extra_mib = 0;
  // Peak during the first Run over the baseline: adds what only a first call
  // allocates (primitive creation, JIT).
  double first_run_extra_mib = 0;
  // Peak during the warm Run over the RSS just before it: per-call allocations.
  double transient_mib = 0;
  // RSS the first Run left behind over the baseline (kept between calls).
  double retained_mib = 0;
  double inputs_outputs_mib = 0;
  // Wall time of the warm Run (one rep).
  double run_us = 0;
};

// The child's side: allocates and touches the buffers of `spec`, creates an
// engine with spec.fixed_threads threads, runs it twice, resetting the
// high-water mark before each Run, and writes the raw figures (KiB) on one line
// to stdout. Errors if the engine fails or clear_refs cannot be written.
absl::Status RunPeakRssChild(const CaseSpec& spec);

// The parent's side: runs this executable (/proc/self/exe) with `child_args`,
// which must make it call RunPeakRssChild, and parses its report.
absl::StatusOr<PeakRss> MeasurePeakRss(
    const std::vector<std::string>& child_args);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_PEAK_RSS_H_
