#include "server/metrics.h"

#include <exception>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace attnserve::server {
namespace {

constexpr int kNumCodes =
    17;  // grpc::StatusCode OK (0) … UNAUTHENTICATED (16).
constexpr int kNumKernels = 5;
constexpr int kNumRejections = 5;

// In the order of Method. The names of the Open Inference Protocol's methods
// (from ServerLive) differ from every native one, so the method label tells
// the protocols apart without a label that would change the native series.
constexpr const char* kMethodNames[] = {"Attend",
                                        "AttendStream",
                                        "GetServerInfo",
                                        "AttendModel",
                                        "AttendModelStream",
                                        "AttendPieces",
                                        "CreateSession",
                                        "AppendKv",
                                        "AppendKvStream",
                                        "AttendSessions",
                                        "AttendSessionsStream",
                                        "ForkSession",
                                        "TruncateSession",
                                        "CloseSession",
                                        "GetSession",
                                        "StepChannel",
                                        "ExportSessions",
                                        "ImportSessions",
                                        "ServerLive",
                                        "ServerReady",
                                        "ModelReady",
                                        "ServerMetadata",
                                        "ModelMetadata",
                                        "ModelConfig",
                                        "ModelStatistics",
                                        "ModelInfer",
                                        "ModelStreamInfer",
                                        "RegisterSharedMemory",
                                        "UnregisterSharedMemory",
                                        "SharedMemoryStatus",
                                        "SystemSharedMemoryStatus",
                                        "SystemSharedMemoryRegister",
                                        "SystemSharedMemoryUnregister"};
static_assert(std::size(kMethodNames) == kNumMethods,
              "one name per Method, in its order");
// The names gRPC itself prints for each code, so dashboards match grpc_*
// metrics.
constexpr const char* kCodeNames[kNumCodes] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
// The kernels a call may run, in KernelIndex's order; their label values are
// core's names (KernelPathName).
constexpr KernelPath kKernels[kNumKernels] = {
    KernelPath::kFlash, KernelPath::kDecode, KernelPath::kMaterialized,
    KernelPath::kLinear, KernelPath::kLsh};
constexpr const char* kRejectionNames[kNumRejections] = {
    "queue_full", "deadline", "cancelled", "shutdown", "memory_budget"};

// A 1-2-5 series from 50 µs to 10 s: the fastest calls (a small decode step)
// take tens of microseconds and the slowest acceptable ones seconds; a 1-2-5
// step keeps quantile error within a factor of 2.5 and gives `le` labels people
// can read.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries{
          50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3,
          50e-3, 0.1,    0.2,    0.5,    1.0,  2.0,  5.0,  10.0};
  return *buckets;
}

int MethodIndex(Method method) { return static_cast<int>(method); }

int CodeIndex(grpc::StatusCode code) {
  const int c = static_cast<int>(code);
  // Anything outside the defined codes is reported as UNKNOWN, as gRPC does.
  return c >= 0 && c < kNumCodes ? c
                                 : static_cast<int>(grpc::StatusCode::UNKNOWN);
}

// -1 for kAuto, which names no kernel: the caller should pass the one that ran.
int KernelIndex(KernelPath kernel) {
  for (int k = 0; k < kNumKernels; ++k) {
    if (kKernels[k] == kernel) return k;
  }
  return -1;
}

int RejectionIndex(Rejection reason) {
  switch (reason) {
    case Rejection::kQueueFull:
      return 0;
    case Rejection::kDeadline:
      return 1;
    case Rejection::kCancelled:
      return 2;
    case Rejection::kShutdown:
      return 3;
    case Rejection::kMemoryBudget:
      return 4;
  }
  return 0;
}

