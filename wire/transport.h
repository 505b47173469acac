#ifndef ATTNSERVE_WIRE_TRANSPORT_H_
#define ATTNSERVE_WIRE_TRANSPORT_H_

// The gRPC transport settings of every attnserve endpoint, in one place: the
// server, the benchmark's echo server, attnctl's channels and the benchmark's
// channels all take them from here (docs/operations.md, "Client settings").

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace attnserve::wire {

// HTTP/2's largest frame, 2^24 - 1 bytes, and a 64 MiB stream window: tensors
// of a few MB otherwise cross loopback in 16 KB frames with many window updates
// (docs/operations.md has the measurements).
inline constexpr int kHttp2MaxFrameBytes = (1 << 24) - 1;
inline constexpr int kHttp2StreamLookaheadBytes = 64 << 20;

// The pieces attnserve's clients cut a request into when it is larger than
// one piece (AttendPieces); a server's --max_message_bytes is at least a
// piece and its envelope.
inline constexpr int64_t kRequestPieceBytes = int64_t{1} << 20;

// Room in a response for everything around its tensors (request id, shapes,
// timing, error text), added to the payload limit to get gRPC's send limit.
inline constexpr int64_t kResponseEnvelopeBytes = 64 * 1024;

struct ServerTransportOptions {
  // Largest message received (at most INT_MAX; larger values are clamped).
  int64_t max_message_bytes = int64_t{256} << 20;
  // The bytes of a stream the server accepts ahead of reading them (the
  // HTTP/2 stream window it offers; the server does not grow it with
  // gRPC's bandwidth-delay probing, so this is what a stream not being read
  // can make it hold).
  int stream_lookahead_bytes = kHttp2StreamLookaheadBytes;
  // Largest response tensor payload; the send limit is this plus
  // kResponseEnvelopeBytes.
  int64_t max_response_bytes = int64_t{256} << 20;
  // When > 0, each connection is closed (GOAWAY) after about this long, with
  // gRPC's ±10 % jitter so that clients do not reconnect in step, and calls in
  // flight get `max_connection_age_grace` to finish. Default 0: never.
  absl::Duration max_connection_age = absl::ZeroDuration();
  absl::Duration max_connection_age_grace = absl::ZeroDuration();
  // When > 0, the calls one connection may have open at once (HTTP/2
  // SETTINGS_MAX_CONCURRENT_STREAMS); a client's further calls wait on its
  // side, sending nothing. Default 0: gRPC's (unbounded).
  int max_concurrent_streams = 0;
  // When > 0, the server pings each connection this often (HTTP/2 PING, also
  // on idle connections) and closes it when a ping is not answered within
  // `keepalive_timeout`: a peer that vanished, or stopped reading so that
  // nothing more can be written to it, loses its connection and its calls
  // end. Default 0: gRPC's (every two hours).
  absl::Duration keepalive_time = absl::ZeroDuration();
  absl::Duration keepalive_timeout = absl::Seconds(20);
};

// Sets the message limits and HTTP/2 settings of `options` on `builder`.
void ApplyServerTransport(const ServerTransportOptions& options,
                          grpc::ServerBuilder* builder);

// Channel arguments for a client: `max_message_bytes` both ways (clamped to
// [1, INT_MAX]) and the HTTP/2 settings above. Channels with equal arguments
// share one subchannel, hence one TCP connection; channels made with different
// `connection_key` values get connections of their own (a local subchannel
// pool and an argument naming the key).
grpc::ChannelArguments ClientChannelArguments(
    int64_t max_message_bytes, const std::string& connection_key);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_TRANSPORT_H_
