// attnserve_rpc_bench: attnserve over loopback against a no-op echo RPC of the
// same payload on the same gRPC stack, in one process and one run. Starts the
// real server (server::AttnServer) and an echo server
// (server/bench/echo_service.h) in this process, times Attend on both in
// interleaved slices, times the engine directly for the same shape, and checks
// the ratios against the targets. See docs/benchmarks.md, "RPC benchmark".
// Longer than the project's ~500-line guide on purpose: it is one program's
// driver (flags, cases, the two servers, interleaved timing, the report), whose
// parts are each used once and read in order; its reusable pieces live in
// server/bench/rpc_load.h and server/bench/echo_service.h.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cpu_quota.h"
#include "base/malloc_policy.h"
#include "bench/cases.h"
#include "bench/machine.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/status_macros.h"
#include "server/bench/echo_service.h"
#include "server/bench/rpc_load.h"
#include "server/scheduler.h"
#include "server/server.h"

ABSL_FLAG(bool, json, false,
          "Print one JSON object per line instead of a table.");
ABSL_FLAG(bool, quick, false,
          "Short windows and 3 repetitions (under 15 s in all).");
ABSL_FLAG(double, duration, 0,
          "Seconds each side (attnserve, echo, kernel) is measured per "
          "repetition; 0 = 1.0, or 0.2 with --quick. Each side also makes at "
          "least --min_calls calls per repetition.");
ABSL_FLAG(double, slice, 0.1,
          "Seconds per slice: a repetition alternates slices of attnserve, "
          "echo and the kernel (each at least one call).");
ABSL_FLAG(int, reps, 0,
          "Repetitions per case; figures are medians over them; 0 = 5, or 3 "
          "with --quick.");
ABSL_FLAG(int, min_calls, 0,
          "Fewest calls per side and repetition; 0 = 5, or 2 with --quick.");
ABSL_FLAG(
    int, channels, 4,
    "Channels (separate TCP connections) per server for concurrency > 1.");
ABSL_FLAG(int, tput_workers, 2,
          "Scheduler workers of attnserve in the throughput case.");
ABSL_FLAG(int, tput_threads, 1,
          "threads_per_worker of attnserve in the throughput case.");
ABSL_FLAG(int, latency_threads, 0,
          "threads_per_worker of attnserve (one worker) in the latency cases; "
          "0 = all available CPUs.");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "Diagnostic: true leaves absl::Mutex deadlock detection on for the "
          "whole process (Debian's Abseil is built without NDEBUG, so it is "
          "on unless turned off; the attnserve binary turns it off).");
ABSL_FLAG(bool, malloc_keep_freed, true,
          "The attnserve binary's heap settings (base/malloc_policy.h: freed "
          "memory kept in the process, at most two heaps), as the server runs; "
          "false: glibc's defaults (diagnostic).");
ABSL_FLAG(std::string, filter, "", "Run only cases whose name contains this.");
ABSL_FLAG(double, small_request_flops, 1e6,
          "attnserve's --small_request_flops (0 turns the small-request path "
          "off).");
ABSL_FLAG(bool, inline_small, true, "attnserve's --inline_small_requests.");
ABSL_FLAG(int, batch_max_size, 32,
          "attnserve's --batch_max_size in the *_batch cases (the others run "
          "with 1).");

namespace attnserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Idle time before every slice: an idle OpenMP thread of attnserve's worker
// spins for a few ms after each call (libgomp's default wait policy), which
// would otherwise land on the first calls of the next slice.
constexpr absl::Duration kSettle = absl::Milliseconds(10);
// run_check calls a run quiet when other processes used at most this share of
// the CPU time (as attnserve_kernel_bench).
constexpr double kMaxOthersCpuShare = 0.05;

struct Options {
  bool json = false;
  bool quick = false;
  absl::Duration duration;
  absl::Duration slice;
  absl::Duration warmup;
  int warmup_calls = 0;
  int reps = 0;
  int min_calls = 0;
  int channels = 0;
  int tput_workers = 0;
  int tput_threads = 0;
  int latency_threads = 0;
  bool mutex_deadlock_detection = false;
  bool malloc_keep_freed = true;
  std::string filter;
  double small_request_flops = 0;
  bool inline_small = true;
  int batch_max_size = 1;
};

enum class Goal {
  kLatency,     // attnserve_p50 / (echo_p50 + kernel_median) <= target
  kThroughput,  // attnserve_rps / echo_rps >= target
  // The server's median span outside the kernel (receipt to answer handed
  // back, minus compute), in µs, <= target.
  kOverhead,
};