prometheus::MetricFamily Family(const char* name, const char* help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void AddSample(prometheus::MetricFamily* f, double value,
               std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f->type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

// Figures read from their owner when Prometheus scrapes (the sessions, so that
// expiries and evictions show without a call to record them; the memory
// budget; the shared-memory regions): `Render` turns one reading into the
// families. Without a source nothing is exported.
template <typename Stats>
class ScrapedCollectable : public prometheus::Collectable {
 public:
  using Render = std::vector<prometheus::MetricFamily> (*)(const Stats&);
  explicit ScrapedCollectable(Render render) : render_(render) {}

  void SetSource(std::function<Stats()> source) {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    Stats s;
    {
      // Called under the lock, so that SetSource(nullptr) returns only once no
      // scrape is reading the old source.
      absl::MutexLock lock(&mu_);
      if (!source_) return {};
      s = source_();
    }
    return render_(s);
  }

 private:
  const Render render_;
  mutable absl::Mutex mu_;
  std::function<Stats()> source_ ABSL_GUARDED_BY(mu_);
};

std::vector<prometheus::MetricFamily> RenderSessions(
    const kvcache::StoreStats& s) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(Family("attnserve_kv_bytes",
                       "KV-cache bytes of session blocks (used) and left "
                       "in the --kv_cache_bytes budget (free), in bytes.",
                       MetricType::Gauge));
  AddSample(&out.back(), static_cast<double>(s.used_bytes),
            {{"state", "used"}});
  AddSample(&out.back(), static_cast<double>(s.budget_bytes - s.used_bytes),
            {{"state", "free"}});
  out.push_back(Family("attnserve_kv_sessions",
                       "Live KV-cache sessions, in sessions.",
                       MetricType::Gauge));
  AddSample(&out.back(), static_cast<double>(s.sessions));
  out.push_back(Family("attnserve_kv_tokens_appended_total",
                       "Tokens appended to sessions (per layer), in tokens.",
                       MetricType::Counter));
  AddSample(&out.back(), static_cast<double>(s.tokens_appended));
  out.push_back(Family("attnserve_kv_blocks_shared_total",
                       "Full KV-cache blocks replaced by an equal block "
                       "another session holds (--kv_share_blocks), in blocks.",
                       MetricType::Counter));
  AddSample(&out.back(), static_cast<double>(s.blocks_shared));
  out.push_back(Family("attnserve_kv_sessions_ended_total",
                       "Sessions ended, by reason: closed by a client, "
                       "expired past their idle TTL, evicted for memory, "
                       "moved to another server.",
                       MetricType::Counter));
  AddSample(&out.back(), static_cast<double>(s.ended_closed),
            {{"reason", "closed"}});
  AddSample(&out.back(), static_cast<double>(s.ended_expired),
            {{"reason", "expired"}});
  AddSample(&out.back(), static_cast<double>(s.ended_evicted),
            {{"reason", "evicted"}});
  AddSample(&out.back(), static_cast<double>(s.ended_moved),
            {{"reason", "moved"}});
  out.push_back(Family("attnserve_kv_sessions_imported_total",
                       "Sessions imported from snapshots (ImportSessions, a "
                       "draining server's handoff), in sessions.",
                       MetricType::Counter));
  AddSample(&out.back(), static_cast<double>(s.imported));
  return out;
}

// (used, limit) of the memory budget.
std::vector<prometheus::MetricFamily> RenderBudget(
    const std::pair<int64_t, int64_t>& used_limit) {
  std::vector<prometheus::MetricFamily> out;
  out.push_back(Family("attnserve_inflight_bytes",
                       "Bytes held by calls in flight (used) and left in "
                       "the --max_inflight_bytes budget (free), in bytes.",
                       prometheus::MetricType::Gauge));
  AddSample(&out.back(), static_cast<double>(used_limit.first),
            {{"state", "used"}});
  AddSample(&out.back(),
            static_cast<double>(used_limit.second - used_limit.first),
            {{"state", "free"}});
  return out;
}

std::vector<prometheus::MetricFamily> RenderSharedMemory(
    const SharedMemoryStats& s) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(Family("attnserve_shared_memory_regions",
                       "Registered shared-memory regions, in regions.",
                       MetricType::Gauge));
  AddSample(&out.back(), static_cast<double>(s.regions));
  out.push_back(Family("attnserve_shared_memory_bytes",
                       "Bytes of the registered shared-memory regions "
                       "(the clients' memory, mapped), in bytes.",
                       MetricType::Gauge));
  AddSample(&out.back(), static_cast<double>(s.bytes));
  out.push_back(Family("attnserve_shared_memory_calls_total",
                       "Attend calls (and stream messages) computed with "
                       "tensors in shared memory, in calls.",
                       MetricType::Counter));
  AddSample(&out.back(), static_cast<double>(s.calls));
  return out;
}

}  // namespace

const char* MethodName(Method method) {
  return kMethodNames[static_cast<int>(method)];
}

struct Metrics::Impl {
  // Shared because Exposer holds the registry by weak_ptr.
  std::shared_ptr<prometheus::Registry> registry =
      std::make_shared<prometheus::Registry>();

