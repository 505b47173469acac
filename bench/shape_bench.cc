// attnserve_shape_bench: what a shape the process has not seen costs against
// its repeat. Two parts, in this order:
//
//  1. Hosted layers (model/attention_layer), the first part of the process so
//     that its first call is the first oneDNN work after loading, as in a
//     freshly started server: load time, the first call on a fresh worker
//     thread, its repeat, and calls at new lengths against their repeats.
//  2. The engine alone: causal self-attention at lengths L in [64, 1024], a
//     new L on every call against the same L repeated right after.
//
// Every ratio divides two times measured back to back in the same process.
// See docs/benchmarks.md ("New shapes").

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/malloc_policy.h"
#include "base/random.h"
#include "bench/layer_weights.h"
#include "bench/machine.h"
#include "core/attention.h"
#include "core/matmul.h"
#include "core/status_macros.h"
#include "model/attention_layer.h"
#include "model/model_weights.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, lengths, 40, "New lengths per sweep (distinct, in [64, 1024]).");
ABSL_FLAG(int, repeats, 5,
          "Repeats of each length (their median is the base).");
ABSL_FLAG(std::vector<std::string>, threads,
          std::vector<std::string>({"1", "2"}),
          "OpenMP thread counts of the engine part.");
ABSL_FLAG(bool, layers, true, "Run the hosted-layer part.");
ABSL_FLAG(bool, engine, true, "Run the engine part.");
ABSL_FLAG(bool, worker_warm_up, true,
          "Warm each fresh worker thread up before its first layer call, as "
          "a server's workers do (false: the first call pays the set-up).");
ABSL_FLAG(std::string, filter, "", "Run only cases whose name contains this.");
ABSL_FLAG(bool, fresh_inputs, true,
          "Engine part: each call's q, k and v are written just before it "
          "(untimed), as a server's call reads the tensors its request's "
          "decoding has just written; false: every call reads the same "
          "buffers, which its repeats find in cache as the previous call "
          "left them.");
ABSL_FLAG(bool, server_heap, true,
          "The attnserve binary's heap settings (base/malloc_policy.h: freed "
          "memory kept in the process), as in the server whose workers the "
          "bench stands for; false: glibc's defaults.");

