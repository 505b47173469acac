// attnserve_layer_bench: times hosted attention layers (model/attention_layer)
// and divides each layer's FLOP rate by the oneDNN GEMM rate of the same run
// and thread count. A layer is projections (GEMMs of M = B·L rows) plus
// attention, so GEMM speed is its ceiling. See docs/benchmarks.md.

#include <omp.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/baselines.h"
#include "bench/layer_weights.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/status_macros.h"
#include "model/attention_layer.h"
#include "model/model_weights.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(bool, json, false, "One JSON object per line instead of a table.");
ABSL_FLAG(bool, quick, false, "Only the L = 128 cases, fewer reps.");
ABSL_FLAG(int, reps, 0, "Timed reps; 0 = enough for 0.5 s, at least 5.");
ABSL_FLAG(bool, cpu_time, false,
          "Time reps by the process's CPU time (one-thread figures on a shared "
          "machine; the 2-thread ones then count both threads).");

namespace attnserve::bench {
namespace {

using Json = nlohmann::ordered_json;

// The hosted layer's performance target: an encoder_512 layer (L = 512) at
// this share of the GEMM rate or more.
constexpr double kLayerRatioTarget = 0.60;

struct LayerCase {
  std::string name;
  model::ModelConfig config;
  int64_t additive_dim = 0;
  int64_t batch = 1;
  int64_t len = 128;
  bool quick = true;
};

model::ModelConfig Encoder(model::Scoring scoring, model::ModelDType dtype) {
  model::ModelConfig c;
  c.d_model = 512;
  c.num_heads = 8;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.scoring = scoring;
  c.dtype = dtype;
  return c;
}

std::vector<LayerCase> Cases() {
  using model::ModelDType;
  using model::Scoring;
  std::vector<LayerCase> cases;
  for (int64_t len : {128, 512}) {
    cases.push_back({absl::StrCat("encoder_512_f32_L", len),
                     Encoder(Scoring::kScaledDot, ModelDType::kFloat32), 0, 1,
                     len, len == 128});
  }
  cases.push_back({"encoder_512_bf16_L512",
                   Encoder(Scoring::kScaledDot, ModelDType::kBFloat16), 0, 1,
                   512, false});
  cases.push_back({"general_512_L128",
                   Encoder(Scoring::kGeneral, ModelDType::kFloat32), 0, 1, 128,
                   true});
  cases.push_back({"additive_512_A64_L128",
                   Encoder(Scoring::kAdditive, ModelDType::kFloat32), 64, 1,
                   128, true});
  // Luong's local attention (D = 8), against encoder_512_f32_L512: local-m
  // runs as the engine's sliding window, local-p through a float mask, the
  // weights and a second P·v.
  model::ModelConfig local = Encoder(Scoring::kDot, ModelDType::kFloat32);
  local.local = model::LocalAttention::kMonotonic;
  local.local_window = 8;
  cases.push_back({"local_m_512_D8_L512", local, 0, 1, 512, false});
  local.local = model::LocalAttention::kPredictive;
  local.local_dim = 64;
  cases.push_back({"local_p_512_D8_L512", local, 0, 1, 512, false});
  return cases;
}

absl::Status Run() {
  const bool json = absl::GetFlag(FLAGS_json);
  const bool quick = absl::GetFlag(FLAGS_quick);
  RepPolicy policy;
  policy.fixed_reps = absl::GetFlag(FLAGS_reps);
  policy.cpu_time = absl::GetFlag(FLAGS_cpu_time);
  if (quick && policy.fixed_reps == 0) policy.fixed_reps = 5;
  std::map<int, double> gemm;
  const CpuTimes start = ReadCpuTimes();
  Json info;
  info["case"] = "run_info";
  info["onednn"] = OneDnnVersion();
  info["cpu"] = CpuModel();
  info["load"] = LoadAverage();
  if (json) std::printf("%s\n", info.dump().c_str());
  if (!json) {
    std::printf("oneDNN %s, %s\n\n%-26s %3s %11s %9s %9s %7s\n",
                OneDnnVersion().c_str(), CpuModel().c_str(), "case", "thr",
                "median_us", "GFLOP/s", "gemm", "ratio");
  }
  std::map<std::string, double> ratios;
  for (const LayerCase& c : Cases()) {
    if (quick && !c.quick) continue;
    const model::LayerWeights weights =
        LayerWeightsFor(c.config, c.additive_dim);
    ASSIGN_OR_RETURN(auto layer,
                     model::AttentionLayer::Create(c.config, weights));
    const std::vector<float> hidden = Uniform(
        static_cast<size_t>(c.batch * c.len * c.config.d_model), 13, 1.0f);
    std::vector<float> out(hidden.size());
    model::LayerInputs in;
    in.hidden = MakeTensorView(hidden.data(), DType::kFloat32,
                               {c.batch, c.len, c.config.d_model});
    model::LayerOutputs outputs;
    outputs.output = MakeMutableTensorView(out.data(), DType::kFloat32,
                                           {c.batch, c.len, c.config.d_model});
    EngineOptions validation;
    validation.num_threads = 1;
    ASSIGN_OR_RETURN(auto validator, AttentionEngine::Create(validation));
    ASSIGN_OR_RETURN(const model::LayerShape shape,
                     layer->Validate(in, *validator));
    const double flops = layer->Flops(shape);
    for (int threads : {1, 2}) {
      if (gemm.find(threads) == gemm.end()) {
        ASSIGN_OR_RETURN(gemm[threads],
                         GemmGflops(DType::kFloat32, threads, policy));
      }
      EngineOptions options;
      options.num_threads = threads;
      ASSIGN_OR_RETURN(auto engine, AttentionEngine::Create(options));
      ASSIGN_OR_RETURN(const Timing t, TimeMedian(policy, [&] {
                         return layer->Run(in, outputs, *engine);
                       }));
      const double gflops = flops / t.median_us / 1e3;
      const double ratio = gflops / gemm[threads];
      ratios[absl::StrCat(c.name, "/", threads)] = ratio;
      Json r;
      r["case"] = c.name;
      r["threads"] = threads;
      r["median_us"] = Round(t.median_us, 1);
      r["reps"] = t.reps;
      r["gflops"] = Round(gflops, 2);
      r["gemm_gflops"] = Round(gemm[threads], 2);
      r["ratio_to_gemm"] = Round(ratio, 3);
      if (json) {
        std::printf("%s\n", r.dump().c_str());
      } else {
        std::printf("%-26s %3d %11.1f %9.2f %9.2f %7.3f\n", c.name.c_str(),
                    threads, t.median_us, gflops, gemm[threads], ratio);
      }
      std::fflush(stdout);
    }
  }
  // The run's quietness, as the kernel benchmark reports it.
  const CpuTimes end = ReadCpuTimes();
  const double others = (end.all - start.all) - (end.self - start.self);
  const double self = end.self - start.self;
  Json check;
  check["case"] = "run_check";
  check["other_processes_cpu_seconds"] = Round(others, 2);
  check["self_cpu_seconds"] = Round(self, 2);
  for (int threads : {1, 2}) {
    const auto it = ratios.find(absl::StrCat("encoder_512_f32_L512/", threads));
    if (it == ratios.end()) continue;
    check[absl::StrCat("summary_layer_ratio_", threads, "t")] =
        Round(it->second, 3);
    check[absl::StrCat("met_", threads, "t")] = it->second >= kLayerRatioTarget;
  }
  check["target"] = kLayerRatioTarget;
  if (json) {
    std::printf("%s\n", check.dump().c_str());
  } else {
    std::printf("\n%s\n", check.dump().c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = attnserve::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "attnserve_layer_bench: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
