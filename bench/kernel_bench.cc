// attnserve_kernel_bench: times the attention engine on fixed shapes and
// divides each time by baselines measured in the same run (oneDNN GEMM rate,
// unfused oneDNN attention, memcpy), then checks the ratios against the
// targets. See docs/benchmarks.md.

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "bench/baselines.h"
#include "bench/cases.h"
#include "bench/machine.h"
#include "bench/peak_rss.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/status_macros.h"

ABSL_FLAG(bool, json, false,
          "Print one JSON object per line instead of a table.");
ABSL_FLAG(bool, quick, false,
          "Run the small subset marked quick with fewer reps (a few seconds).");
ABSL_FLAG(std::string, filter, "", "Run only cases whose name contains this.");
ABSL_FLAG(int, reps, 0,
          "Timed reps per measurement; 0 = enough for 0.5 s, at least 5.");
ABSL_FLAG(std::vector<std::string>, threads,
          std::vector<std::string>({"1", "2"}),
          "Comma-separated OpenMP thread counts to run every case with.");
ABSL_FLAG(bool, cpu_time, false,
          "Time reps by the process's CPU time, not wall time (one-thread "
          "runs on a shared machine; see docs/benchmarks.md).");
ABSL_FLAG(int, paired, 0,
          "Also time flash cases in this many rounds of one GEMM rep then one "
          "flash rep, and report the median of the rounds' ratios "
          "(paired_ratio_to_gemm; the summaries use it): on a machine whose "
          "neighbours come and go, both sides of a ratio then see the same "
          "moment.");
ABSL_FLAG(std::string, max_isa, "auto",
          "Cap the engine's ISA (auto, amx, avx512, avx2): amx against avx512 "
          "compares our AMX tile products with oneDNN's on an AMX CPU.");
ABSL_FLAG(std::string, rss_child, "",
          "Internal: measure the named peak_rss case in this process.");

namespace attnserve::bench {
namespace {

// The thresholds the summary lines compare their values with (their
// `target`, `at_least` and `met` fields).
struct Target {
  double value;
  bool at_least;  // met when value >= target; else when value <= target
};
constexpr Target kFlashRatioF32D64{0.80, true};
constexpr Target kFlashRatioF32D128{0.85, true};
constexpr Target kFlashRatioBf16{0.60, true};
constexpr Target kTwoThreadSpeedup{1.7, true};
constexpr Target kCausalTimeRatio{0.55, false};
constexpr Target kWeightsTimeRatio{1.15, false};
constexpr Target kFormsTimeRatio{1.15, false};
constexpr Target kUnfusedSpeedup{2.0, true};
constexpr Target kDecodeRatioToCopy{0.60, true};
constexpr Target kExtraRssMib{16.0, false};

// run_check flags a run whose GEMM rate changed more than this between the
// first use and the end.
constexpr double kMaxGemmChange = 0.10;
// ... or whose cores other processes used for more than this share of the time.
constexpr double kMaxOthersCpuShare = 0.05;

struct Options {
  bool json = false;
  bool quick = false;
  std::string filter;
  std::vector<int> threads;
  Isa max_isa = Isa::kAuto;
  int paired = 0;
  RepPolicy policy;
};

double RoundSignificant(double x, int digits) {
  return std::strtod(absl::StrFormat("%.*g", digits, x).c_str(), nullptr);
}

// The cases the summaries compare (names as cases.cc builds them).
constexpr char kFlash2048[] = "flash_b1_h16_l2048_d64_f32";
constexpr char kFlash2048D128[] = "flash_b1_h16_l2048_d128_f32";
constexpr char kFlash2048Bf16[] = "flash_b1_h16_l2048_d64_bf16";
constexpr char kFlash4096[] = "flash_b1_h16_l4096_d64_f32";
constexpr char kCausal4096[] = "flash_causal_b1_h16_l4096_d64_f32";
constexpr char kFlash1024[] = "flash_b1_h8_l1024_d64_f32";
constexpr char kWeights1024[] = "materialized_b1_h8_l1024_d64_f32";
constexpr char kForms2048[] = "flash_b1_h16_l2048_d64_f32_softcap_sinks";
constexpr char kT5Bias2048[] = "flash_b1_h16_l2048_d64_f32_t5bias";
constexpr char kDecode8192[] = "decode_b1_h32kv8_lq1_lk8192_d128_f32";
constexpr char kDecodeT5Bias8192[] =
    "decode_b1_h32kv8_lq1_lk8192_d128_f32_t5bias";
constexpr char kDecodeForms8192[] =
    "decode_b1_h32kv8_lq1_lk8192_d128_f32_softcap_sinks";
constexpr char kWindow4096[] = "flash_causal_b1_h16_l4096_d64_f32_w512";
constexpr char kSinkWindow4096[] =
    "flash_causal_b1_h16_l4096_d64_f32_w512_sink4";
constexpr char kDecodeWindow8192[] =
    "decode_causal_b1_h32kv8_lq1_lk8192_d128_f32_w4096";
constexpr char kDecodeSinkWindow8192[] =
    "decode_causal_b1_h32kv8_lq1_lk8192_d128_f32_w4096_sink4";
constexpr char kRelKeys4096[] = "flash_causal_b1_h16_l4096_d64_f32_relkeys";
constexpr char kDecodeRelKeys8192[] =
    "decode_b1_h32kv8_lq1_lk8192_d128_f32_relkeys";
constexpr char kStats2048[] = "flash_b1_h16_l2048_d64_f32_stats";
constexpr char kDecodeStats8192[] =
    "decode_b1_h32kv8_lq1_lk8192_d128_f32_stats";

class Benchmark {
 public:
  explicit Benchmark(const Options& options)
      : options_(options), reporter_(options.json) {}

