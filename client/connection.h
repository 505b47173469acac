#ifndef ATTNSERVE_CLIENT_CONNECTION_H_
#define ATTNSERVE_CLIENT_CONNECTION_H_

// The connection options every attnctl subcommand shares (targets, deadline,
// TLS, bearer token, message limits) and the channels and call contexts made
// from them. Exit codes are in client/exit_codes.h, status-code names in
// client/rpc_status.h.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/exit_codes.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace attnserve::client {

inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{512} << 20;

struct ConnectionOptions {
  // "host:port" of each server (default {"localhost:50051"}). Commands that
  // make one call use the first; health and info ask every one.
  std::vector<std::string> targets = {"localhost:50051"};
  // Deadline of each call (default 30 s; beyond a year, or inf, means none).
  absl::Duration timeout = absl::Seconds(30);
  // TLS with the system's roots, or with `ca_file` (PEM) when set (default
  // off).
  bool tls = false;
  std::string ca_file;
  // When non-empty, sent as "authorization: Bearer <token>" on every call.
  std::string token;
  // Largest message sent or received (default 512 MiB, at most INT_MAX).
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
};

// Splits "host:port[,host:port...]". InvalidArgument for an empty list or an
// empty entry.
absl::StatusOr<std::vector<std::string>> ParseTargets(absl::string_view list);

// The host part of a target ("host:port", "[v6]:port", "dns:///host:port",
// "ipv4:host:port"): where a TCP step channel connects.
std::string TargetHost(absl::string_view target);

// InvalidArgument (a usage error) for no targets, a timeout <= 0, a message
// limit outside [1, INT_MAX], or a CA file without TLS.
absl::Status ValidateConnectionOptions(const ConnectionOptions& options);

// --connections: how many TCP connections each target gets. kAutoConnections
// asks for ConnectionsFor's choice; an explicit count is 1 to
// kMaxConnections.
inline constexpr int kAutoConnections = 0;
inline constexpr int kMaxConnections = 256;
// What kAutoConnections opens at most: on the 2-core machine of
// docs/benchmarks.md ("Connections per target") one connection per call
// outstanding carried the most, up to 8; beyond, the gain was within the
// noise, and each client's connections cost the server sockets and buffers.
inline constexpr int kMaxAutoConnections = 8;

// "auto" (kAutoConnections) or a count in [1, kMaxConnections];
// InvalidArgument naming --connections otherwise (0, negative, too large, not
// a number).
absl::StatusOr<int> ParseConnections(absl::string_view text);

// The connections per target for `requested` (a count, or kAutoConnections)
// when up to `concurrency` calls are outstanding at once: the count itself,
// or for kAutoConnections min(concurrency, kMaxAutoConnections), at least 1.
// One HTTP/2 connection carries every call's bytes over one TCP stream and
// one server poller; several let large messages overlap
// (docs/operations.md, "Client settings").
int ConnectionsFor(int requested, int concurrency);

// `connections_per_target` channels per target (default 1), each with a TCP
// connection of its own, with the message limits and HTTP/2 settings applied.
// Channel i goes to target i % targets.size(), so consecutive channels take
// turns over the targets. Channels connect lazily: an unreachable server
// shows as UNAVAILABLE on the first call. NotFound or PermissionDenied when
// the CA file cannot be read; InvalidArgument for connections_per_target
// outside [1, kMaxConnections].
absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> CreateChannels(
    const ConnectionOptions& options, int connections_per_target = 1);

// Starts connecting `channel` and waits until it is ready, has failed to
// connect, or `timeout` has passed, so that a timed call that follows does not
// include connection set-up. Returns how long that took. Never fails: a call
// on a channel that did not connect reports the failure itself.
absl::Duration ConnectChannel(grpc::Channel& channel, absl::Duration timeout);

// Sets the call's deadline (now + timeout) and the bearer token on `context`,
// which must be fresh.
void PrepareContext(const ConnectionOptions& options,
                    grpc::ClientContext* context);

// One target's turn in AskEveryTarget.
struct TargetCall {
  size_t index = 0;
  const std::string& name;
  // More than one target: lines name theirs (prefix()).
  bool several = false;
  const std::shared_ptr<grpc::Channel>& channel;
  grpc::ClientContext* context = nullptr;
  // "<name>: " when there are several targets, else empty.
  std::string prefix() const { return several ? name + ": " : std::string(); }
};

// Makes one channel per target and calls `ask` for each in order, with a
// fresh context that PrepareContext has set. Returns kExitOk when every `ask`
// did, else the last code other than kExitOk that one returned;
// kExitFileError, with the message on `err`, when the channels cannot be made
// (an unreadable CA file).
ExitCode AskEveryTarget(
    const ConnectionOptions& options, std::ostream& err,
    absl::FunctionRef<ExitCode(const TargetCall& call)> ask);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CONNECTION_H_