namespace attnserve::bench {
namespace {

using Json = nlohmann::ordered_json;

// Results are JSON lines, one per case and a final run_check.
void Emit(const Json& r) {
  std::printf("%s\n", r.dump().c_str());
  std::fflush(stdout);
}

constexpr int64_t kMinLen = 64;
constexpr int64_t kMaxLen = 1024;
// Lengths the sweeps warm up on before measuring (never measured).
constexpr int64_t kWarmLengths[] = {64, 128, 256, 512, 768, 1024};

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

double ProcessCpuUs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

double ThreadCpuUs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

// One call's wall time and the CPU time the process spent in it (the second
// is what other processes on a shared machine disturb least).
struct Sample {
  double wall_us = 0, cpu_us = 0;
  double thread_cpu_us = 0;  // of the calling thread alone
  int64_t minor_faults = 0;  // page faults the process took during the call
};

int64_t MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

template <typename Fn>
absl::StatusOr<Sample> TimeUs(const Fn& fn) {
  const int64_t f0 = MinorFaults();
  const double c0 = ProcessCpuUs();
  const double tc0 = ThreadCpuUs();
  const Clock::time_point t0 = Clock::now();
  RETURN_IF_ERROR(fn());
  Sample s;
  s.minor_faults = MinorFaults() - f0;
  s.wall_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  s.cpu_us = ProcessCpuUs() - c0;
  s.thread_cpu_us = ThreadCpuUs() - tc0;
  return s;
}

double MedianOf(const std::vector<Sample>& v, bool cpu) {
  std::vector<double> x;
  for (const Sample& s : v) x.push_back(cpu ? s.cpu_us : s.wall_us);
  return Median(std::move(x));
}

// `count` distinct lengths in [kMinLen, kMaxLen], none a warm-up length, in a
// fixed pseudo-random order.
std::vector<int64_t> NewLengths(int count, uint64_t seed) {
  std::vector<int64_t> all;
  for (int64_t l = kMinLen; l <= kMaxLen; ++l) {
    if (std::find(std::begin(kWarmLengths), std::end(kWarmLengths), l) ==
        std::end(kWarmLengths)) {
      all.push_back(l);
    }
  }
  base::SplitMix64 rng(seed);
  for (size_t i = all.size() - 1; i > 0; --i) {
    std::swap(all[i], all[rng.Next() % (i + 1)]);
  }
  all.resize(std::min<size_t>(all.size(), count));
  return all;
}

// The ratios of a sweep: each new length's first call over the median of its
// repeats, and (the noise floor) the first repeat over that same median.
struct Sweep {
  // Product primitives created during the measured calls (after warm-up).
  int64_t primitives_created = 0;
  // Page faults of the new lengths' calls and of their first repeats.
  std::vector<double> new_faults, repeat_faults;
  // [0]: wall time, [1]: CPU time.
  std::vector<double> new_ratio[2], repeat_ratio[2], extra_us[2];
  std::vector<double> switch_ratio[2];
};

// Runs fn(L) at every warm-up length, then for each new length once (timed as
// new) and `repeats` times (timed as repeats). prepare(L) runs, untimed,
// before every call.
template <typename Prepare, typename Fn>
absl::StatusOr<Sweep> RunSweep(const std::vector<int64_t>& lengths, int repeats,
                               const Prepare& prepare, const Fn& fn) {
  auto timed = [&](int64_t l) {
    prepare(l);
    return TimeUs([&] { return fn(l); });
  };
  for (int64_t l : kWarmLengths) {
    for (int i = 0; i < 2; ++i) {
      prepare(l);
      RETURN_IF_ERROR(fn(l));
    }
  }
  Sweep s;
  ASSIGN_OR_RETURN(MatmulCache * cache, MatmulCache::Shared());
  const int64_t created_before = cache->created();
  int64_t previous = 0;
  double previous_base[2] = {0, 0};
  for (int64_t l : lengths) {
    ASSIGN_OR_RETURN(const Sample first, timed(l));
    std::vector<Sample> again;
    for (int r = 0; r < repeats; ++r) {
      ASSIGN_OR_RETURN(const Sample t, timed(l));
      again.push_back(t);
    }
    s.new_faults.push_back(first.minor_faults);
    s.repeat_faults.push_back(again[0].minor_faults);
    for (int cpu = 0; cpu < 2; ++cpu) {
      const double base = MedianOf(again, cpu);
      const double f = cpu ? first.cpu_us : first.wall_us;
      const double a = cpu ? again[0].cpu_us : again[0].wall_us;
      s.new_ratio[cpu].push_back(f / base);
      s.repeat_ratio[cpu].push_back(a / base);
      s.extra_us[cpu].push_back(f - base);
    }
    // The control: the previous length again (seen, not repeated just
    // before), against its own median. What a change of length costs when
    // nothing about it is new.
    if (previous > 0) {
      ASSIGN_OR_RETURN(const Sample back, timed(previous));
      s.switch_ratio[0].push_back(back.wall_us / previous_base[0]);
      s.switch_ratio[1].push_back(back.cpu_us / previous_base[1]);
    }
    previous = l;
    previous_base[0] = MedianOf(again, false);
    previous_base[1] = MedianOf(again, true);
  }
  s.primitives_created = cache->created() - created_before;
  return s;
}

void AddSweep(const Sweep& s, Json* r) {
  (*r)["lengths"] = s.new_ratio[0].size();
  (*r)["primitives_created"] = s.primitives_created;
  (*r)["new_minor_faults_p50"] = Percentile(s.new_faults, 0.5);
  (*r)["new_minor_faults_p90"] = Percentile(s.new_faults, 0.9);
  (*r)["repeat_minor_faults_p90"] = Percentile(s.repeat_faults, 0.9);
  for (int cpu = 0; cpu < 2; ++cpu) {
    const std::string t = cpu ? "cpu_" : "wall_";
    (*r)[t + "new_over_repeat_p50"] =
        Round(Percentile(s.new_ratio[cpu], 0.5), 3);
    (*r)[t + "new_over_repeat_p90"] =
        Round(Percentile(s.new_ratio[cpu], 0.9), 3);
    (*r)[t + "new_over_repeat_max"] =
        Round(Percentile(s.new_ratio[cpu], 1.0), 3);
    (*r)[t + "new_extra_us_p50"] = Round(Percentile(s.extra_us[cpu], 0.5), 1);
    (*r)[t + "new_extra_us_p90"] = Round(Percentile(s.extra_us[cpu], 0.9), 1);
    (*r)[t + "repeat_over_repeat_p50"] =
        Round(Percentile(s.repeat_ratio[cpu], 0.5), 3);
    (*r)[t + "repeat_over_repeat_p90"] =
        Round(Percentile(s.repeat_ratio[cpu], 0.9), 3);
    (*r)[t + "seen_switch_over_repeat_p50"] =
        Round(Percentile(s.switch_ratio[cpu], 0.5), 3);
    (*r)[t + "seen_switch_over_repeat_p90"] =
        Round(Percentile(s.switch_ratio[cpu], 0.9), 3);
  }
}

model::ModelConfig LayerConfig(int64_t d_model, int64_t heads) {
  model::ModelConfig c;
  c.d_model = d_model;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.head_dim = d_model / heads;
  return c;
}

// One hosted layer: load, then on a fresh thread (a server's worker) with its
// own engine, after the worker's warm-up (--worker_warm_up), the first call at
// L = 128 (attnctl infer's default), its repeats, one new length (200) and a
// sweep of new lengths.
absl::Status LayerCase(const std::string& name, int64_t d_model,
                       int64_t heads) {
  if (!absl::StrContains(name, absl::GetFlag(FLAGS_filter))) {
    return absl::OkStatus();
  }
  const model::ModelConfig config = LayerConfig(d_model, heads);
  const model::LayerWeights weights = LayerWeightsFor(config);
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<model::AttentionLayer> layer,
                   model::AttentionLayer::Create(config, weights));
  const double load_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::vector<float> hidden =
      Uniform(static_cast<size_t>(kMaxLen * d_model), 13, 1.0f);
  std::vector<float> out(hidden.size());
  auto call = [&](AttentionEngine& engine, int64_t l) {
    model::LayerInputs in;
    in.hidden = MakeTensorView(hidden.data(), DType::kFloat32, {1, l, d_model});
    model::LayerOutputs o;
    o.output =
        MakeMutableTensorView(out.data(), DType::kFloat32, {1, l, d_model});
    return layer->Run(in, o, engine);
  };

