// attnserve: the attention gRPC server. Flags are read here and nowhere else.

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/byte_size.h"
#include "base/malloc_policy.h"
#include "core/attention.h"
#include "grpc/grpc.h"
#include "server/log.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC address (host:port; port 0 picks one)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "HTTP address of /metrics; empty disables it");
ABSL_FLAG(int, workers, 1, "scheduler workers (concurrent kernels)");
ABSL_FLAG(int, threads_per_worker, 0,
          "OpenMP threads per worker; 0 = available CPUs (cgroup limit aware) "
          "/ workers");
ABSL_FLAG(int, max_queue, 256,
          "requests waiting for a worker before RESOURCE_EXHAUSTED");
ABSL_FLAG(attnserve::base::ByteSize, max_inflight_bytes, {0},
          "bytes that calls in flight may hold at once (requests, responses, "
          "hosted layers' working buffers); past it calls are "
          "RESOURCE_EXHAUSTED; 0 = half the cgroup memory limit, else of "
          "physical memory");
ABSL_FLAG(int, max_streams_per_connection, 0,
          "calls one client connection may have open at once (its further "
          "calls wait, unsent); 0 = --max_inflight_bytes / "
          "--max_request_bytes, within [8, 1024]");
ABSL_FLAG(absl::Duration, send_timeout, absl::Seconds(60),
          "cancel a call whose client has not taken its answer this long "
          "after it was ready (a client that stopped reading or vanished), "
          "freeing its memory");
ABSL_FLAG(attnserve::base::ByteSize, max_request_bytes, {int64_t{256} << 20},
          "largest request, in one message or an Attend request sent in "
          "pieces (bytes, or with a unit: 256MiB)");
ABSL_FLAG(attnserve::base::ByteSize, max_message_bytes, {int64_t{16} << 20},
          "largest message received; larger Attend requests are sent in "
          "pieces (AttendPieces), admitted against --max_inflight_bytes "
          "before the rest arrives");
ABSL_FLAG(attnserve::base::ByteSize, max_transport_bytes, {int64_t{256} << 20},
          "gRPC's buffers for messages being received and sent (its resource "
          "quota); past it streams being received are cancelled "
          "(RESOURCE_EXHAUSTED)");
ABSL_FLAG(attnserve::base::ByteSize, max_response_bytes, {int64_t{256} << 20},
          "largest response message");
ABSL_FLAG(double, max_request_flops, 1e12,
          "largest attention FLOP count (2*B*Hq*Lq*Lk*(D+Dv)) of one request");
ABSL_FLAG(double, small_request_flops, 1e6,
          "softmax Attend requests of fewer FLOPs are small: computed on one "
          "thread with no "
          "OpenMP team, run at once on the receiving thread when a worker is "
          "idle and nothing is queued (--inline_small_requests), batchable "
          "(--batch_max_size); 0 = none is small");
ABSL_FLAG(bool, inline_small_requests, true,
          "run a small request on the thread that received it when a worker "
          "is idle and nothing is queued, instead of handing it to a worker");
ABSL_FLAG(int, batch_max_size, 1,
          "dynamic batching: most small, compatible Attend requests computed "
          "in one engine run (1..1024); 1 = no batching");
ABSL_FLAG(int64_t, batch_max_delay_us, 0,
          "dynamic batching: microseconds a worker holding an incomplete "
          "batch waits for more compatible requests (0..100000); 0 = only "
          "what is already queued");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(30),
          "time in-flight calls get to finish after SIGTERM/SIGINT");
ABSL_FLAG(absl::Duration, max_connection_age, absl::ZeroDuration(),
          "close each client connection after about this long (GOAWAY; calls "
          "in flight get --shutdown_grace) so clients re-resolve and reach "
          "new replicas; 0 = never");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain; enables TLS with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA that client certificates must chain to (mTLS)");
ABSL_FLAG(
    std::string, auth_token_file, "",
    "file holding a bearer token every call must send (health stays open)");
ABSL_FLAG(std::string, max_isa, "auto",
          "cap the kernels' own ISA: auto, amx (AMX tile products for bf16), "
          "avx512 or avx2 on x86-64; auto, sve or neon on arm64");
ABSL_FLAG(std::string, model_repository, "",
          "directory of hosted attention layers (DIR/<name>/config.json and "
          "model.safetensors, docs/models.md); empty = none");
ABSL_FLAG(bool, skip_bad_models, false,
          "start without the models that fail to load (each is logged) "
          "instead of refusing to start");

ABSL_FLAG(attnserve::base::ByteSize, kv_cache_bytes, {int64_t{1} << 30},
          "KV-cache sessions: bytes of keys and values all sessions may hold "
          "together; 0 turns sessions off");
ABSL_FLAG(int, kv_block_tokens, 128,
          "tokens per block of one session layer (memory is allocated and "
          "shared by forks in blocks), 1..4096");
