#ifndef ATTNSERVE_CLIENT_LOAD_DECODE_BENCH_H_
#define ATTNSERVE_CLIENT_LOAD_DECODE_BENCH_H_

// attnctl bench --decode: autoregressive decoding against KV-cache sessions.
// N sequences at once, each a session prefilled with P tokens per layer, then
// S steps; a step is one AttendSessions call per layer with the new token's
// query, key and value (or, with `stream`, one message per layer on the
// sequence's AttendSessionsStream, or with `same_host` through its step
// channel in shared memory). Then the same decoding through stateless
// Attend calls that resend the whole cache every step, for comparison.

#include <cstdint>
#include <ostream>

#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/exit_codes.h"

namespace attnserve::client {

struct DecodeBenchOptions {
  ConnectionOptions connection;
  // Concurrent sequences, each its own session and client thread.
  int sequences = 4;
  // TCP connections per target, or kAutoConnections (the default):
  // ConnectionsFor(sequences). Sequence i keeps channel i % channels, so each
  // session's calls stay on one connection to one target.
  int connections = kAutoConnections;
  // Tokens per layer before the first step, and steps per sequence.
  int64_t prefill = 1024;
  int64_t steps = 32;
  int layers = 1;
  // Query heads, kv heads, head dim of the model.
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  v1::DataType storage_dtype = v1::FLOAT32;
  // Steps of the stateless comparison per sequence (default 8; 0 = none):
  // each resends prefill + step tokens of every layer.
  int64_t stateless_steps = 8;
  // Session steps as messages of one AttendSessionsStream per sequence.
  bool stream = false;
  // Session steps through one same-host step channel per sequence
  // (client/step_channel.h); not with `stream`.
  bool same_host = false;
  // Session steps through one TCP step channel per sequence, to its
  // connection's target; not with `stream` or `same_host`.
  bool tcp_channel = false;
  bool json = false;
};

// Runs both phases and prints the report (a table, or one JSON object):
// tokens/s, per-step p50/p99 latency (a step spans every layer), where a
// session step's time goes (the kernel, the rest of the server, the client
// and transport: from the responses' Timing), request bytes per step and the
// sessions' KV bytes. Sessions are closed at the end.
// kExitUsage for bad sizes, kExitRpcFailed when any call fails (the first
// error is printed), else kExitOk.
ExitCode RunDecodeBench(const DecodeBenchOptions& options, std::ostream& out,
                        std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_DECODE_BENCH_H_