  // What each of a server's workers does on its own thread before it takes
  // tasks (Scheduler, SchedulerOptions::worker_warm_up in server.cc).
  auto warm_up = [&](AttentionEngine& engine) -> absl::StatusOr<double> {
    if (!absl::GetFlag(FLAGS_worker_warm_up)) return 0.0;
    const Clock::time_point w0 = Clock::now();
    RETURN_IF_ERROR(engine.WarmUpThread());
    RETURN_IF_ERROR(layer->WarmUp(engine));
    return std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
  };

  absl::Status status;
  Json r;
  std::thread worker([&] {
    status = [&]() -> absl::Status {
      EngineOptions options;
      options.num_threads = 1;
      ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                       AttentionEngine::Create(options));
      ASSIGN_OR_RETURN(const double warm_up_ms, warm_up(*engine));
      // The first call at 128 and at 200 (a new length) against the median
      // of 20 repeats of each.
      Sample first[2];
      double repeat[2][2];
      int64_t last_repeat_faults = 0;
      const int64_t lens[2] = {128, 200};
      for (int i = 0; i < 2; ++i) {
        ASSIGN_OR_RETURN(first[i],
                         TimeUs([&] { return call(*engine, lens[i]); }));
        std::vector<Sample> again;
        for (int rep = 0; rep < 20; ++rep) {
          ASSIGN_OR_RETURN(const Sample t,
                           TimeUs([&] { return call(*engine, lens[i]); }));
          again.push_back(t);
        }
        last_repeat_faults = again.back().minor_faults;
        repeat[i][0] = MedianOf(again, false);
        repeat[i][1] = MedianOf(again, true);
      }
      ASSIGN_OR_RETURN(const Sweep sweep,
                       RunSweep(
                           NewLengths(absl::GetFlag(FLAGS_lengths), 17),
                           absl::GetFlag(FLAGS_repeats), [](int64_t) {},
                           [&](int64_t l) { return call(*engine, l); }));
      r["case"] = name;
      r["d_model"] = d_model;
      r["heads"] = heads;
      r["threads"] = 1;
      r["load_ms"] = Round(load_ms, 2);
      r["worker_warm_up"] = absl::GetFlag(FLAGS_worker_warm_up);
      r["server_heap"] = absl::GetFlag(FLAGS_server_heap);
      r["worker_warm_up_ms"] = Round(warm_up_ms, 2);
      r["thread_cpu_first_call_us"] = Round(first[0].thread_cpu_us, 1);
      r["thread_cpu_l200_first_us"] = Round(first[1].thread_cpu_us, 1);
      r["first_call_minor_faults"] = first[0].minor_faults;
      r["l200_first_minor_faults"] = first[1].minor_faults;
      r["repeat_minor_faults"] = last_repeat_faults;
      for (int cpu = 0; cpu < 2; ++cpu) {
        const std::string t = cpu ? "cpu_" : "wall_";
        const double f0 = cpu ? first[0].cpu_us : first[0].wall_us;
        const double f1 = cpu ? first[1].cpu_us : first[1].wall_us;
        r[t + "first_call_us"] = Round(f0, 1);
        r[t + "repeat_us"] = Round(repeat[0][cpu], 1);
        r[t + "first_over_repeat"] = Round(f0 / repeat[0][cpu], 3);
        r[t + "l200_first_us"] = Round(f1, 1);
        r[t + "l200_repeat_us"] = Round(repeat[1][cpu], 1);
        r[t + "l200_over_repeat"] = Round(f1 / repeat[1][cpu], 3);
      }
      AddSweep(sweep, &r);
      return absl::OkStatus();
    }();
  });
  worker.join();
  RETURN_IF_ERROR(status);
  // A second worker (thread and engine) of the same server: its first call
  // pays what is per thread or per engine, not what is per process.
  std::thread second([&] {
    status = [&]() -> absl::Status {
      EngineOptions options;
      options.num_threads = 1;
      ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                       AttentionEngine::Create(options));
      RETURN_IF_ERROR(warm_up(*engine).status());
      ASSIGN_OR_RETURN(const Sample t,
                       TimeUs([&] { return call(*engine, 128); }));
      r["second_worker_first_call_minor_faults"] = t.minor_faults;
      r["thread_cpu_second_worker_first_call_us"] = Round(t.thread_cpu_us, 1);
      r["wall_second_worker_first_call_us"] = Round(t.wall_us, 1);
      r["cpu_second_worker_first_call_us"] = Round(t.cpu_us, 1);
      return absl::OkStatus();
    }();
  });
  second.join();
  RETURN_IF_ERROR(status);
  Emit(r);
  return absl::OkStatus();
}