struct RpcCase {
  std::string name;
  int64_t b = 1, h = 1, l = 1, d = 64;
  int concurrency = 1;
  Goal goal = Goal::kLatency;
  double target = 0;
  // attnserve's --batch_max_size (Options::batch_max_size when batching).
  bool batching = false;
};

std::vector<RpcCase> RpcCases() {
  return {
      {"rpc_b1_h8_l128_d64_f32_c1", 1, 8, 128, 64, 1, Goal::kLatency, 1.15},
      {"rpc_b1_h1_l16_d64_f32_c1", 1, 1, 16, 64, 1, Goal::kOverhead, 15},
      // Small (5.2e5 FLOPs) but two heads: the team that the small-request
      // path leaves asleep.
      {"rpc_b1_h2_l32_d64_f32_c1", 1, 2, 32, 64, 1, Goal::kOverhead, 15},
      {"rpc_b1_h1_l16_d64_f32_c32", 1, 1, 16, 64, 32, Goal::kThroughput, 0.9},
      {"rpc_b1_h1_l16_d64_f32_c32_batch", 1, 1, 16, 64, 32, Goal::kThroughput,
       0.9, true},
      {"rpc_b1_h16_l2048_d64_f32_c1", 1, 16, 2048, 64, 1, Goal::kLatency, 1.1},
  };
}

// Starts the calling thread's OpenMP team of `threads` (what the first
// parallel region of a thread pays).
void StartOpenMpTeam(int threads) {
  int started = 0;
#pragma omp parallel num_threads(threads)
  {
#pragma omp atomic
    ++started;
  }
  (void)started;
}

struct SideRep {
  double p10_us = 0, p50_us = 0, p99_us = 0, rps = 0;
  int64_t calls = 0;
  double server_total_us = 0, server_compute_us = 0, server_queue_us = 0;
  int64_t response_bytes = 0;
};

SideRep Summarize(const WindowResult& w) {
  SideRep s;
  s.p10_us = Percentile(w.latencies_us, 10);
  s.p50_us = Percentile(w.latencies_us, 50);
  s.p99_us = Percentile(w.latencies_us, 99);
  s.rps = w.rps();
  s.calls = w.completed;
  s.server_total_us = Median(w.server_total_us);
  s.server_compute_us = Median(w.server_compute_us);
  s.server_queue_us = Median(w.server_queue_us);
  s.response_bytes = w.response_bytes;
  return s;
}

// Medians of one repetition's server-side stages (server::CallStages), µs.
struct StageRep {
  double decode_us = 0, queue_us = 0, compute_us = 0, answer_us = 0,
         span_us = 0, outside_us = 0, mean_batch = 0;
};

// The stage times of every computed call since the last Take.
class StageLog {
 public:
  void Add(const server::CallStages& s) {
    absl::MutexLock lock(&mu_);
    stages_.push_back(s);
  }
  StageRep Take() {
    std::vector<server::CallStages> stages;
    {
      absl::MutexLock lock(&mu_);
      stages.swap(stages_);
    }
    auto us = [](absl::Duration d) { return absl::ToDoubleMicroseconds(d); };
    std::vector<double> decode, queue, compute, answer, span, outside;
    double batch = 0;
    for (const server::CallStages& c : stages) {
      decode.push_back(us(c.submitted - c.received));
      queue.push_back(us(c.started - c.submitted));
      compute.push_back(us(c.computed - c.started));
      answer.push_back(us(c.answered - c.computed));
      span.push_back(us(c.answered - c.received));
      outside.push_back(span.back() - compute.back());
      batch += c.batch_size;
    }
    StageRep r;
    r.decode_us = Median(decode);
    r.queue_us = Median(queue);
    r.compute_us = Median(compute);
    r.answer_us = Median(answer);
    r.span_us = Median(span);
    r.outside_us = Median(outside);
    r.mean_batch = stages.empty() ? 0 : batch / stages.size();
    return r;
  }

 private:
  absl::Mutex mu_;
  std::vector<server::CallStages> stages_ ABSL_GUARDED_BY(mu_);
};

// Median over repetitions of one field.
double MedianOf(const std::vector<SideRep>& reps,
                const std::function<double(const SideRep&)>& field) {
  std::vector<double> values;
  for (const SideRep& r : reps) values.push_back(field(r));
  return Median(std::move(values));
}

