// attnserve_linear_bench: linear attention (elu+1 and FAVOR+ with 256
// features, non-causal and causal) at B1 H8 D64 for two sequence lengths: the
// median times, how the time grows with L (target: t(4L)/t(L) <= 4.4), the
// speed-up over dense flash attention at the longer length (target: >= 10x)
// and each variant's relative L2 error against that exact result.

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "bench/cases.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/status_macros.h"

ABSL_FLAG(bool, quick, false,
          "L = 2048 and 8192 instead of 16384 and 65536 (a few seconds).");
ABSL_FLAG(int, threads, 2, "OpenMP threads of the engine.");
ABSL_FLAG(std::string, filter, "",
          "Run only rows whose \"dtype variant causal\" (e.g. \"f32 favor+256 "
          "yes\") contains this.");
ABSL_FLAG(bool, dense, true,
          "Run dense flash attention (the speed-up and error columns); it "
          "takes about a minute per row group at L = 65536.");

namespace attnserve::bench {
namespace {

// The targets of the summary (docs/long_sequences.md, "Linear attention").
constexpr double kMaxGrowth = 4.4;    // t(4L) / t(L)
constexpr double kMinSpeedup = 10.0;  // dense flash / linear at 4L

constexpr int64_t kHeads = 8, kHeadDim = 64;
constexpr int64_t kFavorFeatures = 256;
constexpr uint64_t kSeed = 20260101;

struct Variant {
  const char* name;
  FeatureMap map;
  bool causal;
};
constexpr Variant kVariants[] = {
    {"elu+1", FeatureMap::kEluPlusOne, false},
    {"elu+1", FeatureMap::kEluPlusOne, true},
    {"favor+256", FeatureMap::kFavorPlus, false},
    {"favor+256", FeatureMap::kFavorPlus, true},
};

// q, k, v [1, 8, L, 64] uniform in [-1, 1] and the output, in one dtype.
struct Buffers {
  Buffers(DType dtype, int64_t len) : dtype(dtype), len(len) {
    const size_t n = static_cast<size_t>(kHeads * len * kHeadDim);
    const size_t bytes = n * DTypeSize(dtype);
    q = AlignedBuffer(bytes);
    k = AlignedBuffer(bytes);
    v = AlignedBuffer(bytes);
    out = AlignedBuffer(bytes);
    base::SplitMix64 rng(kSeed + static_cast<uint64_t>(len));
    std::vector<float> values(n);
    for (AlignedBuffer* b : {&q, &k, &v}) {
      for (float& x : values) x = rng.Uniform(-1.0f, 1.0f);
      ConvertFromFloat(values.data(), b->data(), dtype, n);
    }
  }

  AttentionInputs Inputs(const Variant& variant, bool linear) const {
    const std::vector<int64_t> shape = {1, kHeads, len, kHeadDim};
    AttentionInputs in;
    in.query = MakeTensorView(q.data(), dtype, shape);
    in.key = MakeTensorView(k.data(), dtype, shape);
    in.value = MakeTensorView(v.data(), dtype, shape);
    in.mask.causal = variant.causal;
    if (linear) {
      in.method = AttentionMethod::kLinear;
      in.linear.feature_map = variant.map;
      in.linear.num_features =
          variant.map == FeatureMap::kFavorPlus ? kFavorFeatures : 0;
      in.linear.seed = 1;
    }
    return in;
  }
  AttentionOutputs Outputs() {
    return {
        MakeMutableTensorView(out.data(), dtype, {1, kHeads, len, kHeadDim}),
        std::nullopt};
  }
  std::vector<float> Output() const {
    std::vector<float> r(static_cast<size_t>(kHeads * len * kHeadDim));
    ConvertToFloat(out.data(), dtype, r.data(), r.size());
    return r;
  }

  DType dtype;
  int64_t len;
  AlignedBuffer q, k, v, out;
};

double RelativeL2(const std::vector<float>& got,
                  const std::vector<float>& want) {
  double e = 0.0, n = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / n);
}

using Pair = std::pair<Timing, Timing>;

// Times `a` and `b` alternately, `reps` times each after one untimed run of
// each, and returns their median wall times. On shared cores the load moves
// from second to second; alternating exposes both lengths to the same load,
// so their ratio (the growth) is measured fairly.
absl::StatusOr<Pair> TimeInterleaved(int reps,
                                     absl::FunctionRef<absl::Status()> a,
                                     absl::FunctionRef<absl::Status()> b) {
  RETURN_IF_ERROR(a());
  RETURN_IF_ERROR(b());
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    for (auto [fn, out] : {std::make_pair(a, &ta), std::make_pair(b, &tb)}) {
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(fn());
      out->push_back(std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - t0)
                         .count());
    }
  }
  auto median = [&](std::vector<double>& t) {
    std::sort(t.begin(), t.end());
    Timing m;
    m.median_us = t[t.size() / 2];
    m.min_us = t.front();
    m.reps = reps;
    return m;
  };
  return Pair(median(ta), median(tb));
}