  absl::Status Run() {
    std::vector<CaseSpec> timed, peak;
    for (CaseSpec& c : AllCases()) {
      if (options_.quick && !c.quick) continue;
      if (!absl::StrContains(c.name, options_.filter)) continue;
      (c.kind == CaseKind::kTimed ? timed : peak).push_back(std::move(c));
    }
    if (timed.empty() && peak.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no case matches --filter '", options_.filter, "'"));
    }
    bool info_printed = false;
    for (int threads : options_.threads) {
      EngineOptions engine_options;
      engine_options.num_threads = threads;
      engine_options.max_isa = options_.max_isa;
      absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
          AttentionEngine::Create(engine_options);
      if (!engine.ok()) {
        return WithContext(
            absl::StrCat("creating the engine (", threads, " threads): "),
            engine.status());
      }
      if (!info_printed) {
        PrintRunInfo(**engine);
        info_printed = true;
      }
      for (const CaseSpec& spec : timed) {
        const absl::Status s = RunTimedCase(**engine, spec, threads);
        if (!s.ok()) {
          return WithContext(
              absl::StrCat("case ", spec.name, ", ", threads, " threads: "), s);
        }
      }
    }
    for (const CaseSpec& spec : peak) {
      const absl::Status s = RunPeakRssCase(spec);
      if (!s.ok()) {
        return WithContext(absl::StrCat("case ", spec.name, ": "), s);
      }
    }
    RETURN_IF_ERROR(CheckGemmStability());
    EmitSummaries();
    return absl::OkStatus();
  }

 private:
  void PrintRunInfo(const AttentionEngine& engine) {
    Json r;
    r["case"] = "run_info";
    r["onednn"] = OneDnnVersion();
    r["isa"] = std::string(IsaName(engine.isa()));
    r["bf16_gemm"] = engine.bf16_gemm();
    r["cpu"] = CpuModel();
    r["omp_max_threads"] = omp_get_max_threads();
    r["quick"] = options_.quick;
    r["gemm"] =
        "oneDNN matmul 2048x2048x2048, plain row-major, f32 dst, median of "
        "reps";
    reporter_.Emit(r);
  }

  absl::StatusOr<double> GemmRate(DType dtype, int threads) {
    const std::pair<DType, int> key(GemmDType(dtype), threads);
    auto it = gemm_cache_.find(key);
    if (it == gemm_cache_.end()) {
      ASSIGN_OR_RETURN(const double rate,
                       GemmGflops(dtype, threads, options_.policy));
      it = gemm_cache_.emplace(key, rate).first;
    }
    return it->second;
  }