int64_t SumCalls(const std::vector<SideRep>& reps) {
  int64_t n = 0;
  for (const SideRep& r : reps) n += r.calls;
  return n;
}

// A server's stubs: one per channel, each channel its own connection.
struct Client {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::AttentionService::Stub>> stubs;

  std::vector<v1::AttentionService::Stub*> raw() const {
    std::vector<v1::AttentionService::Stub*> r;
    for (const auto& s : stubs) r.push_back(s.get());
    return r;
  }
};

Client MakeClient(int port, int channels, const std::string& domain) {
  Client c;
  for (int i = 0; i < channels; ++i) {
    c.channels.push_back(MakeChannel(absl::StrCat("127.0.0.1:", port),
                                     absl::StrCat(domain, "-", i)));
    c.stubs.push_back(v1::AttentionService::NewStub(c.channels.back()));
  }
  return c;
}

class Benchmark {
 public:
  explicit Benchmark(const Options& options) : options_(options) {}

  absl::Status Run() {
    std::vector<RpcCase> cases;
    for (const RpcCase& c : RpcCases()) {
      if (absl::StrContains(c.name, options_.filter)) cases.push_back(c);
    }
    if (cases.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no case matches --filter '", options_.filter, "'"));
    }
    if (!options_.mutex_deadlock_detection) {
      absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    }
    if (options_.malloc_keep_freed) RETURN_IF_ERROR(base::ApplyMallocPolicy());
    ASSIGN_OR_RETURN(echo_, EchoServer::Start(EchoServerOptions()));
    EmitRunInfo();
    for (const RpcCase& c : cases) {
      const absl::Status s = RunCase(c);
      if (!s.ok()) return WithContext(absl::StrCat("case ", c.name, ": "), s);
    }
    EmitRunCheck();
    echo_.reset();
    return absl::OkStatus();
  }

 private:
  void Emit(const Json& r) {
    if (options_.json) {
      Reporter(true).Emit(r);
      return;
    }
    PrintRow(r);
  }

  void PrintRow(const Json& r) {
    const std::string kind = r.at("case");
    if (kind == "run_info") {
      std::printf("%s, %d CPUs, load average %s, %s\n",
                  r.at("cpu").get<std::string>().c_str(),
                  r.at("cpus").get<int>(),
                  r.at("loadavg_start").get<std::string>().c_str(),
                  r.at("method").get<std::string>().c_str());
      std::printf("\n%-32s %3s %6s %9s %9s %9s %9s %9s %8s %8s %6s %7s  %s\n",
                  "case", "c", "calls", "attn_p50", "attn_p99", "echo_p50",
                  "echo_p99", "kernel", "attn_rps", "echo_rps", "ratio",
                  "target", "met");
    } else if (kind == "run_check") {
      std::printf(
          "\nload average at the end %s; other processes used %.1f%% of the "
          "CPU time during the run\n",
          r.at("loadavg_end").get<std::string>().c_str(),
          100 * r.at("other_processes_cpu_share").get<double>());
    } else {
      const Json& k = r.at("kernel_median_us");
      std::printf(
          "%-32s %3d %6lld %9.1f %9.1f %9.1f %9.1f %9s %8.0f %8.0f %6.3f "
          "%2s%5.2f  %s\n",
          kind.c_str(), r.at("concurrency").get<int>(),
          static_cast<long long>(r.at("requests").get<int64_t>()),
          r.at("attnserve_p50_us").get<double>(),
          r.at("attnserve_p99_us").get<double>(),
          r.at("echo_p50_us").get<double>(), r.at("echo_p99_us").get<double>(),
          k.is_null() ? "-" : absl::StrFormat("%.1f", k.get<double>()).c_str(),
          r.at("attnserve_rps").get<double>(), r.at("echo_rps").get<double>(),
          r.at("ratio").get<double>(),
          r.at("at_least").get<bool>() ? ">=" : "<=",
          r.at("target").get<double>(), r.at("met").get<bool>() ? "yes" : "NO");
      std::printf(
          "    server %s, %d channel(s) per server; p10 attnserve %.1f us, "
          "echo %.1f us; attnserve server-side total %.1f us (queue %.1f, "
          "compute %.1f); response %lld B (attnserve) / %lld B (echo), "
          "serialize %.1f us, parse %.1f us\n",
          r.at("server_config").get<std::string>().c_str(),
          r.at("channels").get<int>(), r.at("attnserve_p10_us").get<double>(),
          r.at("echo_p10_us").get<double>(),
          r.at("attnserve_server_total_us").get<double>(),
          r.at("attnserve_server_queue_us").get<double>(),
          r.at("attnserve_server_compute_us").get<double>(),
          static_cast<long long>(
              r.at("attnserve_response_bytes").get<int64_t>()),
          static_cast<long long>(r.at("echo_response_bytes").get<int64_t>()),
          r.at("response_serialize_us").get<double>(),
          r.at("response_parse_us").get<double>());
      std::printf(
          "    stages (server, median us): decode %.1f, queue %.1f, compute "
          "%.1f, answer %.1f; span %.1f, outside the kernel %.1f; hand-back "
          "estimate %.1f; mean batch %.2f\n",
          r.at("stage_decode_us").get<double>(),
          r.at("stage_queue_us").get<double>(),
          r.at("stage_compute_us").get<double>(),
          r.at("stage_answer_us").get<double>(),
          r.at("stage_span_us").get<double>(),
          r.at("stage_outside_kernel_us").get<double>(),
          r.at("handback_est_us").get<double>(),
          r.at("mean_batch_size").get<double>());
    }
    std::fflush(stdout);
  }

