#ifndef ATTNSERVE_SERVER_REQUEST_KIND_H_
#define ATTNSERVE_SERVER_REQUEST_KIND_H_

// What differs between the two kinds of attention request, Attend (tensors in
// the request) and AttendModel (a hosted layer): how a request is decoded, how
// it is computed, and how it is counted. AttentionService is written once over
// these traits; each is a struct of static members:
//
//   using Request, Decoded;             the wire message and its checked form
//   kName, kUnaryMethod, kStreamMethod  log name and metric labels
//   Decode(request, context)            checks every field; no computing
//   Compute(decoded, engine, response)  fills the response; on a worker
//   RecordCompute(decoded, seconds, metrics)  the compute metrics
//   ModelOf(request, models)            the hosted model to count it under
//   HeldBytes(decoded)                  what it holds beyond its request (the
//                                       response, working buffers): the
//                                       memory budget's count
//   IsSmall(decoded, threshold)         whether it takes the small-request
//                                       path (one thread, maybe inline)

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "server/metrics.h"
#include "server/model_codec.h"
#include "server/model_registry.h"
#include "server/request_codec.h"

namespace attnserve::server {

// What decoding may consult. The pointers must outlive the decoded request.
struct DecodeContext {
  // Checks the attention semantics; computes nothing.
  const AttentionEngine* validator = nullptr;
  const RequestLimits* limits = nullptr;
  // The hosted models; null = none.
  const ModelRegistry* models = nullptr;
  // Regions that Attend tensors may refer to; null = shared memory off.
  SharedMemoryRegistry* shared_memory = nullptr;
};

struct AttendKind {
  using Request = v1::AttendRequest;
  using Decoded = DecodedRequest;
  static constexpr const char* kName = "Attend";
  static constexpr Method kUnaryMethod = Method::kAttend;
  static constexpr Method kStreamMethod = Method::kAttendStream;

  // DecodeRequest's errors.
  static absl::StatusOr<Decoded> Decode(const Request& request,
                                        const DecodeContext& context);
  // Sets the response's tensors and runs the kernel into them; the engine's
  // errors, and FailedPrecondition when a shared-memory region it used shrank
  // meanwhile.
  static absl::Status Compute(const Decoded& decoded, AttentionEngine& engine,
                              v1::AttendResponse* response);
  // attnserve_compute_duration_seconds{kernel} and the FLOPs.
  static void RecordCompute(const Decoded& decoded, double seconds,
                            Metrics& metrics);
  // Always null: Attend requests belong to no model.
  static const HostedModel* ModelOf(const Request& request,
                                    const ModelRegistry* models);
  // The response's payload (the kernels' scratch is per worker, bounded).
  // Tensors in shared memory are the client's memory and are not counted.
  static int64_t HeldBytes(const Decoded& decoded) {
    return decoded.response_payload_bytes;
  }
  // Softmax attention of fewer FLOPs than `threshold`: the engine runs it on
  // the calling thread with no OpenMP team (EngineOptions::serial_below_flops),
  // so it may run on any thread. Linear and LSH attention keep their team.
  static bool IsSmall(const Decoded& decoded, double threshold) {
    return decoded.inputs.method == AttentionMethod::kSoftmax &&
           decoded.plan.shape.flops < threshold;
  }
};

struct ModelKind {
  using Request = v1::ModelRequest;
  using Decoded = DecodedModelRequest;
  static constexpr const char* kName = "AttendModel";
  static constexpr Method kUnaryMethod = Method::kAttendModel;
  static constexpr Method kStreamMethod = Method::kAttendModelStream;

  // DecodeModelRequest's errors; NotFound pointing at --model_repository when
  // the server hosts no models at all.
  static absl::StatusOr<Decoded> Decode(const Request& request,
                                        const DecodeContext& context);
  // Sets the response's tensors and runs the hosted layer into them.
  static absl::Status Compute(const Decoded& decoded, AttentionEngine& engine,
                              v1::AttendResponse* response);
  // attnserve_model_compute_duration_seconds{model} and the FLOPs.
  static void RecordCompute(const Decoded& decoded, double seconds,
                            Metrics& metrics);
  // The model named in the request; null when it is not hosted.
  static const HostedModel* ModelOf(const Request& request,
                                    const ModelRegistry* models);
  // The response's payload and the layer's working buffers.
  static int64_t HeldBytes(const Decoded& decoded) {
    return decoded.response_payload_bytes + decoded.working_bytes;
  }
  // Never: the layer's projections run on an OpenMP team of the engine's
  // threads, which must not be started on a gRPC thread.
  static bool IsSmall(const Decoded& decoded, double threshold) {
    return false;
  }
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_REQUEST_KIND_H_
