#include "server/server.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "base/memory_limit.h"
#include "core/attention.h"
#include "core/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "model/model_repository.h"
#include "server/attention_service.h"
#include "server/kserve/inference_service.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/rpc/memory_budget.h"
#include "server/rpc/send_watchdog.h"
#include "server/session_files.h"
#include "server/session_handoff.h"
#include "server/session_service.h"
#include "server/shared_memory_service.h"
#include "server/shm/shared_memory_registry.h"
#include "server/step_listener.h"
#include "wire/transport.h"

#ifndef ATTNSERVE_VERSION
#define ATTNSERVE_VERSION "dev"
#endif

namespace attnserve::server {
namespace {

// Where kAutoStepChannelListen listens.
constexpr char kAutoStepListenAddress[] = "127.0.0.1:0";

// The longest message the server receives.
int64_t ReceivedMessageBytes(const ServerOptions& options) {
  return std::min(options.max_message_bytes, options.max_request_bytes);
}

// A message must hold one request piece and the fields around it.
constexpr int64_t kSmallestMessageBytes =
    wire::kRequestPieceBytes + (int64_t{64} << 10);

// The bytes of one stream the server takes ahead of reading them: a piece.
// Calls whose request comes in pieces wait for their budget with at most
// this much of the request in the transport (a unary request is still
// received whole, within --max_message_bytes).
constexpr int kServerStreamLookaheadBytes =
    static_cast<int>(wire::kRequestPieceBytes);

// A file a flag names; errors are InvalidArgument (a bad flag) and start with
// the flag.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view flag) {
  absl::StatusOr<std::string> contents = base::ReadFile(path);
  if (!contents.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", contents.status().message()));
  }
  return contents;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const ServerOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key must be given together");
  }
  if (o.tls_cert_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadFile(o.tls_key_file, "--tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(o.tls_cert_file, "--tls_cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadFile(o.tls_client_ca_file, "--tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

// How this server reaches its handoff peer, or nullopt without one.
absl::StatusOr<std::optional<HandoffOptions>> Handoff(
    const ServerOptions& o, const std::string& token) {
  if (o.handoff_to.empty()) {
    if (!o.handoff_ca_file.empty()) {
      return absl::InvalidArgumentError("--handoff_ca needs --handoff_to");
    }
    return std::nullopt;
  }
  if (o.handoff_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--handoff_timeout must be positive, got ",
                     absl::FormatDuration(o.handoff_timeout)));
  }
  HandoffOptions h;
  h.target = o.handoff_to;
  h.token = token;
  h.timeout = o.handoff_timeout;
  if (o.tls_cert_file.empty()) {
    if (!o.handoff_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--handoff_ca needs --tls_cert and --tls_key (the handoff is "
          "plaintext without them)");
    }
    h.credentials = grpc::InsecureChannelCredentials();
    return h;
  }
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFile(o.tls_key_file, "--tls_key"));
  ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFile(o.tls_cert_file, "--tls_cert"));
  if (!o.handoff_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadFile(o.handoff_ca_file, "--handoff_ca"));
  }
  h.credentials = grpc::SslCredentials(ssl);
  return h;
}

}  // namespace

struct AttnServer::Impl {
  // The metrics outlive the session store (members are destroyed in reverse
  // order): a scrape during destruction must not read a destroyed store.
  ~Impl() {
    if (metrics) {
      metrics->SetSessionStatsSource(nullptr);
      metrics->SetMemoryBudgetSource(nullptr);
      metrics->SetSharedMemorySource(nullptr);
    }
  }

