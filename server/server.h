#ifndef ATTNSERVE_SERVER_SERVER_H_
#define ATTNSERVE_SERVER_SERVER_H_

// Builds and runs the whole server: gRPC (AttentionService, SessionService,
// health, reflection,
// TLS, limits), the scheduler, metrics over HTTP; shuts it down gracefully.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvcache/session_store.h"
#include "server/call_stages.h"
#include "server/scheduler.h"
#include "server/shm/shared_memory_registry.h"

namespace attnserve::server {

class SessionHandoff;

// ServerOptions::step_channel_listen's default: TCP step channels for clients
// on this host (127.0.0.1, any free port) when they may be opened.
inline constexpr char kAutoStepChannelListen[] = "auto";

struct ServerOptions {
  // gRPC address; port 0 picks a free port (see AttnServer::port()).
  std::string listen = "0.0.0.0:50051";
  // HTTP address of /metrics; empty disables metrics over HTTP.
  std::string metrics_listen = "0.0.0.0:9464";
  SchedulerOptions scheduler;
  // Largest request (a message, or an Attend request sent in pieces with
  // AttendPieces) and largest response payload.
  int64_t max_request_bytes = int64_t{256} << 20;
  int64_t max_response_bytes = int64_t{256} << 20;
  // Largest message received (gRPC's receive limit, at most
  // max_request_bytes is used). The transport buffers a unary request whole
  // before the memory budget sees it, so this bounds what one open call can
  // make the server hold unaccounted; larger Attend requests come in pieces
  // (AttendPieces), admitted against the budget at their first piece. At
  // least wire::kRequestPieceBytes plus 64 KiB.
  int64_t max_message_bytes = int64_t{16} << 20;
  // Largest attention FLOP count of one request.
  double max_request_flops = 1e12;
  // Softmax Attend requests of fewer FLOPs are small
  // (ServiceOptions::small_request_flops):
  // the engine runs them on one thread (EngineOptions::serial_below_flops),
  // the scheduler inline when it can (SchedulerOptions::run_small_inline),
  // and they may be batched (SchedulerOptions::batch_max_size). Default 1e6
  // (docs/operations.md); 0 = none is small.
  double small_request_flops = 1e6;
  // Benchmarks only (ServiceOptions::observe_stages); null = off.
  std::function<void(const CallStages&)> observe_stages;
  // Bytes that calls in flight may hold at once (server/rpc/memory_budget.h);
  // 0 (default) = half of the memory the process may use (the cgroup limit,
  // else physical memory).
  int64_t max_inflight_bytes = 0;
  // gRPC's resource quota: the transport's own buffers (messages being
  // received or sent, before and after the budget holds them). Past it gRPC
  // cancels streams it is receiving (RESOURCE_EXHAUSTED to the client).
  int64_t max_transport_bytes = int64_t{256} << 20;
  // How long in-flight calls may take to finish after Shutdown starts.
  absl::Duration shutdown_grace = absl::Seconds(30);
  // When positive, each client connection is closed (GOAWAY) after about this
  // long, its calls in flight given shutdown_grace to finish, so that clients
  // re-resolve and spread over replicas added since they connected. Zero
  // (default) = connections live as long as the client keeps them.
  absl::Duration max_connection_age = absl::ZeroDuration();
  // Calls one client connection may have open at once; its further calls
  // wait on the client's side, unsent. gRPC receives a message whole
  // before the server sees it, so this bounds what one connection can make
  // the server buffer: max_streams_per_connection x max_message_bytes. 0
  // (default) = max_inflight_bytes / max_request_bytes, within [8, 1024].
  int max_streams_per_connection = 0;
  // A call whose client has not taken its answer (response or stream
  // message handed to gRPC) this long after it was ready is cancelled, its
  // memory freed (server/rpc/send_watchdog.h). Positive.
  absl::Duration send_timeout = absl::Seconds(60);
  // PEM files; both or neither. With tls_client_ca_file, clients must present a
  // certificate signed by it (mTLS).
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  // File whose content (trimmed) is the bearer token every call must carry.
  std::string auth_token_file;
  // Hosted attention layers (docs/models.md): a directory of model folders;
  // empty (default) = none. A bad model stops Start unless skip_bad_models,
  // which leaves it out with a warning.
  std::string model_repository;
  bool skip_bad_models = false;
  // KV-cache sessions (SessionService): the budget, block size, eviction and
  // TTLs (kvcache/session_store.h). With budget_bytes 0 no session can hold a
  // token (appends are RESOURCE_EXHAUSTED naming --kv_cache_bytes).
  kvcache::StoreOptions sessions;
  // Same-host tensors in POSIX shared memory (SharedMemoryService); off by
  // default.
  SharedMemoryOptions shared_memory;
  // Step channels (SessionService.StepChannel) open at once (default 8),
  // same-host rings (with shared_memory) and TCP ones (with
  // step_channel_listen) together; 0 = none.
  int step_channels = 8;
  // "host:port" where TCP step channels connect (port 0: any free one);
  // empty = none. Not with TLS: the channels are not encrypted.
  // kAutoStepChannelListen (the default): the loopback interface, any free
  // port, unless step_channels is 0 or the server uses TLS.
  std::string step_channel_listen = kAutoStepChannelListen;
  // The longest a channel's thread polls for the next step before it sleeps
  // (server/step_spin.h); not negative.
  absl::Duration step_channel_spin = absl::Milliseconds(5);
  // Where a draining server moves its live sessions (server/session_handoff.h):
  // a peer's gRPC address; empty (default) = sessions end with the server.
  // The peer is reached over TLS when this server has a certificate (it
  // presents it, and trusts handoff_ca_file, else the system's roots), with
  // this server's bearer token.
  std::string handoff_to;
  std::string handoff_ca_file;
  // The longest a handoff may take (announcement to the peer's answer).
  absl::Duration handoff_timeout = absl::Seconds(60);
  // A directory where a draining server keeps the sessions it still holds
  // (after a handoff, if any) and where a starting one restores them from
  // (server/session_files.h); empty (default) = none.
  std::string session_snapshot_dir;
};

class AttnServer {
 public:
  // Loads the models and starts serving. InvalidArgument for bad options,
  // unreadable files or a bad model (the message names the file and the
  // tensor); NotFound for a missing model repository; Unavailable when an
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<AttnServer>> Start(
      const ServerOptions& options);
  ~AttnServer();  // Shutdown() if not yet done.
  AttnServer(const AttnServer&) = delete;
  AttnServer& operator=(const AttnServer&) = delete;

  int port() const;
  // 0 when metrics over HTTP are disabled.
  int metrics_port() const;
  // Where TCP step channels connect; 0 when the server takes none.
  int step_channel_port() const;
  // The memory budget in use (max_inflight_bytes, resolved).
  int64_t max_inflight_bytes() const;
  // The effective configuration, one line.
  std::string ConfigSummary() const;

  // Health goes NOT_SERVING and new calls get UNAVAILABLE; returns at once
  // (Shutdown does the rest). Idempotent.
  void StartDraining();

  // Health goes NOT_SERVING, new calls get UNAVAILABLE, in-flight calls finish
  // within the grace period (later ones are cancelled), the sessions move to
  // the handoff peer and the rest to the snapshot directory, if there are
  // such, workers stop. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  void HandOff(SessionHandoff& handoff);
  void KeepSessions();
  explicit AttnServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SERVER_H_