  prometheus::Counter* requests[kNumMethods][kNumCodes] = {};
  prometheus::Histogram* request_duration[kNumMethods] = {};
  prometheus::Histogram* queue_duration = nullptr;
  prometheus::Histogram* batch_size = nullptr;
  prometheus::Counter* batch_fallbacks = nullptr;
  prometheus::Histogram* compute_duration[kNumKernels] = {};
  prometheus::Gauge* inflight = nullptr;
  prometheus::Gauge* step_channels = nullptr;
  prometheus::Gauge* queue_depth = nullptr;
  prometheus::Counter* request_bytes = nullptr;
  prometheus::Counter* response_bytes = nullptr;
  prometheus::Counter* flops = nullptr;
  prometheus::Counter* rejected[kNumRejections] = {};
  prometheus::Counter* send_timeouts = nullptr;
  // Per hosted model.
  struct ModelSeries {
    prometheus::Counter* requests[kNumCodes] = {};
    prometheus::Histogram* request_duration = nullptr;
    prometheus::Histogram* compute_duration = nullptr;
  };
  std::vector<ModelSeries> models;
  std::shared_ptr<ScrapedCollectable<kvcache::StoreStats>> sessions =
      std::make_shared<ScrapedCollectable<kvcache::StoreStats>>(
          &RenderSessions);
  std::shared_ptr<ScrapedCollectable<std::pair<int64_t, int64_t>>> budget =
      std::make_shared<ScrapedCollectable<std::pair<int64_t, int64_t>>>(
          &RenderBudget);
  std::shared_ptr<ScrapedCollectable<SharedMemoryStats>> shared_memory =
      std::make_shared<ScrapedCollectable<SharedMemoryStats>>(
          &RenderSharedMemory);

  // attnserve_serving, also served at GET /ready for load balancers' health
  // checks.
  std::shared_ptr<prometheus::Registry> ready =
      std::make_shared<prometheus::Registry>();
  prometheus::Gauge* serving = nullptr;

  absl::Mutex mu;
  // Declared after the registries so they stop serving before those are
  // destroyed.
  std::vector<std::unique_ptr<prometheus::Exposer>> exposers
      ABSL_GUARDED_BY(mu);
};

