#ifndef ATTNSERVE_BENCH_MACHINE_H_
#define ATTNSERVE_BENCH_MACHINE_H_

// What the benchmarks report about the machine and the run: CPU model, load,
// CPU time used by others (to tell a quiet run from a noisy one), rounding,
// errors.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::bench {

// "model name" of /proc/cpuinfo, or "unknown".
std::string CpuModel();
// The three load averages of /proc/loadavg, "0.81 2.06 3.20".
std::string LoadAverage();

// CPU seconds used by every process on the machine (/proc/stat) and by this
// process (all its threads) and its finished children.
struct CpuTimes {
  double all = 0;
  double self = 0;
};
CpuTimes ReadCpuTimes();

// Prints "run_check: other processes used X% of the CPU time" for the busy
// CPU time since `start` (the table benchmarks' last line).
void PrintRunCheck(const CpuTimes& start);

// This process's resident memory and its high-water mark, in KiB (VmRSS and
// VmHWM of /proc/self/status).
struct ResidentMemory {
  int64_t rss_kib = -1;
  int64_t hwm_kib = -1;
};
absl::StatusOr<ResidentMemory> ReadResidentMemory();

// x rounded to `decimals` decimal places.
double Round(double x, int decimals);

// `status` with `context` before its message, same code.
absl::Status WithContext(absl::string_view context, const absl::Status& status);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_MACHINE_H_
