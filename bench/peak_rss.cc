#include "bench/peak_rss.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench/machine.h"
#include "core/status_macros.h"

namespace attnserve::bench {
namespace {

constexpr double kKibPerMib = 1024.0;

// Sets VmHWM to the current VmRSS and returns that RSS.
absl::StatusOr<int64_t> ResetPeak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  if (!clear) {
    return absl::UnavailableError(
        "cannot write /proc/self/clear_refs to reset the RSS high-water mark");
  }
  ASSIGN_OR_RETURN(const ResidentMemory r, ReadResidentMemory());
  return r.rss_kib;
}

}  // namespace

absl::Status RunPeakRssChild(const CaseSpec& spec) {
  CaseBuffers buffers(spec);
  EngineOptions options;
  options.num_threads = spec.fixed_threads;
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                   AttentionEngine::Create(options));
  const AttentionInputs inputs = buffers.inputs();
  const AttentionOutputs outputs = buffers.outputs();

  // Nothing ran yet: only the inputs, outputs and the engine object are
  // resident beyond the process's own start-up memory.
  ASSIGN_OR_RETURN(const int64_t baseline, ResetPeak());
  RETURN_IF_ERROR(engine->Run(inputs, outputs));
  ASSIGN_OR_RETURN(const ResidentMemory cold, ReadResidentMemory());

  ASSIGN_OR_RETURN(const int64_t before_warm, ResetPeak());
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(engine->Run(inputs, outputs));
  const double run_us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  ASSIGN_OR_RETURN(const ResidentMemory warm, ReadResidentMemory());

  std::printf(
      "baseline_kib=%lld cold_peak_kib=%lld after_cold_kib=%lld "
      "before_warm_kib=%lld warm_peak_kib=%lld io_bytes=%zu run_us=%.1f\n",
      static_cast<long long>(baseline), static_cast<long long>(cold.hwm_kib),
      static_cast<long long>(cold.rss_kib), static_cast<long long>(before_warm),
      static_cast<long long>(warm.hwm_kib), buffers.total_bytes(), run_us);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::StatusOr<PeakRss> MeasurePeakRss(
    const std::vector<std::string>& child_args) {
  std::vector<char*> argv;
  std::string exe = "/proc/self/exe";
  argv.push_back(exe.data());
  for (const std::string& a : child_args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string report;
  char chunk[512];
  ssize_t got;
  while ((got = read(fds[0], chunk, sizeof chunk)) > 0)
    report.append(chunk, got);
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return absl::InternalError(
        absl::StrCat("peak-RSS child process failed (wait status ", wstatus,
                     "); see stderr"));
  }

  std::map<std::string, double, std::less<>> values;
  for (absl::string_view field :
       absl::StrSplit(report, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(field, absl::MaxSplits('=', 1));
    double value;
    if (absl::SimpleAtod(kv.second, &value)) {
      values[std::string(kv.first)] = value;
    }
  }
  for (const char* key :
       {"baseline_kib", "cold_peak_kib", "after_cold_kib", "before_warm_kib",
        "warm_peak_kib", "io_bytes", "run_us"}) {
    if (values.count(key) == 0) {
      return absl::InternalError(
          absl::StrCat("peak-RSS report lacks ", key, ": '", report, "'"));
    }
  }
  const double baseline = values["baseline_kib"];
  const double warm_peak = values["warm_peak_kib"];
  PeakRss r;
  r.extra_mib = (warm_peak - baseline) / kKibPerMib;
  r.first_run_extra_mib = (values["cold_peak_kib"] - baseline) / kKibPerMib;
  r.transient_mib = (warm_peak - values["before_warm_kib"]) / kKibPerMib;
  r.retained_mib = (values["after_cold_kib"] - baseline) / kKibPerMib;
  r.inputs_outputs_mib = values["io_bytes"] / (kKibPerMib * 1024);
  r.run_us = values["run_us"];
  return r;
}

}  // namespace attnserve::bench