  void EmitRunInfo() {
    Json r;
    r["case"] = "run_info";
    r["cpu"] = CpuModel();
    r["cpus"] = base::AvailableCpus();
    r["loadavg_start"] = LoadAverage();
    r["onednn"] = OneDnnVersion();
    r["quick"] = options_.quick;
    r["duration_s"] = absl::ToDoubleSeconds(options_.duration);
    r["slice_s"] = absl::ToDoubleSeconds(options_.slice);
    r["reps"] = options_.reps;
    r["mutex_deadlock_detection"] = options_.mutex_deadlock_detection;
    r["malloc_keep_freed"] = options_.malloc_keep_freed;
    for (const char* name :
         {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GLIBC_TUNABLES"}) {
      const char* value = std::getenv(name);
      r[absl::AsciiStrToLower(name)] = value == nullptr ? "" : value;
    }
    r["method"] = absl::StrCat(
        options_.reps, " reps x ", absl::FormatDuration(options_.duration),
        " per side and rep in ", absl::FormatDuration(options_.slice),
        " slices alternating attnserve/echo/kernel, medians over reps");
    Emit(r);
  }

  void EmitRunCheck() {
    const CpuTimes now = ReadCpuTimes();
    const double wall =
        std::chrono::duration<double>(Clock::now() - start_).count();
    const double others = std::max(
        0.0, (now.all - start_cpu_.all) - (now.self - start_cpu_.self));
    Json r;
    r["case"] = "run_check";
    r["loadavg_end"] = LoadAverage();
    r["wall_s"] = Round(wall, 2);
    const double share = others / (wall * std::thread::hardware_concurrency());
    r["other_processes_cpu_share"] = Round(share, 4);
    r["quiet"] = share <= kMaxOthersCpuShare;
    Emit(r);
    if (share > kMaxOthersCpuShare) {
      std::fprintf(stderr,
                   "attnserve_rpc_bench: warning: the machine was not quiet "
                   "(other processes used %.0f%% of the CPU time): latencies "
                   "include their scheduling delays\n",
                   share * 100);
    }
  }

  absl::Status RunCase(const RpcCase& c) {
    // attnserve as `attnserve --listen 127.0.0.1:0 --metrics_listen ''`.
    server::ServerOptions server_options;
    server_options.listen = "127.0.0.1:0";
    server_options.metrics_listen = "";
    server_options.shutdown_grace = absl::Seconds(5);
    server_options.small_request_flops = options_.small_request_flops;
    server_options.scheduler.run_small_inline = options_.inline_small;
    server_options.scheduler.batch_max_size =
        c.batching ? options_.batch_max_size : 1;
    auto stage_log = std::make_shared<StageLog>();
    server_options.observe_stages = [stage_log](const server::CallStages& s) {
      stage_log->Add(s);
    };
    if (c.goal == Goal::kThroughput) {
      server_options.scheduler.workers = options_.tput_workers;
      server_options.scheduler.threads_per_worker = options_.tput_threads;
    } else {
      server_options.scheduler.workers = 1;
      server_options.scheduler.threads_per_worker =
          options_.latency_threads > 0 ? options_.latency_threads
                                       : base::AvailableCpus();
    }
    ASSIGN_OR_RETURN(std::unique_ptr<server::AttnServer> attn,
                     server::AttnServer::Start(server_options));

    const int channels = c.concurrency > 1 ? options_.channels : 1;
    const Client attn_client =
        MakeClient(attn->port(), channels, absl::StrCat("attn-", c.name));
    const Client echo_client =
        MakeClient(echo_->port(), channels, absl::StrCat("echo-", c.name));

    v1::ServerInfo info;
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(10));
      const grpc::Status s =
          attn_client.stubs[0]->GetServerInfo(&context, {}, &info);
      if (!s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("GetServerInfo: ", s.error_message()));
      }
    }
    const std::string config = absl::StrCat(
        "workers=", info.workers(),
        " threads_per_worker=", info.threads_per_worker(),
        " small_request_flops=", server_options.small_request_flops,
        " inline_small_requests=", server_options.scheduler.run_small_inline,
        " batch_max_size=", server_options.scheduler.batch_max_size);

    // The inputs: the kernel benchmark's buffers (uniform [-1, 1], fixed
    // seed), sent as raw BHLD bytes.
    CaseSpec spec;
    spec.dtype = DType::kFloat32;
    spec.path = KernelPath::kAuto;  // the server's choice
    spec.b = c.b;
    spec.hq = spec.hkv = c.h;
    spec.lq = spec.lk = c.l;
    spec.d = c.d;
    CaseBuffers buffers(spec);
    v1::AttendRequest request;
    request.set_request_id("rpc-bench");
    auto set_tensor = [&spec](const AlignedBuffer& data, v1::Tensor* t) {
      t->set_dtype(v1::FLOAT32);
      for (int64_t d : {spec.b, spec.hq, spec.lq, spec.d}) t->add_shape(d);
      t->set_data(data.data(), data.size());
    };
    set_tensor(buffers.q, request.mutable_query());
    set_tensor(buffers.k, request.mutable_key());
    set_tensor(buffers.v, request.mutable_value());
    ASSIGN_OR_RETURN(const OutputSpec output, OutputSpecOf(request));

    // The kernel on the worker's thread count, directly.
    EngineOptions engine_options;
    engine_options.num_threads = info.threads_per_worker();
    ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                     AttentionEngine::Create(engine_options));
    const AttentionInputs inputs = buffers.inputs();
    const AttentionOutputs outputs = buffers.outputs();
    WindowSpec slice;
    slice.duration = options_.slice;
    slice.min_calls = 1;
    slice.expected_output_bytes = output.bytes;
    WindowSpec warmup = slice;
    warmup.duration = options_.warmup;
    warmup.min_calls = options_.warmup_calls;

    auto measure = [&](const Client& client,
                       const WindowSpec& w) -> absl::StatusOr<WindowResult> {
      if (c.concurrency == 1) {
        return RunBlocking(*client.stubs[0], request, w);
      }
      return RunClosedLoop(client.raw(), c.concurrency, request, w);
    };
    // The kernel's slice: back-to-back Run calls, each timed, on a thread of
    // its own that ends with the slice. An OpenMP team lives as long as its
    // master thread, and libgomp shortens every team's spin-wait once the
    // process has more OpenMP threads than CPUs; a team kept alive here would
    // change how attnserve's worker team waits between calls. An empty
    // parallel region starts the slice's team before the timing.
    auto time_kernel = [&](absl::Duration d, WindowResult* r) -> absl::Status {
      absl::Status status;
      auto slice_body = [&] {
        StartOpenMpTeam(engine->num_threads());
        const Clock::time_point start = Clock::now();
        const auto limit =
            std::chrono::microseconds(absl::ToInt64Microseconds(d));
        Clock::time_point end = start;
        int64_t calls = 0;
        while (end - start < limit || calls < 1) {
          const Clock::time_point call_start = Clock::now();
          status = engine->Run(inputs, outputs);
          if (!status.ok()) return;
          end = Clock::now();
          r->latencies_us.push_back(
              std::chrono::duration<double, std::micro>(end - call_start)
                  .count());
          ++calls;
        }
        r->completed += calls;
        r->seconds += std::chrono::duration<double>(end - start).count();
      };
      std::thread(slice_body).join();
      return status;
    };

    // Warm-up: connections, the server's primitive cache, allocator, caches.
    for (const Client* client : {&attn_client, &echo_client}) {
      absl::StatusOr<WindowResult> w = measure(*client, warmup);
      if (!w.ok()) {
        return WithContext(
            client == &attn_client ? "attnserve warm-up: " : "echo warm-up: ",
            w.status());
      }
    }
    {
      WindowResult unused;
      RETURN_IF_ERROR(time_kernel(options_.warmup, &unused));
    }
    // attnserve must compute what the engine computes.
    v1::AttendResponse checked;
    {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(120));
      const grpc::Status s =
          attn_client.stubs[0]->Attend(&context, request, &checked);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat("Attend: ", s.error_message()));
      }
    }
    {
      absl::Status run;  // on a thread of its own, as time_kernel
      std::thread([&] { run = engine->Run(inputs, outputs); }).join();
      RETURN_IF_ERROR(run);
    }
    const double max_abs_diff = MaxAbsDiff(checked, buffers);

    // Each repetition alternates slices of attnserve, echo and the kernel
    // (attnserve first in even rounds, echo first in odd ones) until every
    // side has had --duration and --min_calls calls, so that the three share
    // the machine's noise at the scale of a slice.
    std::vector<SideRep> attn_reps, echo_reps;
    std::vector<StageRep> stage_reps;
    std::vector<double> kernel_reps, ratio_reps;
    const double wanted = absl::ToDoubleSeconds(options_.duration);
    for (int rep = 0; rep < options_.reps; ++rep) {
      stage_log->Take();
      WindowResult attn_w, echo_w, kernel_w;
      auto enough = [&](const WindowResult& w) {
        return w.seconds >= wanted && w.completed >= options_.min_calls;
      };
      for (int round = 0;
           !(enough(attn_w) && enough(echo_w) && enough(kernel_w)); ++round) {
        const bool attn_first = (rep + round) % 2 == 0;
        for (int side = 0; side < 2; ++side) {
          const bool is_attn = (side == 0) == attn_first;
          absl::SleepFor(kSettle);
          absl::StatusOr<WindowResult> w =
              measure(is_attn ? attn_client : echo_client, slice);
          if (!w.ok()) {
            return WithContext(is_attn ? "attnserve: " : "echo: ", w.status());
          }
          (is_attn ? attn_w : echo_w).Append(*w);
        }
        absl::SleepFor(kSettle);
        RETURN_IF_ERROR(time_kernel(options_.slice, &kernel_w));
      }
      attn_reps.push_back(Summarize(attn_w));
      echo_reps.push_back(Summarize(echo_w));
      stage_reps.push_back(stage_log->Take());
      kernel_reps.push_back(Median(kernel_w.latencies_us));
      ratio_reps.push_back(
          c.goal == Goal::kLatency
              ? attn_reps.back().p50_us /
                    (echo_reps.back().p50_us + kernel_reps.back())
          : c.goal == Goal::kOverhead
              ? stage_reps.back().outside_us
              : attn_reps.back().rps / echo_reps.back().rps);
    }
    const ResponseCost cost = MeasureResponseCost(checked);

    const auto p50 = [](const SideRep& r) { return r.p50_us; };
    const auto p99 = [](const SideRep& r) { return r.p99_us; };
    const auto rps = [](const SideRep& r) { return r.rps; };
    const double attn_p50 = MedianOf(attn_reps, p50);
    const double echo_p50 = MedianOf(echo_reps, p50);
    const double attn_rps = MedianOf(attn_reps, rps);
    const double echo_rps = MedianOf(echo_reps, rps);
    const double kernel = Median(kernel_reps);
    const bool latency = c.goal == Goal::kLatency;
    const bool overhead = c.goal == Goal::kOverhead;
    auto stage = [&stage_reps](double StageRep::*field) {
      std::vector<double> v;
      for (const StageRep& r : stage_reps) v.push_back(r.*field);
      return Round(Median(std::move(v)), 1);
    };
    const double ratio = latency    ? attn_p50 / (echo_p50 + kernel)
                         : overhead ? stage(&StageRep::outside_us)
                                    : attn_rps / echo_rps;

    Json r;
    r["case"] = c.name;
    r["concurrency"] = c.concurrency;
    r["requests"] = SumCalls(attn_reps);
    r["echo_requests"] = SumCalls(echo_reps);
    r["attnserve_p50_us"] = Round(attn_p50, 1);
    r["attnserve_p99_us"] = Round(MedianOf(attn_reps, p99), 1);
    r["echo_p50_us"] = Round(echo_p50, 1);
    r["echo_p99_us"] = Round(MedianOf(echo_reps, p99), 1);
    r["kernel_median_us"] = Round(kernel, 1);
    r["attnserve_rps"] = Round(attn_rps, 1);
    r["echo_rps"] = Round(echo_rps, 1);
    r["ratio"] = Round(ratio, 4);
    r["ratio_definition"] =
        latency    ? "attnserve_p50_us / (echo_p50_us + kernel_median_us)"
        : overhead ? "stage_outside_kernel_us (median over calls, us)"
                   : "attnserve_rps / echo_rps";
    r["target"] = c.target;
    r["at_least"] = !latency && !overhead;
    r["met"] = latency || overhead ? ratio <= c.target : ratio >= c.target;
    // Where the server's span goes (server::CallStages), medians over calls
    // and then over repetitions.
    r["stage_decode_us"] = stage(&StageRep::decode_us);
    r["stage_queue_us"] = stage(&StageRep::queue_us);
    r["stage_compute_us"] = stage(&StageRep::compute_us);
    r["stage_answer_us"] = stage(&StageRep::answer_us);
    r["stage_span_us"] = stage(&StageRep::span_us);
    r["stage_outside_kernel_us"] = stage(&StageRep::outside_us);
    r["mean_batch_size"] = stage(&StageRep::mean_batch);
    // What the client waits beyond the echo and the server's span: the hand
    // back to gRPC and the transport that the echo does not pay.
    r["handback_est_us"] =
        Round(attn_p50 - echo_p50 - stage(&StageRep::span_us), 1);
    std::vector<double> rounded;
    for (double x : ratio_reps) rounded.push_back(Round(x, 4));
    r["ratio_per_rep"] = rounded;
    r["reps"] = options_.reps;
    r["server_config"] = config;
    r["kernel_threads"] = info.threads_per_worker();
    r["kernel_path"] = std::string(KernelPathName(
        ChooseKernel(ShapeOf(spec), KernelPath::kAuto, /*weights=*/false)));
    r["client"] =
        c.concurrency == 1
            ? "one blocking caller"
            : absl::StrCat(c.concurrency, " outstanding callback-API calls");
    r["channels"] = channels;
    r["request_bytes"] = static_cast<int64_t>(request.ByteSizeLong());
    r["attnserve_response_bytes"] = attn_reps.back().response_bytes;
    r["echo_response_bytes"] = echo_reps.back().response_bytes;
    r["attnserve_server_total_us"] = Round(
        MedianOf(attn_reps, [](const SideRep& s) { return s.server_total_us; }),
        1);
    r["attnserve_server_compute_us"] =
        Round(MedianOf(attn_reps,
                       [](const SideRep& s) { return s.server_compute_us; }),
              1);
    r["attnserve_server_queue_us"] = Round(
        MedianOf(attn_reps, [](const SideRep& s) { return s.server_queue_us; }),
        1);
    // Less sensitive to other processes' scheduling delays than p50.
    const auto p10 = [](const SideRep& s) { return s.p10_us; };
    r["attnserve_p10_us"] = Round(MedianOf(attn_reps, p10), 1);
    r["echo_p10_us"] = Round(MedianOf(echo_reps, p10), 1);
    r["response_serialize_us"] = Round(cost.serialize_us, 1);
    r["response_parse_us"] = Round(cost.parse_us, 1);
    r["max_abs_diff_vs_kernel"] = max_abs_diff;
    Emit(r);
    attn->Shutdown();
    return absl::OkStatus();
  }

  // Largest |attnserve output - engine output| (f32).
  static double MaxAbsDiff(const v1::AttendResponse& response,
                           const CaseBuffers& buffers) {
    const std::string& data = response.output().data();
    if (data.size() != buffers.out.size()) return INFINITY;
    const float* a = reinterpret_cast<const float*>(data.data());
    const float* b = static_cast<const float*>(buffers.out.data());
    double worst = 0;
    for (size_t i = 0; i < data.size() / sizeof(float); ++i) {
      worst = std::max(worst, std::fabs(double{a[i]} - double{b[i]}));
    }
    return worst;
  }

  // What protobuf alone costs for one response of this size, in this process:
  // serializing it into a reused string and parsing it into a reused message.
  struct ResponseCost {
    double serialize_us = 0, parse_us = 0;
  };
  static ResponseCost MeasureResponseCost(const v1::AttendResponse& response) {
    RepPolicy policy;
    policy.min_seconds = 0.05;
    policy.min_reps = 5;
    ResponseCost cost;
    std::string wire;
    const absl::StatusOr<Timing> s = TimeMedian(policy, [&] {
      return response.SerializeToString(&wire)
                 ? absl::OkStatus()
                 : absl::InternalError("serialize failed");
    });
    v1::AttendResponse parsed;
    const absl::StatusOr<Timing> p = TimeMedian(policy, [&] {
      return parsed.ParseFromString(wire) ? absl::OkStatus()
                                          : absl::InternalError("parse failed");
    });
    cost.serialize_us = s.ok() ? s->median_us : NAN;
    cost.parse_us = p.ok() ? p->median_us : NAN;
    return cost;
  }

  const Options options_;
  std::unique_ptr<EchoServer> echo_;
  const Clock::time_point start_ = Clock::now();
  const CpuTimes start_cpu_ = ReadCpuTimes();
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.json = absl::GetFlag(FLAGS_json);
  o.quick = absl::GetFlag(FLAGS_quick);
  o.filter = absl::GetFlag(FLAGS_filter);
  const double duration = absl::GetFlag(FLAGS_duration);
  if (duration < 0)
    return absl::InvalidArgumentError("--duration must be >= 0");
  o.duration = absl::Seconds(duration > 0 ? duration : o.quick ? 0.2 : 1.0);
  const double slice = absl::GetFlag(FLAGS_slice);
  if (!(slice > 0)) return absl::InvalidArgumentError("--slice must be > 0");
  o.slice = absl::Seconds(slice);
  o.warmup = o.quick ? absl::Milliseconds(200) : absl::Seconds(1);
  o.warmup_calls = o.quick ? 1 : 2;
  o.reps = absl::GetFlag(FLAGS_reps);
  if (o.reps < 0) return absl::InvalidArgumentError("--reps must be >= 0");
  if (o.reps == 0) o.reps = o.quick ? 3 : 5;
  o.min_calls = absl::GetFlag(FLAGS_min_calls);
  if (o.min_calls < 0) {
    return absl::InvalidArgumentError("--min_calls must be >= 0");
  }
  if (o.min_calls == 0) o.min_calls = o.quick ? 2 : 5;
  o.channels = absl::GetFlag(FLAGS_channels);
  o.tput_workers = absl::GetFlag(FLAGS_tput_workers);
  o.tput_threads = absl::GetFlag(FLAGS_tput_threads);
  o.latency_threads = absl::GetFlag(FLAGS_latency_threads);
  o.mutex_deadlock_detection = absl::GetFlag(FLAGS_mutex_deadlock_detection);
  o.malloc_keep_freed = absl::GetFlag(FLAGS_malloc_keep_freed);
  o.small_request_flops = absl::GetFlag(FLAGS_small_request_flops);
  o.inline_small = absl::GetFlag(FLAGS_inline_small);
  o.batch_max_size = absl::GetFlag(FLAGS_batch_max_size);
  if (!(o.small_request_flops >= 0)) {
    return absl::InvalidArgumentError("--small_request_flops must be >= 0");
  }
  if (o.batch_max_size < 1 || o.batch_max_size > 1024) {
    return absl::InvalidArgumentError("--batch_max_size must be in [1, 1024]");
  }
  if (o.latency_threads < 0) {
    return absl::InvalidArgumentError("--latency_threads must be >= 0");
  }
  if (o.channels < 1 || o.tput_workers < 1 || o.tput_threads < 1) {
    return absl::InvalidArgumentError(
        "--channels, --tput_workers and --tput_threads must be >= 1");
  }
  return o;
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times attnserve over loopback against a no-op echo RPC of the same "
      "payload and the kernel alone, in one run.\nUsage: attnserve_rpc_bench "
      "[--json] [--quick] [--duration S] [--slice S] [--reps N] "
      "[--min_calls N] [--channels N] [--tput_workers N] [--tput_threads N] "
      "[--latency_threads N] [--filter SUBSTR] [--nomalloc_keep_freed] "
      "[--mutex_deadlock_detection] [--small_request_flops F] "
      "[--noinline_small] [--batch_max_size N]");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "bench/rpc_bench.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<attnserve::bench::Options> options =
      attnserve::bench::OptionsFromFlags();
  absl::Status status = options.status();
  if (status.ok()) status = attnserve::bench::Benchmark(*options).Run();
  if (!status.ok()) {
    std::fprintf(stderr, "attnserve_rpc_bench: error: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}