absl::Status Main() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const std::string filter = absl::GetFlag(FLAGS_filter);
  const bool dense = absl::GetFlag(FLAGS_dense);
  const int reps = quick ? 5 : 9;
  const int64_t short_len = quick ? 2048 : 16384;
  const int64_t long_len = 4 * short_len;
  EngineOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                   AttentionEngine::Create(options));
  std::printf(
      "attnserve_linear_bench: cpu %s, %d threads, isa %s, bf16 gemm %s, "
      "oneDNN %s, load %s\n",
      CpuModel().c_str(), engine->num_threads(),
      std::string(IsaName(engine->isa())).c_str(),
      engine->bf16_gemm() ? "yes" : "no", OneDnnVersion().c_str(),
      LoadAverage().c_str());
  std::printf(
      "B1 H8 D64, BHLD, inputs uniform in [-1, 1]; linear: median of %d "
      "timed reps per length after a warm-up, the two lengths alternating; "
      "dense flash (method softmax): 1 run, its output is the exact result "
      "the errors are measured against. Targets on the medians; the minima "
      "show the least disturbed reps on shared cores\n\n",
      reps);
  std::printf("%-5s %-10s %-6s %11s %11s %7s %9s %9s %7s %10s %8s %9s\n",
              "dtype", "variant", "causal", "short ms", "long ms", "growth",
              "short min", "long min", "growth", "dense ms", "speedup",
              "relL2 err");
  bool all_met = true;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Buffers shorter(dtype, short_len), longer(dtype, long_len);
    for (bool causal : {false, true}) {
      auto selected = [&](const Variant& variant) {
        return variant.causal == causal &&
               absl::StrContains(
                   absl::StrCat(DTypeName(dtype), " ", variant.name, " ",
                                causal ? "yes" : "no"),
                   filter);
      };
      bool any = false;
      for (const Variant& variant : kVariants) any = any || selected(variant);
      if (!any) continue;
      // The exact result at the long length, once per mask.
      double dense_ms = 0.0;
      std::vector<float> exact;
      if (dense) {
        const Variant dense_variant{"dense", FeatureMap::kEluPlusOne, causal};
        const auto t0 = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(
            engine->Run(longer.Inputs(dense_variant, false), longer.Outputs()));
        dense_ms = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
        exact = longer.Output();
      }
      for (const Variant& variant : kVariants) {
        if (!selected(variant)) continue;
        ASSIGN_OR_RETURN(const Pair t,
                         TimeInterleaved(
                             reps,
                             [&] {
                               return engine->Run(shorter.Inputs(variant, true),
                                                  shorter.Outputs());
                             },
                             [&] {
                               return engine->Run(longer.Inputs(variant, true),
                                                  longer.Outputs());
                             }));
        const Timing t_short = t.first, t_long = t.second;
        const double error =
            dense ? RelativeL2(longer.Output(), exact) : std::nan("");
        const double growth = t_long.median_us / t_short.median_us;
        const double speedup =
            dense ? dense_ms * 1e3 / t_long.median_us : std::nan("");
        const bool met =
            growth <= kMaxGrowth && (!dense || speedup >= kMinSpeedup);
        all_met = all_met && met;
        std::printf(
            "%-5s %-10s %-6s %11.1f %11.1f %7.2f %9.1f %9.1f %7.2f %10.0f "
            "%7.1fx %9.3f%s\n",
            std::string(DTypeName(dtype)).c_str(), variant.name,
            causal ? "yes" : "no", t_short.median_us / 1e3,
            t_long.median_us / 1e3, growth, t_short.min_us / 1e3,
            t_long.min_us / 1e3, t_long.min_us / t_short.min_us, dense_ms,
            speedup, error, met ? "" : "  (target missed)");
      }
    }
  }
  std::printf(
      "\nL short = %lld, long = %lld. Targets: growth t_long/t_short <= %.1f, "
      "speedup over dense >= %.0fx: %s\n",
      static_cast<long long>(short_len), static_cast<long long>(long_len),
      kMaxGrowth, kMinSpeedup, all_met ? "all met" : "NOT all met");
  return absl::OkStatus();
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times linear attention (elu+1, FAVOR+) against dense flash attention.\n"
      "Usage: attnserve_linear_bench [--quick] [--threads N]");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "bench/linear_bench.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = attnserve::bench::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "attnserve_linear_bench: error: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