// The engine: causal BHLD self-attention, B1 H8 D64 f32, Lq = Lk = L.
absl::Status EngineCase(int threads) {
  const std::string name =
      absl::StrCat("engine_causal_b1_h8_d64_f32_t", threads);
  if (!absl::StrContains(name, absl::GetFlag(FLAGS_filter))) {
    return absl::OkStatus();
  }
  constexpr int64_t kHeads = 8, kDim = 64;
  const size_t max_elems = kHeads * kMaxLen * kDim;
  const std::vector<float> q_src = Uniform(max_elems, 21, 1.0f);
  const std::vector<float> k_src = Uniform(max_elems, 22, 1.0f);
  const std::vector<float> v_src = Uniform(max_elems, 23, 1.0f);
  // What the calls read: the sources themselves, or (--fresh_inputs) copies
  // written before each call.
  const bool fresh = absl::GetFlag(FLAGS_fresh_inputs);
  std::vector<float> q_call, k_call, v_call;
  if (fresh) {
    q_call.resize(max_elems);
    k_call.resize(max_elems);
    v_call.resize(max_elems);
  }
  const std::vector<float>& q = fresh ? q_call : q_src;
  const std::vector<float>& k = fresh ? k_call : k_src;
  const std::vector<float>& v = fresh ? v_call : v_src;
  auto prepare = [&](int64_t l) {
    if (!fresh) return;
    const size_t n = static_cast<size_t>(kHeads * l * kDim);
    std::copy_n(q_src.begin(), n, q_call.begin());
    std::copy_n(k_src.begin(), n, k_call.begin());
    std::copy_n(v_src.begin(), n, v_call.begin());
  };
  std::vector<float> out(max_elems);
  EngineOptions options;
  options.num_threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                   AttentionEngine::Create(options));
  auto inputs = [&](int64_t l) {
    AttentionInputs in;
    in.query = MakeTensorView(q.data(), DType::kFloat32, {1, kHeads, l, kDim});
    in.key = MakeTensorView(k.data(), DType::kFloat32, {1, kHeads, l, kDim});
    in.value = MakeTensorView(v.data(), DType::kFloat32, {1, kHeads, l, kDim});
    in.mask.causal = true;
    return in;
  };
  // What a hosted layer does when it loads: the tiles of every length.
  RETURN_IF_ERROR(engine->Prepare(inputs(kMinLen)));
  auto call = [&](int64_t l) {
    const AttentionInputs in = inputs(l);
    AttentionOutputs o;
    o.output = MakeMutableTensorView(out.data(), DType::kFloat32,
                                     {1, kHeads, l, kDim});
    return engine->Run(in, o);
  };
  ASSIGN_OR_RETURN(const Sweep sweep,
                   RunSweep(NewLengths(absl::GetFlag(FLAGS_lengths), 29),
                            absl::GetFlag(FLAGS_repeats), prepare, call));
  Json r;
  r["case"] = name;
  r["threads"] = threads;
  r["fresh_inputs"] = fresh;
  AddSweep(sweep, &r);
  Emit(r);
  return absl::OkStatus();
}

