#ifndef ATTNSERVE_CLIENT_LOAD_LOAD_GENERATOR_H_
#define ATTNSERVE_CLIENT_LOAD_LOAD_GENERATOR_H_

// The load generator of attnctl bench: sends one pre-serialized request
// (AttendRequest or ModelRequest) over and over on a pool of channels, closed
// loop (a fixed number of requests outstanding) or open loop (a schedule of
// send times, constant or Poisson), as unary calls or as messages on
// bidirectional streams (Attend/AttendStream, AttendModel/AttendModelStream),
// or an Attend request in pieces (AttendPieces), and tallies every measured
// request.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/connection.h"
#include "client/load/load_tally.h"
#include "client/v2_messages.h"
#include "google/protobuf/message.h"
#include "grpcpp/channel.h"

namespace attnserve::client {

enum class Arrival { kConstant, kPoisson };

// The methods of AttentionService the generator can load, as gRPC paths.
inline constexpr char kAttendMethod[] = "/attnserve.v1.AttentionService/Attend";
inline constexpr char kAttendStreamMethod[] =
    "/attnserve.v1.AttentionService/AttendStream";
inline constexpr char kAttendPiecesMethod[] =
    "/attnserve.v1.AttentionService/AttendPieces";
inline constexpr char kAttendModelMethod[] =
    "/attnserve.v1.AttentionService/AttendModel";
inline constexpr char kAttendModelStreamMethod[] =
    "/attnserve.v1.AttentionService/AttendModelStream";

// The Open Inference Protocol's inference calls (attnctl bench --protocol v2).
inline constexpr char kModelInferMethod[] =
    "/inference.GRPCInferenceService/ModelInfer";
inline constexpr char kModelStreamInferMethod[] =
    "/inference.GRPCInferenceService/ModelStreamInfer";

struct LoadSpec {
  // Closed loop (rate == 0, the default): this many requests outstanding at
  // all times, each answer sending the next. Default 1.
  int concurrency = 1;
  // Open loop: requests per second (> 0), sent at their scheduled times
  // whatever the answers do. Latency is measured from the scheduled time, so
  // a slow server cannot hide its queue (no coordinated omission).
  double rate = 0;
  Arrival arrival = Arrival::kConstant;
  // Open loop: at most this many requests outstanding; a send beyond it waits
  // (and counts as late). Default 1024.
  int max_outstanding = 1024;
  // Messages on `stream_method` instead of unary `method` calls (default
  // off). Closed loop: `concurrency` streams, one message in flight on each.
  // Open loop: one stream per channel, messages round-robin.
  bool stream = false;
  // The unary and the streaming method (default Attend and AttendStream);
  // both take the request's message type and answer AttendResponses (kV2:
  // ModelInferResponses and ModelStreamInferResponses).
  std::string method = kAttendMethod;
  std::string stream_method = kAttendStreamMethod;
  // Unary calls send the request in pieces (wire/attend_call.h), `method`
  // taking a stream of RequestPieces (AttendPieces). Default off.
  bool pieces = false;
  // Requests scheduled during the warm-up are sent but not measured; then
  // the measurement window lasts `duration`. Defaults 1 s and 5 s.
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration duration = absl::Seconds(5);
  // Seeds the Poisson arrivals.
  uint64_t seed = 0;
  // Every OK response's output must hold this many bytes.
  int64_t expected_output_bytes = 0;
  // kV2: `method` answers ModelInferResponses (read as the native answer
  // they mean, client/v2_messages.h; the server's timing is in their
  // "timing.*" parameters), `stream_method` ModelStreamInferResponses (a
  // failed message's error_message "CODE: message" counts under CODE).
  // Default kNative.
  Protocol protocol = Protocol::kNative;
};

// Called about once a second while the level runs, with the time since the
// measurement window opened (negative during the warm-up) and the tally so
// far.
using ProgressFn =
    std::function<void(absl::Duration since_start, const LoadResult& so_far)>;

// Runs one level on `channels` (at least one) with the deadline and token of
// `connection`, and returns what the
// measurement window saw once every measured request has been answered.
// `request` is serialized once; it must be the request type of spec.method
// (AttendRequest, ModelRequest). When `channels` are CreateChannels' (a
// multiple of connection.targets, channel i to target i % targets), unary
// calls take turns over the targets and go to the target's connection with
// the fewest calls in flight; stream lanes are dealt out over the channels in
// order. InvalidArgument for a spec outside its ranges.
absl::StatusOr<LoadResult> RunLoad(
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    const ConnectionOptions& connection,
    const google::protobuf::Message& request, const LoadSpec& spec,
    const ProgressFn& progress);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_LOAD_GENERATOR_H_