ABSL_FLAG(std::string, kv_eviction, "none",
          "when the KV cache is full: none (new tokens get RESOURCE_EXHAUSTED) "
          "or lru (idle sessions are evicted, least recently used first)");
ABSL_FLAG(absl::Duration, kv_session_ttl, absl::Minutes(10),
          "idle time after which a session expires, unless it asks for its "
          "own");
ABSL_FLAG(absl::Duration, kv_max_session_ttl, absl::Hours(24),
          "the longest idle TTL a session may ask for");
ABSL_FLAG(int64_t, kv_max_sessions, 65536, "live sessions at most");
ABSL_FLAG(bool, kv_share_blocks, true,
          "sessions hold one copy of the full blocks whose keys and values are "
          "equal (a shared prompt): memory only, results are the same");

ABSL_FLAG(bool, shared_memory, false,
          "same-host clients may register POSIX shared-memory regions and "
          "send Attend tensors (and take outputs) through them "
          "(docs/operations.md \"Shared memory\")");
ABSL_FLAG(std::string, shared_memory_prefix, "attnserve_",
          "shared-memory objects a client may register must be named with "
          "this prefix");
ABSL_FLAG(int, shared_memory_max_regions, 64,
          "regions registered at once, 1..1024");
ABSL_FLAG(attnserve::base::ByteSize, shared_memory_max_bytes,
          {int64_t{64} << 30}, "bytes of all registered regions together");
ABSL_FLAG(int, step_channels, 8,
          "step channels open at once (session steps through a ring in a "
          "shared-memory region, with --shared_memory; or through a TCP "
          "socket, with --step_channel_listen); 0 = none");
ABSL_FLAG(std::string, step_channel_listen,
          attnserve::server::kAutoStepChannelListen,
          "host:port where TCP step channels connect (port 0 = any free one; "
          "not encrypted: refused with --tls_cert); auto = 127.0.0.1, any "
          "free port, for clients on this host (none with --tls_cert or "
          "--step_channels=0); empty = none");
ABSL_FLAG(absl::Duration, step_channel_spin, absl::Milliseconds(5),
          "the longest a step channel's thread polls for the next step before "
          "it sleeps (a CPU busy meanwhile): about twice the client's recent "
          "pauses, at least 1ms, 50us when they are longer; 0 = sleep at "
          "once");
ABSL_FLAG(std::string, handoff_to, "",
          "on SIGTERM, move the live sessions to this peer (host:port) "
          "instead of ending them (docs/operations.md \"Rolling updates "
          "without losing sessions\"); empty = they end with the server");
ABSL_FLAG(std::string, handoff_ca, "",
          "PEM roots the handoff peer's certificate must chain to (TLS "
          "servers; default: the system's)");
ABSL_FLAG(absl::Duration, handoff_timeout, absl::Seconds(60),
          "the longest a handoff may take");
ABSL_FLAG(std::string, session_snapshot_dir, "",
          "on SIGTERM, write the live sessions (those not handed off) to a "
          "snapshot file here; at start, restore every snapshot file here and "
          "delete it; empty = sessions end with the server");

namespace {

using attnserve::server::LogLevel;

int Fail(const std::string& message) {
  attnserve::server::WriteLog(LogLevel::kError, message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY once, when it loads, before main. Its default
  // spins idle OpenMP threads for milliseconds after every kernel, taking a
  // core from gRPC's I/O threads (docs/benchmarks.md, "RPC benchmark": B1 H8
  // L128 went from 131 to 289 calls/s). Restart once with PASSIVE unless the
  // operator chose.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr &&
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
    execv("/proc/self/exe",
          argv);  // returns only on failure: carry on spinning
  }
  // Keep freed memory for the next call, in at most two heaps (the cost:
  // the process stays at its peak memory use; docs/operations.md). A heap
  // that refuses the settings (a sanitizer's) is used as it is.
  const absl::Status heap = attnserve::base::ApplyMallocPolicy();

  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
  // detection on: a lock-order graph updated on every lock, gRPC's included
  // (~5 % of the CPU samples of tiny calls at concurrency 32; the unit test
  // binaries keep it; docs/benchmarks.md, "RPC benchmark").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::SetProgramUsageMessage("attnserve: attention over gRPC. Flags:");
  absl::ParseCommandLine(argc, argv);

  auto level = attnserve::server::ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) return Fail(std::string(level.status().message()));
  attnserve::server::SetLogLevel(*level);
  if (!heap.ok()) {
    attnserve::server::WriteLog(
        LogLevel::kWarning,
        absl::StrCat(heap.message(), ": those settings are not applied"));
  }

