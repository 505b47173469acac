#include "bench/machine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace attnserve::bench {

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

absl::StatusOr<ResidentMemory> ReadResidentMemory() {
  std::ifstream status("/proc/self/status");
  ResidentMemory r;
  std::string line;
  while (std::getline(status, line)) {
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (parts.size() < 2) continue;
    if (parts[0] == "VmRSS:") (void)absl::SimpleAtoi(parts[1], &r.rss_kib);
    if (parts[0] == "VmHWM:") (void)absl::SimpleAtoi(parts[1], &r.hwm_kib);
  }
  if (r.rss_kib < 0 || r.hwm_kib < 0) {
    return absl::UnavailableError("no VmRSS/VmHWM in /proc/self/status");
  }
  return r;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  in >> one >> five >> fifteen;
  return absl::StrFormat("%.2f %.2f %.2f", one, five, fifteen);
}

CpuTimes ReadCpuTimes() {
  CpuTimes t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
         softirq = 0, steal = 0;
  stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >>
      steal;
  t.all = (user + nice + system + irq + softirq + steal) /
          static_cast<double>(sysconf(_SC_CLK_TCK));
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u;
    getrusage(who, &u);
    t.self += u.ru_utime.tv_sec + u.ru_stime.tv_sec +
              1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  return t;
}

void PrintRunCheck(const CpuTimes& start) {
  const CpuTimes end = ReadCpuTimes();
  const double others = (end.all - start.all) - (end.self - start.self);
  std::printf("run_check: other processes used %.1f%% of the CPU time\n",
              100.0 * others / std::max(1e-9, end.all - start.all));
}

double Round(double x, int decimals) {
  const double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

absl::Status WithContext(absl::string_view context,
                         const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(context, status.message()));
}

}  // namespace attnserve::bench