  // The same GEMM with B packed (GemmGflops' packed_b): the base of the
  // ratio_to_packed_b_gemm field, measured once per (dtype, threads).
  absl::StatusOr<double> PackedGemmRate(DType dtype, int threads) {
    const std::pair<DType, int> key(GemmDType(dtype), threads);
    auto it = packed_gemm_.find(key);
    if (it == packed_gemm_.end()) {
      ASSIGN_OR_RETURN(const double rate,
                       GemmGflops(dtype, threads, options_.policy,
                                  /*packed_b=*/true));
      it = packed_gemm_.emplace(key, rate).first;
    }
    return it->second;
  }

  // Measures every GEMM rate the run used once more. On two shared cores
  // another process shows up as a moved rate, and then no ratio of the run can
  // be trusted.
  absl::Status CheckGemmStability() {
    Json r;
    r["case"] = "run_check";
    r["gemm"] = Json::array();
    bool stable = true;
    for (const auto& [key, first] : gemm_cache_) {
      ASSIGN_OR_RETURN(const double again,
                       GemmGflops(key.first, key.second, options_.policy));
      const double change = again / first - 1;
      stable = stable && std::fabs(change) <= kMaxGemmChange;
      r["gemm"].push_back({{"dtype", std::string(DTypeName(key.first))},
                           {"threads", key.second},
                           {"gflops_first", Round(first, 2)},
                           {"gflops_end", Round(again, 2)}});
    }
    const CpuTimes now = ReadCpuTimes();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    const double others = std::max(
        0.0, (now.all - start_cpu_.all) - (now.self - start_cpu_.self));
    const double others_share =
        others / (wall * std::thread::hardware_concurrency());
    r["other_processes_cpu_share"] = Round(others_share, 4);
    stable = stable && others_share <= kMaxOthersCpuShare;
    r["stable"] = stable;
    reporter_.Emit(r);
    if (!stable) {
      std::fprintf(stderr,
                   "attnserve_kernel_bench: warning: the machine was not quiet "
                   "(other processes used %.0f%% of the CPU time, GEMM rates "
                   "above): do not keep these figures\n",
                   others_share * 100);
    }
    return absl::OkStatus();
  }

  // The fields every case line has; the unfused ones start null.
  absl::StatusOr<Json> CaseRecord(const CaseSpec& spec, int threads,
                                  double median_us, int reps) {
    ASSIGN_OR_RETURN(const double gemm, GemmRate(spec.dtype, threads));
    const double gflops = ShapeOf(spec).dense_flops() / (median_us * 1e3);
    Json r;
    r["case"] = spec.name;
    r["dtype"] = std::string(DTypeName(spec.dtype));
    r["path"] = std::string(KernelPathName(spec.path));
    r["threads"] = threads;
    r["b"] = spec.b;
    r["hq"] = spec.hq;
    r["hkv"] = spec.hkv;
    r["lq"] = spec.lq;
    r["lk"] = spec.lk;
    r["d"] = spec.d;
    r["causal"] = spec.causal;
    r["median_us"] = Round(median_us, 1);
    r["reps"] = reps;
    r["gflops"] = Round(gflops, 2);
    r["gemm_gflops"] = Round(gemm, 2);
    r["gemm_dtype"] = std::string(DTypeName(GemmDType(spec.dtype)));
    r["ratio_to_gemm"] = Round(gflops / gemm, 4);
    ASSIGN_OR_RETURN(const double packed, PackedGemmRate(spec.dtype, threads));
    r["gemm_packed_b_gflops"] = Round(packed, 2);
    r["ratio_to_packed_b_gemm"] = Round(gflops / packed, 4);
    if (spec.causal) {
      // gflops counts dense FLOPs; this counts only the (i, j) pairs the mask
      // allows (top-left diagonal).
      double allowed = 0;
      for (int64_t i = 0; i < spec.lq; ++i) allowed += std::min(i + 1, spec.lk);
      r["unmasked_gflops"] =
          Round(gflops * allowed / (double(spec.lq) * spec.lk), 2);
    }
    r["unfused_us"] = nullptr;
    r["unfused_speedup"] = nullptr;
    r["unfused_note"] = nullptr;
    return r;
  }