  ServerOptions options;
  std::optional<HandoffOptions> handoff;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<AttentionEngine> validator;
  std::unique_ptr<ModelRegistry> models;
  // Before the scheduler: queued session calls hold blocks of the store.
  std::unique_ptr<kvcache::SessionStore> sessions;
  std::unique_ptr<Scheduler> scheduler;
  // Shared by the services.
  std::unique_ptr<Admission> admission;
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<SendWatchdog> watchdog;
  // max_streams_per_connection, resolved.
  int streams_per_connection = 0;
  // Before the services: calls in flight hold its regions.
  std::unique_ptr<SharedMemoryRegistry> shared_memory;
  std::unique_ptr<SharedMemoryService> shared_memory_service;
  std::unique_ptr<AttentionService> service;
  // Before the session service: its channels wait on it.
  std::unique_ptr<StepListener> step_listener;
  std::unique_ptr<SessionService> session_service;
  // The Open Inference Protocol, over `service`.
  std::unique_ptr<kserve::InferenceService> inference_service;
  std::unique_ptr<grpc::Server> server;  // last: destroyed first
  int port = 0;
  int metrics_port = 0;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

AttnServer::AttnServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AttnServer::~AttnServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<AttnServer>> AttnServer::Start(
    const ServerOptions& options) {
  for (auto [value, flag] :
       {std::pair{options.max_request_bytes, "--max_request_bytes"},
        std::pair{options.max_response_bytes, "--max_response_bytes"},
        std::pair{options.max_message_bytes, "--max_message_bytes"},
        std::pair{options.max_transport_bytes, "--max_transport_bytes"}}) {
    if (value < 1 || value > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " must be in [1, ", INT_MAX, "] (gRPC's limit), got ", value));
    }
  }
  if (options.max_message_bytes < kSmallestMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be at least ", kSmallestMessageBytes,
        " (a request piece of ", wire::kRequestPieceBytes,
        " bytes and its envelope), got ", options.max_message_bytes));
  }
  if (options.max_transport_bytes < options.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_transport_bytes (", options.max_transport_bytes,
        ") must hold at least one largest message (--max_message_bytes = ",
        options.max_message_bytes, ")"));
  }
  if (!(options.max_request_flops > 0)) {
    return absl::InvalidArgumentError("--max_request_flops must be positive");
  }
  if (options.max_inflight_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_inflight_bytes must be >= 0 (0 = half the memory limit), got ",
        options.max_inflight_bytes));
  }
  if (options.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--shutdown_grace must not be negative");
  }
  if (options.max_connection_age < absl::ZeroDuration() ||
      (options.max_connection_age > absl::ZeroDuration() &&
       options.max_connection_age < absl::Milliseconds(100)) ||
      options.max_connection_age > absl::Hours(24 * 24)) {
    // gRPC takes milliseconds as an int: 24 days is within INT_MAX.
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_connection_age must be 0 (off) or between 100ms and 24 days, "
        "got ",
        absl::FormatDuration(options.max_connection_age)));
  }
  if (options.send_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--send_timeout must be positive, got ",
                     absl::FormatDuration(options.send_timeout)));
  }
  if (options.max_streams_per_connection < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_streams_per_connection must be >= 0 (0 = derived from "
        "--max_inflight_bytes), got ",
        options.max_streams_per_connection));
  }
  if (options.step_channels < 0 || options.step_channels > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step_channels must be between 0 (off) and 1024, got ",
                     options.step_channels));
  }
  const bool auto_listen =
      options.step_channel_listen == kAutoStepChannelListen;
  if (!auto_listen && !options.step_channel_listen.empty() &&
      options.step_channels == 0) {
    return absl::InvalidArgumentError(
        "--step_channel_listen needs --step_channels=N (how many channels "
        "may be open)");
  }
  if (!auto_listen && !options.step_channel_listen.empty() &&
      !options.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--step_channel_listen: TCP step channels are not encrypted, and this "
        "server uses TLS (--tls_cert); use shared-memory step channels or "
        "streams");
  }
  if (options.step_channel_spin < absl::ZeroDuration() ||
      options.step_channel_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step_channel_spin must be between 0 and 1s, got ",
                     absl::FormatDuration(options.step_channel_spin)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   Credentials(options));
  std::string token;
  if (!options.auth_token_file.empty()) {
    ASSIGN_OR_RETURN(token,
                     ReadFile(options.auth_token_file, "--auth_token_file"));
    token = std::string(absl::StripAsciiWhitespace(token));
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--auth_token_file: \"",
                                                     options.auth_token_file,
                                                     "\" holds no token"));
    }
  }
  ASSIGN_OR_RETURN(impl->handoff, Handoff(options, token));

  model::RepositoryContents repository;
  if (!options.model_repository.empty()) {
    absl::StatusOr<model::RepositoryContents> loaded =
        model::LoadModelRepository(options.model_repository,
                                   options.skip_bad_models);
    if (!loaded.ok()) {
      return absl::Status(
          loaded.status().code(),
          absl::StrCat("--model_repository: ", loaded.status().message()));
    }
    repository = *std::move(loaded);
    for (const std::string& skipped : repository.skipped) {
      ATTNSERVE_LOG(LogLevel::kWarning,
                    "model skipped (--skip_bad_models): ", skipped);
    }
  }
  ASSIGN_OR_RETURN(impl->models, ModelRegistry::Create(repository));
  // The weights are packed; the f32 copies go.
  repository = model::RepositoryContents();

  if (!(options.small_request_flops >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--small_request_flops: must be >= 0, got ",
                     options.small_request_flops));
  }
  SchedulerOptions scheduler_options = options.scheduler;
  scheduler_options.engine.serial_below_flops = options.small_request_flops;
  EngineOptions validator_options = options.scheduler.engine;
  validator_options.num_threads = 1;
  ASSIGN_OR_RETURN(impl->validator, AttentionEngine::Create(validator_options));
  impl->metrics = std::make_unique<Metrics>(
      BuildInfo{ATTNSERVE_VERSION, OneDnnVersion(),
                std::string(IsaName(impl->validator->isa()))},
      impl->models->names());
  if (!options.metrics_listen.empty()) {
    ASSIGN_OR_RETURN(impl->metrics_port,
                     impl->metrics->Expose(options.metrics_listen));
  }
  // Each worker, on its own thread, opens its OpenMP team and runs every
  // hosted layer once before it takes a task (and before health says
  // SERVING): a worker's first call otherwise paid 3-4x its repeat in
  // set-up (docs/benchmarks.md, "New shapes").
  ModelRegistry* models = impl->models.get();
  scheduler_options.worker_warm_up = [models](AttentionEngine& engine) {
    return models->WarmUp(engine);
  };
  const absl::Time warm_up_start = absl::Now();
  ASSIGN_OR_RETURN(impl->scheduler,
                   Scheduler::Create(scheduler_options, impl->metrics.get()));
  ATTNSERVE_LOG(LogLevel::kDebug, "workers started and warmed up (",
                impl->models->models().size(), " models) in ",
                absl::FormatDuration(absl::Now() - warm_up_start));

  absl::StatusOr<std::unique_ptr<kvcache::SessionStore>> sessions =
      kvcache::SessionStore::Create(options.sessions);
  if (!sessions.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", sessions.status().message()));
  }
  impl->sessions = *std::move(sessions);
  kvcache::SessionStore* store = impl->sessions.get();
  if (!options.session_snapshot_dir.empty()) {
    const absl::Time restore_start = absl::Now();
    ASSIGN_OR_RETURN(SessionFileResult restored,
                     RestoreSessionFiles(*store, options.session_snapshot_dir));
    if (restored.files > 0 || !restored.refused.empty()) {
      ATTNSERVE_LOG(
          LogLevel::kInfo, "restored ", restored.sessions, " sessions (",
          restored.bytes, " bytes) from ",
          restored.files + static_cast<int64_t>(restored.refused.size()),
          " files in ", options.session_snapshot_dir, " in ",
          absl::FormatDuration(absl::Now() - restore_start));
    }
    for (const std::string& refused : restored.refused) {
      ATTNSERVE_LOG(LogLevel::kError, "session snapshot refused: ", refused);
    }
  }
  impl->metrics->SetSessionStatsSource([store] { return store->Stats(); });
  impl->budget = std::make_unique<MemoryBudget>(
      options.max_inflight_bytes > 0 ? options.max_inflight_bytes
                                     : base::AvailableMemoryBytes() / 2);
  MemoryBudget* budget = impl->budget.get();
  impl->metrics->SetMemoryBudgetSource([budget] {
    return std::pair<int64_t, int64_t>(budget->used(), budget->limit());
  });

  ASSIGN_OR_RETURN(impl->shared_memory,
                   SharedMemoryRegistry::Create(options.shared_memory));
  SharedMemoryRegistry* shared_memory = impl->shared_memory.get();
  if (options.shared_memory.enabled) {
    impl->metrics->SetSharedMemorySource(
        [shared_memory] { return shared_memory->Stats(); });
  }

  ServiceOptions service_options;
  service_options.limits.max_response_bytes = options.max_response_bytes;
  service_options.max_request_bytes = options.max_request_bytes;
  service_options.limits.max_flops = options.max_request_flops;
  v1::ServerInfo& info = service_options.info;
  info.set_version(ATTNSERVE_VERSION);
  info.set_onednn_version(OneDnnVersion());
  info.set_isa(std::string(IsaName(impl->validator->isa())));
  info.set_workers(impl->scheduler->workers());
  info.set_threads_per_worker(impl->scheduler->threads_per_worker());
  info.set_max_queue(options.scheduler.max_queue);
  info.set_max_request_bytes(options.max_request_bytes);
  info.set_max_response_bytes(options.max_response_bytes);
  info.set_max_message_bytes(
      std::min(options.max_message_bytes, options.max_request_bytes));
  impl->models->Describe(&info);
  v1::SessionLimits* session_limits = info.mutable_sessions();
  session_limits->set_kv_cache_bytes(options.sessions.budget_bytes);
  session_limits->set_block_tokens(options.sessions.block_tokens);
  session_limits->set_eviction(options.sessions.evict_lru ? "lru" : "none");
  session_limits->set_default_ttl_ms(
      absl::ToInt64Milliseconds(options.sessions.default_ttl));
  session_limits->set_max_ttl_ms(
      absl::ToInt64Milliseconds(options.sessions.max_ttl));
  session_limits->set_max_sessions(options.sessions.max_sessions);
  service_options.live_info = [store](v1::ServerInfo* info) {
    const kvcache::StoreStats s = store->Stats();
    info->mutable_sessions()->set_live_sessions(s.sessions);
    info->mutable_sessions()->set_kv_bytes_used(s.used_bytes);
  };
  service_options.models = impl->models.get();
  service_options.budget = budget;
  Metrics* metrics = impl->metrics.get();
  impl->watchdog = std::make_unique<SendWatchdog>(
      options.send_timeout, [metrics] { metrics->RecordSendTimeout(); });
  service_options.watchdog = impl->watchdog.get();
  if (options.shared_memory.enabled) {
    service_options.shared_memory = shared_memory;
  }
  service_options.small_request_flops = options.small_request_flops;
  service_options.batch_small_requests = options.scheduler.batch_max_size > 1;
  service_options.observe_stages = options.observe_stages;
  const RequestLimits request_limits = service_options.limits;
  impl->admission = std::make_unique<Admission>(token);
  impl->service = std::make_unique<AttentionService>(
      std::move(service_options), impl->admission.get(), impl->scheduler.get(),
      impl->metrics.get(), impl->validator.get());
  SessionServiceOptions session_options;
  session_options.limits = request_limits;
  session_options.small_request_flops = options.small_request_flops;
  session_options.budget = budget;
  session_options.watchdog = impl->watchdog.get();
  session_options.max_step_channels = options.step_channels;
  session_options.step_channel_spin = options.step_channel_spin;
  if (options.shared_memory.enabled) {
    session_options.shared_memory = shared_memory;
  }
  if (auto_listen) {
    // TCP channels for clients on this host, unless they may not be opened.
    if (options.step_channels > 0 && options.tls_cert_file.empty()) {
      absl::StatusOr<std::unique_ptr<StepListener>> listener =
          StepListener::Start(kAutoStepListenAddress);
      if (listener.ok()) {
        impl->step_listener = *std::move(listener);
      } else {
        ATTNSERVE_LOG(LogLevel::kWarning,
                      "no TCP step channels: ", listener.status().message());
      }
    }
  } else if (!options.step_channel_listen.empty()) {
    ASSIGN_OR_RETURN(impl->step_listener,
                     StepListener::Start(options.step_channel_listen));
  }
  session_options.step_listener = impl->step_listener.get();
  // A TCP step channel's frames: what one gRPC message may carry in.
  session_options.max_step_frame_bytes = ReceivedMessageBytes(options);
  impl->session_service = std::make_unique<SessionService>(
      session_options, impl->admission.get(), store, impl->scheduler.get(),
      impl->metrics.get());
  kserve::InferenceServiceOptions inference_options;
  inference_options.version = ATTNSERVE_VERSION;
  inference_options.models = impl->models.get();
  inference_options.watchdog = impl->watchdog.get();
  impl->shared_memory_service = std::make_unique<SharedMemoryService>(
      impl->admission.get(), shared_memory, impl->metrics.get());
  // The same registry for both protocols: one set of names and limits.
  inference_options.shared_memory = impl->shared_memory_service.get();
  impl->inference_service = std::make_unique<kserve::InferenceService>(
      std::move(inference_options), impl->admission.get(), impl->service.get(),
      impl->metrics.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &impl->port);
  builder.RegisterService(impl->service.get());
  builder.RegisterService(impl->session_service.get());
  builder.RegisterService(impl->inference_service.get());
  builder.RegisterService(impl->shared_memory_service.get());
  wire::ServerTransportOptions transport;
  transport.max_message_bytes = ReceivedMessageBytes(options);
  transport.stream_lookahead_bytes = kServerStreamLookaheadBytes;
  transport.max_response_bytes = options.max_response_bytes;
  transport.max_connection_age = options.max_connection_age;
  impl->streams_per_connection =
      options.max_streams_per_connection > 0
          ? options.max_streams_per_connection
          : static_cast<int>(std::clamp<int64_t>(
                budget->limit() / options.max_request_bytes, 8, 1024));
  transport.max_concurrent_streams = impl->streams_per_connection;
  // A client that takes no answer for send_timeout is cancelled (the
  // watchdog); one whose connection cannot be written to at all (stopped,
  // vanished) is found by a ping on that schedule and disconnected, which
  // ends its calls even while a write to it is stuck.
  transport.keepalive_time = options.send_timeout;
  transport.keepalive_timeout =
      std::min(options.send_timeout, absl::Seconds(20));
  transport.max_connection_age_grace = options.shutdown_grace;
  wire::ApplyServerTransport(transport, &builder);
  // gRPC's own buffers (messages being read, written): past the quota gRPC
  // cancels streams it is receiving (RST_STREAM ENHANCE_YOUR_CALM,
  // RESOURCE_EXHAUSTED to the client). docs/operations.md has the bound.
  grpc::ResourceQuota quota("attnserve");
  quota.Resize(static_cast<size_t>(options.max_transport_bytes));
  builder.SetResourceQuota(quota);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    impl->scheduler->Shutdown(absl::Now());
    return absl::UnavailableError(
        absl::StrCat("cannot listen on \"", options.listen, "\" (--listen)"));
  }
  grpc::HealthCheckServiceInterface* health =
      impl->server->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(v1::AttentionService::service_full_name(), true);
  health->SetServingStatus(v1::SessionService::service_full_name(), true);
  health->SetServingStatus(inference::GRPCInferenceService::service_full_name(),
                           true);
  return std::unique_ptr<AttnServer>(new AttnServer(std::move(impl)));
}

