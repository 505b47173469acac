// attnserve_linear_bench: linear attention (elu+1 and FAVOR+ with 256
// features, non-causal and causal) at B1 H8 D64 for two sequence lengths: the
// median times, how the time grows with L (target: t(4L)/t(L) <= 4.4), the
// speed-up over dense flash attention at the longer length (target: >= 10x)
// and each variant's relative L2 error against that exact result.

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
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

absl::Status Main() {
  const bool quick = absl::GetFlag(FLAGS_quick);
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
      "B1 H8 D64, BHLD, inputs uniform in [-1, 1]; linear: median of %s "
      "timed reps after a warm-up; dense flash (method softmax): 1 run, "
      "its output is the exact result the errors are measured against\n\n",
      quick ? "5" : "5 (L=short) / 3 (L=long)");
  std::printf("%-5s %-10s %-6s %12s %12s %7s %12s %9s %10s\n", "dtype",
              "variant", "causal", "t_short ms", "t_long ms", "growth",
              "dense ms", "speedup", "relL2 err");
  bool all_met = true;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Buffers shorter(dtype, short_len), longer(dtype, long_len);
    for (bool causal : {false, true}) {
      // The exact result at the long length, once per mask.
      const Variant dense_variant{"dense", FeatureMap::kEluPlusOne, causal};
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(
          engine->Run(longer.Inputs(dense_variant, false), longer.Outputs()));
      const double dense_ms = std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count();
      const std::vector<float> exact = longer.Output();
      for (const Variant& variant : kVariants) {
        if (variant.causal != causal) continue;
        RepPolicy short_policy, long_policy;
        short_policy.fixed_reps = 5;
        long_policy.fixed_reps = quick ? 5 : 3;
        ASSIGN_OR_RETURN(const Timing t_short, TimeMedian(short_policy, [&] {
                           return engine->Run(shorter.Inputs(variant, true),
                                              shorter.Outputs());
                         }));
        ASSIGN_OR_RETURN(const Timing t_long, TimeMedian(long_policy, [&] {
                           return engine->Run(longer.Inputs(variant, true),
                                              longer.Outputs());
                         }));
        const double error = RelativeL2(longer.Output(), exact);
        const double growth = t_long.median_us / t_short.median_us;
        const double speedup = dense_ms * 1e3 / t_long.median_us;
        const bool met = growth <= kMaxGrowth && speedup >= kMinSpeedup;
        all_met = all_met && met;
        std::printf(
            "%-5s %-10s %-6s %12.1f %12.1f %7.2f %12.0f %8.1fx %10.3f%s\n",
            std::string(DTypeName(dtype)).c_str(), variant.name,
            causal ? "yes" : "no", t_short.median_us / 1e3,
            t_long.median_us / 1e3, growth, dense_ms, speedup, error,
            met ? "" : "  (target missed)");
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