  absl::Status RunTimedCase(AttentionEngine& engine, const CaseSpec& spec,
                            int threads) {
    CaseBuffers buffers(spec);
    const AttentionInputs inputs = buffers.inputs();
    const AttentionOutputs outputs = buffers.outputs();
    const absl::StatusOr<Timing> t = TimeMedian(
        options_.policy, [&] { return engine.Run(inputs, outputs); });
    if (!t.ok()) return WithContext("engine Run failed: ", t.status());
    ASSIGN_OR_RETURN(Json r, CaseRecord(spec, threads, t->median_us, t->reps));

    if (spec.path == KernelPath::kDecode) {
      ASSIGN_OR_RETURN(const double copy,
                       CopyGbps(buffers, threads, options_.policy));
      const double kv = buffers.kv_bytes() / (t->median_us * 1e3);
      r["kv_bytes"] = buffers.kv_bytes();
      r["kv_gbps"] = Round(kv, 2);
      r["copy_gbps"] = Round(copy, 2);
      r["ratio_to_copy"] = Round(kv / copy, 4);
    }

    if (options_.paired > 0 && spec.path == KernelPath::kFlash) {
      ASSIGN_OR_RETURN(const PairedRatio paired, TimePaired(spec, threads, [&] {
                         return engine.Run(inputs, outputs);
                       }));
      r["paired_rounds"] = options_.paired;
      r["paired_ratio_to_gemm"] = Round(paired.median, 4);
      r["paired_ratio_min"] = Round(paired.min, 4);
      r["paired_ratio_max"] = Round(paired.max, 4);
    }

    if (std::optional<std::string> skip = UnfusedSkipReason(spec)) {
      r["unfused_note"] = absl::StrCat("skipped: ", *skip);
    } else {
      // After the engine's timing, so buffers.out holds its result to compare.
      ASSIGN_OR_RETURN(const UnfusedResult u,
                       TimeUnfused(buffers, threads, options_.policy));
      r["unfused_us"] = Round(u.timing.median_us, 1);
      r["unfused_speedup"] = Round(u.timing.median_us / t->median_us, 3);
      r["unfused_note"] = u.note;
      r["max_abs_diff_vs_unfused"] = RoundSignificant(u.max_abs_diff, 3);
    }
    Record(std::move(r));
    return absl::OkStatus();
  }

  struct PairedRatio {
    double median = 0, min = 0, max = 0;
  };

  // options_.paired rounds of one plain-B GEMM rep, then one rep of `run`
  // (each after its own untimed warm-up call): the ratio of their rates per
  // round.
  absl::StatusOr<PairedRatio> TimePaired(
      const CaseSpec& spec, int threads,
      absl::FunctionRef<absl::Status()> run) {
    RepPolicy one = options_.policy;
    one.fixed_reps = 1;
    std::vector<double> ratios;
    for (int round = 0; round < options_.paired; ++round) {
      ASSIGN_OR_RETURN(const double gemm, GemmGflops(spec.dtype, threads, one));
      const absl::StatusOr<Timing> t = TimeMedian(one, run);
      if (!t.ok()) return WithContext("engine Run failed: ", t.status());
      ratios.push_back(ShapeOf(spec).dense_flops() / (t->median_us * 1e3) /
                       gemm);
    }
    std::sort(ratios.begin(), ratios.end());
    PairedRatio p;
    p.median = ratios[ratios.size() / 2];
    p.min = ratios.front();
    p.max = ratios.back();
    return p;
  }