int AttnServer::port() const { return impl_->port; }
int AttnServer::metrics_port() const { return impl_->metrics_port; }
int AttnServer::step_channel_port() const {
  return impl_->step_listener != nullptr ? impl_->step_listener->port() : 0;
}
int64_t AttnServer::max_inflight_bytes() const {
  return impl_->budget->limit();
}

std::string AttnServer::ConfigSummary() const {
  const ServerOptions& o = impl_->options;
  return absl::StrCat(
      "attnserve ", ATTNSERVE_VERSION, " listen=", o.listen,
      " port=", impl_->port, " metrics_listen=",
      o.metrics_listen.empty() ? "(disabled)" : o.metrics_listen,
      " metrics_port=", impl_->metrics_port,
      " workers=", impl_->scheduler->workers(),
      " threads_per_worker=", impl_->scheduler->threads_per_worker(),
      " max_queue=", o.scheduler.max_queue,
      " max_request_bytes=", o.max_request_bytes,
      " max_response_bytes=", o.max_response_bytes,
      " max_request_flops=", o.max_request_flops,
      " small_request_flops=", o.small_request_flops,
      " inline_small_requests=", o.scheduler.run_small_inline,
      " batch_max_size=", o.scheduler.batch_max_size,
      " batch_max_delay=", absl::FormatDuration(o.scheduler.batch_max_delay),
      " max_inflight_bytes=", impl_->budget->limit(),
      o.max_inflight_bytes > 0 ? "" : " (half the memory limit)",
      " max_streams_per_connection=", impl_->streams_per_connection,
      " send_timeout=", absl::FormatDuration(o.send_timeout),
      " kv_cache_bytes=", o.sessions.budget_bytes,
      " kv_block_tokens=", o.sessions.block_tokens,
      " kv_eviction=", o.sessions.evict_lru ? "lru" : "none",
      " kv_share_blocks=", o.sessions.share_blocks ? "true" : "false",
      " kv_session_ttl=", absl::FormatDuration(o.sessions.default_ttl),
      " shutdown_grace=", absl::FormatDuration(o.shutdown_grace),
      " max_connection_age=",
      o.max_connection_age > absl::ZeroDuration()
          ? absl::FormatDuration(o.max_connection_age)
          : std::string("off"),
      " tls=",
      o.tls_cert_file.empty() ? "off"
                              : (o.tls_client_ca_file.empty() ? "on" : "mtls"),
      " auth=", o.auth_token_file.empty() ? "off" : "bearer", " shared_memory=",
      o.shared_memory.enabled
          ? absl::StrCat("on prefix=", o.shared_memory.prefix)
          : std::string("off"),
      " step_channels=", o.step_channels,
      o.step_channels > 0
          ? absl::StrCat(" step_channel_spin=",
                         absl::FormatDuration(o.step_channel_spin))
          : std::string(),
      impl_->step_listener != nullptr
          ? absl::StrCat(" step_channel_port=", impl_->step_listener->port())
          : std::string(),
      " models=",
      impl_->models->models().empty()
          ? std::string("none")
          : absl::StrJoin(impl_->models->names(), ","),
      " isa=", IsaName(impl_->validator->isa()), " onednn=", OneDnnVersion());
}

