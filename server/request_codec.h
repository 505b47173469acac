#ifndef ATTNSERVE_SERVER_REQUEST_CODEC_H_
#define ATTNSERVE_SERVER_REQUEST_CODEC_H_

// Converts between the wire messages and the core's views, in one place.
// Decoding checks every field and makes no copy of tensor data: the views point
// into the request's bytes (the kernels accept any alignment).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "core/tensor.h"
#include "server/shared_memory_codec.h"
#include "server/shm/shared_memory_registry.h"
#include "wire/attend.h"

namespace attnserve::server {

struct RequestLimits {
  // Largest response payload (output + weights bytes) a request may ask for.
  int64_t max_response_bytes = int64_t{256} << 20;
  // Largest FLOP count (AttentionShape::flops, the method's own) a request may
  // ask for; about 10 s on one core at 1e12.
  double max_flops = 1e12;
};

// A request checked field by field (wire::DecodeAttend), planned by the
// engine and held to the limits. Its views borrow from the request message,
// which must outlive it and stay unmodified.
struct DecodedRequest : wire::AttendCall {
  // The call's shape and the kernel that will compute it.
  AttentionPlan plan;
  // Bytes of the output tensor plus, when requested, the weights tensor,
  // that the response message carries (not those written into shared
  // memory).
  int64_t response_payload_bytes = 0;
  // The regions the request refers to, and the mapped bytes the output and
  // the weights go to when the request placed them there (null = in the
  // response).
  SharedMemoryUse shared_memory;
  char* output_data = nullptr;
  char* weights_data = nullptr;
};

// wire::DecodeAttend's errors; the engine's (Validate: shapes, masks, the
// kernel) naming the field ("query.data", "mask.key_lengths", ...) with
// the expected and actual shape or size; ResourceExhausted when the response
// would exceed limits.max_response_bytes or the work limits.max_flops (the
// message names the limit and the flag that raises it). `engine` validates the
// attention semantics (shapes, masks). Tensors and outputs in shared memory
// are resolved against `shared_memory` (SharedMemoryUse's errors; null = the
// server's shared memory is off).
absl::StatusOr<DecodedRequest> DecodeRequest(
    const v1::AttendRequest& request, const AttentionEngine& engine,
    const RequestLimits& limits, SharedMemoryRegistry* shared_memory = nullptr);

// Sets the output (and weights) tensors of `response` — dtype, shape and data
// of the right size (zero-filled by std::string; the kernels overwrite every
// element), or the request's shared-memory reference instead of data — and
// its timing.flops, and returns views of the tensors for the engine to fill.
AttentionOutputs PrepareResponse(const DecodedRequest& decoded,
                                 v1::AttendResponse* response);

// Helpers the model codec (server/model_codec.h) shares.

// One tensor a response carries in its bytes (CheckResponseBytes).
struct ResponsePart {
  absl::string_view name;  // "output", "weights", ...
  absl::Span<const int64_t> shape;
  DType dtype = DType::kFloat32;
};

// The bytes of `parts` (a response's tensors that travel in it: not those
// placed in shared memory); ResourceExhausted naming each part and
// --max_response_bytes when they exceed limits.max_response_bytes.
absl::StatusOr<int64_t> CheckResponseBytes(absl::Span<const ResponsePart> parts,
                                           const RequestLimits& limits);

// Bytes of a dense `dtype` tensor of `shape`; InvalidArgument naming `name`
// when the element count overflows.
absl::StatusOr<int64_t> DenseBytes(absl::string_view name,
                                   absl::Span<const int64_t> shape,
                                   DType dtype);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_REQUEST_CODEC_H_
