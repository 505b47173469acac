#ifndef ATTNSERVE_CLIENT_SESSION_H_
#define ATTNSERVE_CLIENT_SESSION_H_

// attnctl session: the SessionService calls one at a time — create, append
// (random keys and values, streamed in chunks when asked), step (a decode step
// or chunked prefill over one or many sessions), info, fork, truncate, close,
// export (snapshots into a file) and import (from one).
// Every call carries the routing header a load balancer keeps sessions on one
// replica by (deploy/haproxy/haproxy.cfg).

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "attnserve/v1/sessions.pb.h"
#include "client/connection.h"
#include "client/exit_codes.h"

namespace attnserve::client {

// The metadata header HAProxy hashes to route a session's calls.
inline constexpr char kSessionRouteHeader[] = "attnserve-session";

// PrepareContext, plus the routing header set to `route_key` (none when it is
// empty). `context` must be fresh.
void PrepareSessionContext(const ConnectionOptions& options,
                           const std::string& route_key,
                           grpc::ClientContext* context);

struct SessionCommand {
  ConnectionOptions connection;
  // create, append, step, info, fork, truncate, close, export or import.
  std::string action;
  // The session(s); step takes several (one call over all of them). Empty for
  // create = a server-chosen id.
  std::vector<std::string> sessions;
  // The routing header's value; empty (default) = the first session's id.
  std::string route_key;

  // create: the cache's shape and idle TTL (zero = the server's).
  int layers = 1;
  int kv_heads = 8;
  int head_dim = 64;
  int value_dim = 0;  // 0 = head_dim
  v1::DataType storage_dtype = v1::FLOAT32;
  int64_t max_tokens = 8192;
  // A sink + window session when window_tokens > 0.
  int64_t window_tokens = 0;
  int64_t sink_tokens = 0;
  absl::Duration ttl = absl::ZeroDuration();

  // append and step: the layer; append: how many random tokens, at which
  // position (unset = at the end, unchecked), in messages of chunk_tokens
  // (0 = one message; fewer than `tokens` = AppendKvStream).
  int layer = 0;
  int64_t tokens = 16;
  std::optional<int64_t> position;
  int64_t chunk_tokens = 0;
  v1::DataType input_dtype = v1::FLOAT32;
  uint64_t seed = 0;

  // step: query heads, new queries per session, whether lnew new tokens are
  // appended with them, and the mask parts.
  int64_t heads = 8;
  int64_t lnew = 1;
  bool append = true;
  bool causal = true;
  std::optional<int64_t> window_left;
  std::optional<float> scale;
  bool return_weights = false;

  // fork: the child's id (empty = the server's); truncate: `tokens`.
  std::string child;

  // export: the sessions (none = every live one) into `file`, ending them on
  // the server when `remove`; import: the sessions of `file`.
  std::string file;
  bool remove = false;
};

// Runs the command and prints what the server answered, one "key: value"
// line each, to `out`; errors to `err`. kExitUsage for a bad command or
// missing session, kExitRpcFailed when a call fails (the server's code and
// message), else kExitOk.
ExitCode RunSessionCommand(const SessionCommand& command, std::ostream& out,
                           std::ostream& err);

// "session_id: s-1\nlayer_tokens: [16, 0]\n..." as attnctl prints it.
std::string FormatSessionInfo(const v1::SessionInfo& info);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_SESSION_H_
