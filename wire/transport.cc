#include "wire/transport.h"

#include <algorithm>
#include <climits>

#include "grpc/grpc.h"

namespace attnserve::wire {
namespace {

int ClampToInt(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>(bytes, 1, INT_MAX));
}

}  // namespace

void ApplyServerTransport(const ServerTransportOptions& options,
                          grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(ClampToInt(options.max_message_bytes));
  // The codec limits the tensor payload to max_response_bytes; the message
  // around it must still fit through gRPC's own limit.
  builder->SetMaxSendMessageSize(
      ClampToInt(std::min<int64_t>(INT_MAX - kResponseEnvelopeBytes,
                                   options.max_response_bytes) +
                 kResponseEnvelopeBytes));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE,
                              kHttp2MaxFrameBytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                              options.stream_lookahead_bytes);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  if (options.keepalive_time > absl::ZeroDuration()) {
    builder->AddChannelArgument(
        GRPC_ARG_KEEPALIVE_TIME_MS,
        ClampToInt(absl::ToInt64Milliseconds(options.keepalive_time)));
    builder->AddChannelArgument(
        GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
        ClampToInt(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // Ping however long no data has been sent: a connection stuck writing
    // sends none.
    builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (options.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                options.max_concurrent_streams);
  }
  if (options.max_connection_age > absl::ZeroDuration()) {
    builder->AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_MS,
        ClampToInt(absl::ToInt64Milliseconds(options.max_connection_age)));
    builder->AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
        static_cast<int>(std::clamp<int64_t>(
            absl::ToInt64Milliseconds(options.max_connection_age_grace), 0,
            INT_MAX)));
  }
}

grpc::ChannelArguments ClientChannelArguments(
    int64_t max_message_bytes, const std::string& connection_key) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(ClampToInt(max_message_bytes));
  args.SetMaxReceiveMessageSize(ClampToInt(max_message_bytes));
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kHttp2MaxFrameBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
              kHttp2StreamLookaheadBytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetString("attnserve.connection", connection_key);
  return args;
}

}  // namespace attnserve::wire