void AttnServer::HandOff(SessionHandoff& handoff) {
  const absl::Time start = absl::Now();
  absl::StatusOr<HandoffResult> moved = handoff.Send();
  if (moved.ok()) {
    ATTNSERVE_LOG(LogLevel::kInfo, "handed ", moved->sessions, " sessions (",
                  moved->bytes, " bytes) to ", impl_->options.handoff_to,
                  " in ", absl::FormatDuration(absl::Now() - start));
  } else {
    ATTNSERVE_LOG(LogLevel::kError, "session handoff to ",
                  impl_->options.handoff_to,
                  " failed: ", moved.status().message());
  }
}

void AttnServer::KeepSessions() {
  const std::string& dir = impl_->options.session_snapshot_dir;
  const absl::Time start = absl::Now();
  absl::StatusOr<SessionFileResult> kept =
      WriteSessionFile(*impl_->sessions, dir);
  if (kept.ok()) {
    ATTNSERVE_LOG(LogLevel::kInfo, "kept ", kept->sessions, " sessions (",
                  kept->bytes, " bytes) in ", dir, " in ",
                  absl::FormatDuration(absl::Now() - start));
  } else {
    ATTNSERVE_LOG(LogLevel::kError, "keeping the sessions in ", dir,
                  " failed: ", kept.status().message());
  }
}

