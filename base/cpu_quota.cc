#include "base/cpu_quota.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"

namespace attnserve::base {
namespace {

// /proc and cgroup files are small; a file that cannot be read is no limit.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path, 64 << 10);
  if (!contents.ok()) return std::nullopt;
  return *std::move(contents);
}

// `cgroup` is this process's path inside a hierarchy mounted at `mount`. The
// effective quota is the smallest along the path up to the mount's root. Inside
// a container the mount's root usually is the container's own cgroup while the
// path still names the host's, so missing levels are skipped rather than
// trusted.
template <typename LimitAt>
std::optional<int> MinLimitUpTo(const std::string& mount, std::string cgroup,
                                const LimitAt& limit_at) {
  std::optional<int> limit;
  while (true) {
    while (!cgroup.empty() && cgroup.back() == '/') cgroup.pop_back();
    if (std::optional<int> here = limit_at(mount + cgroup + "/")) {
      limit = limit ? std::min(*limit, *here) : *here;
    }
    if (cgroup.empty()) return limit;
    const size_t slash = cgroup.rfind('/');
    cgroup.erase(slash == std::string::npos ? 0 : slash);
  }
}

std::optional<int> CgroupV2Limit(const std::string& dir) {
  std::optional<std::string> cpu_max = ReadSmallFile(dir + "cpu.max");
  if (!cpu_max) return std::nullopt;
  return CpuLimitFromCgroupCpuMax(*cpu_max);
}

std::optional<int> CgroupV1Limit(const std::string& dir) {
  std::optional<std::string> quota = ReadSmallFile(dir + "cpu.cfs_quota_us");
  std::optional<std::string> period = ReadSmallFile(dir + "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return CpuLimitFromCgroupCpuMax(
      absl::StrCat(absl::StripAsciiWhitespace(*quota), " ", *period));
}

std::optional<int> CgroupCpuLimit() {
  std::optional<std::string> self = ReadSmallFile("/proc/self/cgroup");
  if (!self) return std::nullopt;
  std::optional<int> limit;
  auto take = [&limit](std::optional<int> l) {
    if (l) limit = limit ? std::min(*limit, *l) : *l;
  };
  // Lines are "hierarchy-id:controllers:path"; v2 has id 0 and no controllers.
  for (absl::string_view line :
       absl::StrSplit(*self, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string& path = parts[2];
    if (parts[0] == "0" && parts[1].empty()) {
      take(MinLimitUpTo("/sys/fs/cgroup", path, CgroupV2Limit));
      take(MinLimitUpTo("/sys/fs/cgroup/unified", path, CgroupV2Limit));
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller != "cpu") continue;
      take(MinLimitUpTo(absl::StrCat("/sys/fs/cgroup/", parts[1]), path,
                        CgroupV1Limit));
      if (parts[1] != "cpu") {
        take(MinLimitUpTo("/sys/fs/cgroup/cpu", path, CgroupV1Limit));
      }
    }
  }
  return limit;
}

}  // namespace

std::optional<int> CpuLimitFromCgroupCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(cpu_max, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  int64_t quota = 0;
  int64_t period = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period) || quota < 0 || period <= 0) {
    return std::nullopt;
  }
  // Rounded down: a 1.5-CPU quota spread over two busy threads is throttled
  // every period, which costs more latency than leaving half a core unused.
  return static_cast<int>(std::max<int64_t>(1, quota / period));
}

int AvailableCpus() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (std::optional<int> limit = CgroupCpuLimit()) {
    cpus = cpus > 0 ? std::min(cpus, *limit) : *limit;
  }
  return std::max(1, cpus);
}

}  // namespace attnserve::base