  absl::Status RunPeakRssCase(const CaseSpec& spec) {
    ASSIGN_OR_RETURN(const PeakRss rss,
                     MeasurePeakRss({absl::StrCat("--rss_child=", spec.name)}));
    ASSIGN_OR_RETURN(Json r,
                     CaseRecord(spec, spec.fixed_threads, rss.run_us, 1));
    r["unfused_note"] = "skipped: peak-RSS case";
    r["extra_rss_mib"] = Round(rss.extra_mib, 2);
    r["first_run_extra_rss_mib"] = Round(rss.first_run_extra_mib, 2);
    r["transient_rss_mib"] = Round(rss.transient_mib, 2);
    r["engine_retained_rss_mib"] = Round(rss.retained_mib, 2);
    r["inputs_outputs_mib"] = Round(rss.inputs_outputs_mib, 2);
    r["rss_note"] =
        "fresh child process; baseline = VmRSS after inputs/outputs touched "
        "and engine created; extra = VmHWM during the 2nd (warm) Run - "
        "baseline; HWM reset via /proc/self/clear_refs before each Run";
    Record(std::move(r));
    return absl::OkStatus();
  }

  void Record(Json r) {
    reporter_.Emit(r);
    records_.push_back(std::move(r));
  }

  const Json* Find(const std::string& name, int threads) const {
    for (const Json& r : records_) {
      if (r.at("case") == name && r.at("threads") == threads) return &r;
    }
    return nullptr;
  }

  void Summary(const std::string& name, double value, const Target& target,
               const std::vector<std::string>& from) {
    Json r;
    r["case"] = name;
    r["value"] = Round(value, 4);
    r["target"] = target.value;
    r["at_least"] = target.at_least;
    r["met"] = target.at_least ? value >= target.value : value <= target.value;
    r["from"] = from;
    reporter_.Emit(r);
  }

  // Emits a summary of `a` over `b` (median times) for every thread count that
  // has both.
  void TimeRatio(const std::string& name, const char* a, const char* b,
                 const Target& target) {
    for (int threads : options_.threads) {
      const Json* x = Find(a, threads);
      const Json* y = Find(b, threads);
      if (x == nullptr || y == nullptr) continue;
      Summary(
          absl::StrCat(name, "_t", threads),
          x->at("median_us").get<double>() / y->at("median_us").get<double>(),
          target, {a, b});
    }
  }

  void EmitSummaries() {
    // The flash-vs-GEMM targets are stated for one thread.
    for (const auto& [name, target] :
         {std::pair<const char*, Target>{kFlash2048, kFlashRatioF32D64},
          {kFlash2048D128, kFlashRatioF32D128},
          {kFlash2048Bf16, kFlashRatioBf16}}) {
      const Json* r = Find(name, 1);
      if (r == nullptr) continue;
      Summary(absl::StrCat("summary_ratio_to_gemm_", name, "_t1"),
              r->contains("paired_ratio_to_gemm")
                  ? r->at("paired_ratio_to_gemm")
                  : r->at("ratio_to_gemm"),
              target, {name});
    }
    const Json* one = Find(kFlash2048, 1);
    const Json* two = Find(kFlash2048, 2);
    if (one != nullptr && two != nullptr) {
      Summary(absl::StrCat("summary_two_thread_speedup_", kFlash2048),
              one->at("median_us").get<double>() /
                  two->at("median_us").get<double>(),
              kTwoThreadSpeedup, {kFlash2048});
    }
    TimeRatio("summary_causal_time_ratio_l4096", kCausal4096, kFlash4096,
              kCausalTimeRatio);
    TimeRatio("summary_weights_time_ratio_l1024", kWeights1024, kFlash1024,
              kWeightsTimeRatio);
    TimeRatio("summary_softcap_sinks_time_ratio_l2048", kForms2048, kFlash2048,
              kFormsTimeRatio);
    TimeRatio("summary_softcap_sinks_time_ratio_decode_lk8192",
              kDecodeForms8192, kDecode8192, kFormsTimeRatio);
    TimeRatio("summary_t5bias_time_ratio_l2048", kT5Bias2048, kFlash2048,
              kFormsTimeRatio);
    TimeRatio("summary_t5bias_time_ratio_decode_lk8192", kDecodeT5Bias8192,
              kDecode8192, kFormsTimeRatio);
    TimeRatio("summary_weight_stats_time_ratio_l2048", kStats2048, kFlash2048,
              kFormsTimeRatio);
    TimeRatio("summary_weight_stats_time_ratio_decode_lk8192", kDecodeStats8192,
              kDecode8192, kFormsTimeRatio);
    TimeRatio("summary_relative_keys_time_ratio_l4096", kRelKeys4096,
              kCausal4096, kFormsTimeRatio);
    TimeRatio("summary_relative_keys_time_ratio_decode_lk8192",
              kDecodeRelKeys8192, kDecode8192, kFormsTimeRatio);
    TimeRatio("summary_sink_window_time_ratio_l4096", kSinkWindow4096,
              kWindow4096, kFormsTimeRatio);
    TimeRatio("summary_sink_window_time_ratio_decode_lk8192",
              kDecodeSinkWindow8192, kDecodeWindow8192, kFormsTimeRatio);
    for (int threads : options_.threads) {
      const Json* r = Find(kFlash2048, threads);
      if (r == nullptr || r->at("unfused_speedup").is_null()) continue;
      Summary(absl::StrCat("summary_unfused_speedup_l2048_t", threads),
              r->at("unfused_speedup"), kUnfusedSpeedup, {kFlash2048});
    }
    for (const Json& r : records_) {
      const std::string name = r.at("case");
      if (r.contains("ratio_to_copy")) {
        Summary(absl::StrCat("summary_decode_ratio_to_copy_t",
                             r.at("threads").get<int>()),
                r.at("ratio_to_copy"), kDecodeRatioToCopy, {name});
      }
      if (r.contains("extra_rss_mib")) {
        Summary("summary_extra_rss_mib", r.at("extra_rss_mib"), kExtraRssMib,
                {name});
      }
    }
  }