void AttnServer::StartDraining() {
  impl_->server->GetHealthCheckService()->SetServingStatus(false);
  impl_->metrics->SetServing(false);
  impl_->admission->StartDraining();
}

void AttnServer::Shutdown() {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  StartDraining();
  // The peer learns at once which sessions will come, so that their calls
  // routed there meanwhile are answered "arriving" (retry), not NOT_FOUND.
  std::unique_ptr<SessionHandoff> handoff;
  if (impl_->handoff) {
    handoff = std::make_unique<SessionHandoff>(*impl_->handoff,
                                               impl_->sessions.get());
  }
  // In-flight work gets the grace; the listener stays open meanwhile so that
  // health checks see NOT_SERVING and new calls a clear UNAVAILABLE. Then
  // whatever is still open (idle streams, health watches, calls past the grace)
  // is cancelled: gRPC's own Shutdown would otherwise wait the whole grace for
  // streams that never end by themselves. Queued work of cancelled calls is
  // rejected by the scheduler. The sessions move once no session call is in
  // flight (none can change them after that).
  const absl::Time deadline = absl::Now() + impl_->options.shutdown_grace;
  const bool sessions_idle = impl_->session_service->WaitUntilIdle(deadline);
  if (handoff) HandOff(*handoff);
  if (!impl_->options.session_snapshot_dir.empty()) KeepSessions();
  if (!sessions_idle || !impl_->service->WaitUntilIdle(deadline) ||
      !impl_->inference_service->WaitUntilIdle(deadline)) {
    ATTNSERVE_LOG(LogLevel::kWarning,
                  "shutdown grace ended with calls in flight; cancelling them");
  }
  // A call counts as done at its OnDone, which gRPC may run (inline, since
  // TrackedUnaryReactor's reactions are) before the call's last frames have
  // reached the socket: closing the transports at once then dropped them
  // (once in CI, a client's connection was reset before it read the answer
  // of a call that had ended OK). The writes follow at once; a moment lets
  // them out.
  constexpr absl::Duration kLastWrites = absl::Milliseconds(100);
  absl::SleepFor(kLastWrites);
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now()));
  impl_->scheduler->Shutdown(absl::Now());
}

}  // namespace attnserve::server