absl::Status Run() {
  const CpuTimes start = ReadCpuTimes();
  if (absl::GetFlag(FLAGS_layers)) {
    // mha_post first: the example model a freshly started server loads.
    RETURN_IF_ERROR(LayerCase("layer_mha_post_d64_h4", 64, 4));
    RETURN_IF_ERROR(LayerCase("layer_encoder_d512_h8", 512, 8));
  }
  if (absl::GetFlag(FLAGS_engine)) {
    for (const std::string& t : absl::GetFlag(FLAGS_threads)) {
      RETURN_IF_ERROR(EngineCase(std::stoi(t)));
    }
  }
  const CpuTimes end = ReadCpuTimes();
  Json check;
  check["case"] = "run_check";
  check["cpu"] = CpuModel();
  check["onednn"] = OneDnnVersion();
  check["other_processes_cpu_seconds"] =
      Round((end.all - start.all) - (end.self - start.self), 2);
  check["self_cpu_seconds"] = Round(end.self - start.self, 2);
  Emit(check);
  return absl::OkStatus();
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = absl::OkStatus();
  if (absl::GetFlag(FLAGS_server_heap)) {
    status = attnserve::base::ApplyMallocPolicy();
  }
  if (status.ok()) status = attnserve::bench::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "attnserve_shape_bench: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
