#ifndef ATTNSERVE_BASE_CPU_QUOTA_H_
#define ATTNSERVE_BASE_CPU_QUOTA_H_

// How many CPUs this process may keep busy: its affinity mask capped by its
// cgroup CPU quota. Kubernetes and Docker turn a CPU limit into a CFS quota
// while the process still sees every core of the node, so thread pools sized
// from the core count alone oversubscribe the container and get it throttled.

#include <optional>

#include "absl/strings/string_view.h"

namespace attnserve::base {

// CPUs this process may use: the smaller of the CPUs in its affinity mask (or
// std::thread::hardware_concurrency()) and its cgroup CPU quota (cgroup v2
// cpu.max, else v1 cpu.cfs_quota_us / cpu.cfs_period_us), rounded down; at
// least 1. Reads /proc and /sys on every call; files it cannot read count as
// no limit. Thread-safe.
int AvailableCpus();

// The CPU limit in a cgroup v2 `cpu.max` text ("$QUOTA $PERIOD", e.g. "200000
// 100000" → 2): floor(quota / period), at least 1. nullopt for "max", a
// negative quota (v1's -1) or malformed text. Exposed for tests.
std::optional<int> CpuLimitFromCgroupCpuMax(absl::string_view cpu_max);

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_CPU_QUOTA_H_