  attnserve::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.scheduler.workers = absl::GetFlag(FLAGS_workers);
  options.scheduler.threads_per_worker =
      absl::GetFlag(FLAGS_threads_per_worker);
  options.scheduler.max_queue = absl::GetFlag(FLAGS_max_queue);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes).bytes;
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes).bytes;
  options.max_transport_bytes = absl::GetFlag(FLAGS_max_transport_bytes).bytes;
  options.send_timeout = absl::GetFlag(FLAGS_send_timeout);
  options.max_streams_per_connection =
      absl::GetFlag(FLAGS_max_streams_per_connection);
  options.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes).bytes;
  options.max_response_bytes = absl::GetFlag(FLAGS_max_response_bytes).bytes;
  options.max_request_flops = absl::GetFlag(FLAGS_max_request_flops);
  options.small_request_flops = absl::GetFlag(FLAGS_small_request_flops);
  options.scheduler.run_small_inline =
      absl::GetFlag(FLAGS_inline_small_requests);
  const int batch_max_size = absl::GetFlag(FLAGS_batch_max_size);
  if (batch_max_size < 1 || batch_max_size > 1024) {
    return Fail(
        "--batch_max_size must be in [1, 1024] (1 = no batching), got " +
        std::to_string(batch_max_size));
  }
  options.scheduler.batch_max_size = batch_max_size;
  const int64_t batch_max_delay_us = absl::GetFlag(FLAGS_batch_max_delay_us);
  if (batch_max_delay_us < 0 || batch_max_delay_us > 100000) {
    return Fail("--batch_max_delay_us must be in [0, 100000], got " +
                std::to_string(batch_max_delay_us));
  }
  options.scheduler.batch_max_delay = absl::Microseconds(batch_max_delay_us);
  if (!(options.small_request_flops >= 0)) {
    return Fail("--small_request_flops must be >= 0, got " +
                absl::StrCat(options.small_request_flops));
  }
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.model_repository = absl::GetFlag(FLAGS_model_repository);
  options.skip_bad_models = absl::GetFlag(FLAGS_skip_bad_models);
  options.sessions.budget_bytes = absl::GetFlag(FLAGS_kv_cache_bytes).bytes;
  options.sessions.block_tokens = absl::GetFlag(FLAGS_kv_block_tokens);
  options.sessions.default_ttl = absl::GetFlag(FLAGS_kv_session_ttl);
  options.sessions.max_ttl = absl::GetFlag(FLAGS_kv_max_session_ttl);
  options.sessions.max_sessions = absl::GetFlag(FLAGS_kv_max_sessions);
  options.sessions.share_blocks = absl::GetFlag(FLAGS_kv_share_blocks);
  options.shared_memory.enabled = absl::GetFlag(FLAGS_shared_memory);
  options.shared_memory.prefix = absl::GetFlag(FLAGS_shared_memory_prefix);
  options.shared_memory.max_regions =
      absl::GetFlag(FLAGS_shared_memory_max_regions);
  options.shared_memory.max_bytes =
      absl::GetFlag(FLAGS_shared_memory_max_bytes).bytes;
  options.step_channels = absl::GetFlag(FLAGS_step_channels);
  options.step_channel_spin = absl::GetFlag(FLAGS_step_channel_spin);
  options.step_channel_listen = absl::GetFlag(FLAGS_step_channel_listen);
  options.handoff_to = absl::GetFlag(FLAGS_handoff_to);
  options.handoff_ca_file = absl::GetFlag(FLAGS_handoff_ca);
  options.handoff_timeout = absl::GetFlag(FLAGS_handoff_timeout);
  options.session_snapshot_dir = absl::GetFlag(FLAGS_session_snapshot_dir);
  const std::string eviction = absl::GetFlag(FLAGS_kv_eviction);
  if (eviction == "lru") {
    options.sessions.evict_lru = true;
  } else if (eviction != "none") {
    return Fail("--kv_eviction must be none or lru, got \"" + eviction + "\"");
  }
  const std::string isa = absl::GetFlag(FLAGS_max_isa);
  if (!attnserve::ParseIsa(isa, &options.scheduler.engine.max_isa)) {
    return Fail(
        "--max_isa must be auto, amx, avx512, avx2, sve or neon, got \"" + isa +
        "\"");
  }

  // Block the shutdown signals in every thread (the ones started below inherit
  // the mask) and take them synchronously here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Keep gRPC initialized for the whole process, so that destroying the
  // server is not gRPC's last shutdown: that one joins gRPC's executor
  // threads, one of which may sit in a 10 s poll, and the process would exit
  // up to 10 s after "stopped" (measured; tight against Kubernetes'
  // termination period). Everything is drained by then; the process just
  // exits.
  grpc_init();
  auto server = attnserve::server::AttnServer::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  attnserve::server::WriteLog(LogLevel::kInfo, (*server)->ConfigSummary());

  int signal = 0;
  sigwait(&signals, &signal);
  // Draining first, then the log line: whoever reads "draining" in the log
  // (an operator, a test) finds health already NOT_SERVING.
  (*server)->StartDraining();
  attnserve::server::WriteLog(LogLevel::kInfo,
                              std::string("received ") +
                                  (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                                  ", draining");
  (*server)->Shutdown();
  attnserve::server::WriteLog(LogLevel::kInfo, "stopped");
  return 0;
}