Metrics::Metrics(const BuildInfo& info, const std::vector<std::string>& models)
    : impl_(std::make_unique<Impl>()) {
  prometheus::Registry& r = *impl_->registry;

  impl_->serving = &prometheus::BuildGauge()
                        .Name("attnserve_serving")
                        .Help(
                            "Whether the server takes new calls: 1, or 0 from "
                            "the moment it starts draining (SIGTERM); also "
                            "served at GET /ready. (This text must not hold "
                            "the sample's own line: health checks look for "
                            "it.)")
                        .Register(*impl_->ready)
                        .Add({});
  impl_->serving->Set(1);

  auto& requests = prometheus::BuildCounter()
                       .Name("attnserve_requests_total")
                       .Help(
                           "Requests answered, by RPC method and gRPC status "
                           "code; AttendStream counts each message; the Open "
                           "Inference Protocol's methods (ModelInfer, ...) "
                           "have names of their own.")
                       .Register(r);
  auto& request_duration =
      prometheus::BuildHistogram()
          .Name("attnserve_request_duration_seconds")
          .Help(
              "Time from receiving a request to its answer, in seconds, by "
              "RPC method (per message for AttendStream).")
          .Register(r);
  for (int m = 0; m < kNumMethods; ++m) {
    for (int c = 0; c < kNumCodes; ++c) {
      impl_->requests[m][c] =
          &requests.Add({{"method", kMethodNames[m]}, {"code", kCodeNames[c]}});
    }
    impl_->request_duration[m] =
        &request_duration.Add({{"method", kMethodNames[m]}}, LatencyBuckets());
  }

  impl_->queue_duration =
      &prometheus::BuildHistogram()
           .Name("attnserve_queue_duration_seconds")
           .Help(
               "Time computed requests waited in the scheduler's queue, in "
               "seconds.")
           .Register(r)
           .Add({}, LatencyBuckets());

  impl_->batch_size =
      &prometheus::BuildHistogram()
           .Name("attnserve_batch_size")
           .Help(
               "Tasks the scheduler ran together in one engine run (dynamic "
               "batching, --batch_max_size; 1 = alone), in tasks, once per "
               "run.")
           .Register(r)
           .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32,
                                                            64, 128, 256});

  auto& fallbacks =
      prometheus::BuildCounter()
          .Name("attnserve_batch_fallbacks_total")
          .Help(
              "Batches whose members were computed one by one instead, in "
              "batches, by reason: the batched run failed (error).")
          .Register(r);
  impl_->batch_fallbacks = &fallbacks.Add({{"reason", "error"}});

  auto& compute = prometheus::BuildHistogram()
                      .Name("attnserve_compute_duration_seconds")
                      .Help(
                          "Time spent in the attention kernel per request, in "
                          "seconds, by kernel.")
                      .Register(r);
  for (int k = 0; k < kNumKernels; ++k) {
    impl_->compute_duration[k] =
        &compute.Add({{"kernel", std::string(KernelPathName(kKernels[k]))}},
                     LatencyBuckets());
  }

  impl_->inflight = &prometheus::BuildGauge()
                         .Name("attnserve_inflight_requests")
                         .Help(
                             "Requests received and not yet answered "
                             "(queued or computing), in requests.")
                         .Register(r)
                         .Add({});
  impl_->step_channels =
      &prometheus::BuildGauge()
           .Name("attnserve_step_channels")
           .Help("Same-host step channels open, in channels.")
           .Register(r)
           .Add({});
  impl_->queue_depth = &prometheus::BuildGauge()
                            .Name("attnserve_queue_depth")
                            .Help(
                                "Tasks waiting in the scheduler's queue, in "
                                "tasks.")
                            .Register(r)
                            .Add({});
  impl_->request_bytes =
      &prometheus::BuildCounter()
           .Name("attnserve_request_bytes_total")
           .Help("Serialized request bytes received, in bytes.")
           .Register(r)
           .Add({});
  impl_->response_bytes =
      &prometheus::BuildCounter()
           .Name("attnserve_response_bytes_total")
           .Help("Serialized response bytes sent, in bytes.")
           .Register(r)
           .Add({});
  impl_->flops = &prometheus::BuildCounter()
                      .Name("attnserve_attention_flops_total")
                      .Help(
                          "Floating-point operations of computed calls, in "
                          "FLOPs: dense attention 2*B*Hq*Lq*Lk*(D+Dv), plus "
                          "the projections of hosted models.")
                      .Register(r)
                      .Add({});

  auto& rejected = prometheus::BuildCounter()
                       .Name("attnserve_rejected_total")
                       .Help(
                           "Tasks that never reached a kernel, in tasks, by "
                           "reason (queue_full, deadline, cancelled, "
                           "shutdown, memory_budget).")
                       .Register(r);
  for (int i = 0; i < kNumRejections; ++i) {
    impl_->rejected[i] = &rejected.Add({{"reason", kRejectionNames[i]}});
  }
  impl_->send_timeouts =
      &prometheus::BuildCounter()
           .Name("attnserve_send_timeouts_total")
           .Help(
               "Calls cancelled because the client had not taken its answer "
               "(a response or stream message handed to gRPC) within "
               "--send_timeout, in calls: a client that stopped reading or "
               "vanished.")
           .Register(r)
           .Add({});

  auto& model_requests =
      prometheus::BuildCounter()
          .Name("attnserve_model_requests_total")
          .Help(
              "Hosted-model requests answered (AttendModel and "
              "AttendModelStream messages), by model and gRPC status code.")
          .Register(r);
  auto& model_request_duration =
      prometheus::BuildHistogram()
          .Name("attnserve_model_request_duration_seconds")
          .Help(
              "Time from receiving a hosted-model request to its answer, in "
              "seconds, by model.")
          .Register(r);
  auto& model_compute_duration =
      prometheus::BuildHistogram()
          .Name("attnserve_model_compute_duration_seconds")
          .Help(
              "Time spent computing a hosted layer (projections, attention, "
              "norm) per request, in seconds, by model.")
          .Register(r);
  for (const std::string& name : models) {
    Impl::ModelSeries series;
    for (int c = 0; c < kNumCodes; ++c) {
      series.requests[c] =
          &model_requests.Add({{"model", name}, {"code", kCodeNames[c]}});
    }
    series.request_duration =
        &model_request_duration.Add({{"model", name}}, LatencyBuckets());
    series.compute_duration =
        &model_compute_duration.Add({{"model", name}}, LatencyBuckets());
    impl_->models.push_back(series);
  }

  prometheus::BuildGauge()
      .Name("attnserve_build_info")
      .Help(
          "Always 1; the labels name the server version, the oneDNN library "
          "and the ISA of the vectorized kernels.")
      .Register(r)
      .Add({{"version", info.version},
            {"onednn", info.onednn},
            {"isa", info.isa}})
      .Set(1);
}