  const Options options_;
  Reporter reporter_;
  const std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();
  const CpuTimes start_cpu_ = ReadCpuTimes();
  std::map<std::pair<DType, int>, double> gemm_cache_;
  std::map<std::pair<DType, int>, double> packed_gemm_;
  std::vector<Json> records_;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.json = absl::GetFlag(FLAGS_json);
  o.quick = absl::GetFlag(FLAGS_quick);
  o.filter = absl::GetFlag(FLAGS_filter);
  o.policy.fixed_reps = absl::GetFlag(FLAGS_reps);
  o.policy.cpu_time = absl::GetFlag(FLAGS_cpu_time);
  o.paired = absl::GetFlag(FLAGS_paired);
  if (o.paired < 0) return absl::InvalidArgumentError("--paired must be >= 0");
  if (!ParseIsa(absl::GetFlag(FLAGS_max_isa), &o.max_isa)) {
    return absl::InvalidArgumentError(
        "--max_isa must be auto, amx, avx512 or avx2");
  }
  if (o.policy.fixed_reps < 0) {
    return absl::InvalidArgumentError("--reps must be >= 0");
  }
  if (o.quick) {
    o.policy.min_seconds = 0.05;
    o.policy.min_reps = 3;
  }
  for (const std::string& t : absl::GetFlag(FLAGS_threads)) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--threads: '", t, "' is not a positive integer"));
    }
    o.threads.push_back(n);
  }
  if (o.threads.empty()) {
    return absl::InvalidArgumentError("--threads is empty");
  }
  return o;
}

absl::Status Main() {
  const std::string child = absl::GetFlag(FLAGS_rss_child);
  if (!child.empty()) {
    for (const CaseSpec& spec : AllCases()) {
      if (spec.name == child) return RunPeakRssChild(spec);
    }
    return absl::InvalidArgumentError(absl::StrCat("no case named ", child));
  }
  ASSIGN_OR_RETURN(const Options options, OptionsFromFlags());
  return Benchmark(options).Run();
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times the attention engine against oneDNN baselines measured in the "
      "same run.\nUsage: attnserve_kernel_bench [--json] [--quick] "
      "[--filter SUBSTR] [--reps N] [--threads 1,2] [--max_isa ISA] "
      "[--paired N]");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "bench/kernel_bench.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = attnserve::bench::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "attnserve_kernel_bench: error: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
