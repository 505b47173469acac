#ifndef ATTNSERVE_WIRE_ATTEND_H_
#define ATTNSERVE_WIRE_ATTEND_H_

// An AttendRequest as the core's call: every field of the message checked
// and turned into AttentionInputs (views into the message's bytes, or into
// shared memory), and what the response asks for. Wire facts only; shapes
// and ranges need the attention shape and are the engine's checks
// (AttentionEngine::Validate), limits are the server's. Used by the server's
// codecs and attnctl's --check.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "core/tensor.h"

namespace attnserve::wire {

// Reads the tensors a request places in shared memory (Tensor.shared_memory).
// The server implements it over its registry.
class SharedInputs {
 public:
  virtual ~SharedInputs() = default;
  // The bytes of `tensor`'s shared-memory reference, read in place;
  // `element_size` is its dtype's. Errors name `field` ("query").
  virtual absl::StatusOr<absl::string_view> Read(absl::string_view field,
                                                 const v1::Tensor& tensor,
                                                 size_t element_size) = 0;
};

// A decoded AttendRequest. Its views borrow from the request message (and
// the shared memory it refers to), which must outlive it.
struct AttendCall {
  AttentionInputs inputs;
  // output_dtype, or the inputs' dtype when unspecified.
  DType output_dtype = DType::kFloat32;
  bool return_weights = false;
  // Each query row's entropy and largest weight (softmax attention only).
  bool return_weight_stats = false;
  // Where the output and the weights go when the request places them in
  // shared memory; null = in the response.
  const v1::SharedMemoryRef* output_ref = nullptr;
  const v1::SharedMemoryRef* weights_ref = nullptr;
};

// Decodes every field of `request`: layout, method, query/key/value (one
// float dtype, rank 4, bytes matching the shape; in the message or, through
// `shared`, in shared memory), mask, scale, output dtype, weights, weight
// statistics and the output references. InvalidArgument naming the field
// ("key.dtype", "mask.alignment", "linear.feature_map", ...); `shared`'s
// errors; when `shared` is null, FailedPrecondition for a tensor in shared
// memory.
absl::StatusOr<AttendCall> DecodeAttend(const v1::AttendRequest& request,
                                        SharedInputs* shared);

// The mask parts of `mask`, as views into it (also a ModelRequest's and a
// session step's). InvalidArgument naming the field (mask.alignment,
// mask.explicit_mask.dtype, mask.block_sparse.stride_pattern, ...).
absl::StatusOr<MaskSpec> DecodeMask(const v1::Mask& mask);

// T5's relative bias of a Mask or a session step, as views into it (the
// engine's CheckRelativeBias checks it).
RelativeBiasSpec DecodeRelativeBias(const v1::RelativeBias& bias);

// Relative position keys of a Mask or a session step, as views into it; its
// fields named under `field` ("mask.relative_keys", "relative_keys"). The
// table's dtype and shape are the engine's CheckRelativeKeys's to check.
absl::StatusOr<RelativeKeysSpec> DecodeRelativeKeys(
    const v1::RelativeKeys& keys, absl::string_view field);

// A response's output dtype: `fallback` for UNSPECIFIED, InvalidArgument
// naming output_dtype for BOOL, INT32 or unknown values.
absl::StatusOr<DType> DecodeOutputDType(v1::DataType wire, DType fallback);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_ATTEND_H_