Metrics::~Metrics() = default;

absl::StatusOr<int> Metrics::Expose(const std::string& listen) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // One thread: scrapes come every few seconds from one or two Prometheus
    // servers, and the cores belong to the kernels.
    exposer = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& e) {
    // civetweb reports only "possible problem binding to port", so the message
    // names the likely causes and the flag instead.
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on \"", listen,
                     "\": the port is in use or the address is not host:port (",
                     e.what(), "); set another with --metrics_listen"));
  }
  exposer->RegisterCollectable(impl_->registry);
  exposer->RegisterCollectable(impl_->sessions);
  exposer->RegisterCollectable(impl_->budget);
  exposer->RegisterCollectable(impl_->shared_memory);
  exposer->RegisterCollectable(impl_->ready);
  exposer->RegisterCollectable(impl_->ready, "/ready");
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on \"", listen,
                     "\": no port bound; set another with --metrics_listen"));
  }
  absl::MutexLock lock(&impl_->mu);
  impl_->exposers.push_back(std::move(exposer));
  return ports.front();
}

void Metrics::SetServing(bool serving) { impl_->serving->Set(serving ? 1 : 0); }

void Metrics::RecordRequest(Method method, grpc::StatusCode code,
                            double seconds, int64_t request_bytes,
                            int64_t response_bytes) {
  const int m = MethodIndex(method);
  impl_->requests[m][CodeIndex(code)]->Increment();
  impl_->request_duration[m]->Observe(seconds);
  if (request_bytes > 0) {
    impl_->request_bytes->Increment(static_cast<double>(request_bytes));
  }
  if (response_bytes > 0) {
    impl_->response_bytes->Increment(static_cast<double>(response_bytes));
  }
}

void Metrics::RecordQueue(double seconds) {
  impl_->queue_duration->Observe(seconds);
}

void Metrics::RecordCompute(KernelPath kernel, double seconds, double flops) {
  const int k = KernelIndex(kernel);
  if (k >= 0) impl_->compute_duration[k]->Observe(seconds);
  if (flops > 0) impl_->flops->Increment(flops);
}

void Metrics::RecordModelRequest(int model, grpc::StatusCode code,
                                 double seconds) {
  if (model < 0 || model >= static_cast<int>(impl_->models.size())) return;
  Impl::ModelSeries& series = impl_->models[static_cast<size_t>(model)];
  series.requests[CodeIndex(code)]->Increment();
  series.request_duration->Observe(seconds);
}

void Metrics::RecordModelCompute(int model, double seconds, double flops) {
  if (model >= 0 && model < static_cast<int>(impl_->models.size())) {
    impl_->models[static_cast<size_t>(model)].compute_duration->Observe(
        seconds);
  }
  if (flops > 0) impl_->flops->Increment(flops);
}

void Metrics::RecordBatch(int size) {
  impl_->batch_size->Observe(static_cast<double>(size));
}

void Metrics::RecordBatchFallback() { impl_->batch_fallbacks->Increment(); }

void Metrics::RecordRejection(Rejection reason) {
  impl_->rejected[RejectionIndex(reason)]->Increment();
}

void Metrics::RecordSendTimeout() { impl_->send_timeouts->Increment(); }

void Metrics::SetQueueDepth(int64_t depth) {
  impl_->queue_depth->Set(static_cast<double>(depth));
}

void Metrics::AddInflight(int64_t delta) {
  impl_->inflight->Increment(static_cast<double>(delta));
}

void Metrics::AddStepChannels(int64_t delta) {
  impl_->step_channels->Increment(static_cast<double>(delta));
}

prometheus::Registry& Metrics::registry() { return *impl_->registry; }

void Metrics::SetSessionStatsSource(
    std::function<kvcache::StoreStats()> source) {
  impl_->sessions->SetSource(std::move(source));
}

void Metrics::SetMemoryBudgetSource(
    std::function<std::pair<int64_t, int64_t>()> source) {
  impl_->budget->SetSource(std::move(source));
}

void Metrics::SetSharedMemorySource(std::function<SharedMemoryStats()> source) {
  impl_->shared_memory->SetSource(std::move(source));
}

}  // namespace attnserve::server
