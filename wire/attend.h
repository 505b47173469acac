#ifndef ATTNSERVE_WIRE_ATTEND_H_
#define ATTNSERVE_WIRE_ATTEND_H_

// The parts of an AttendRequest beyond its tensors, as the core's types: the
// mask (also a ModelRequest's) and the method (softmax, linear, LSH). Wire
// facts only; shapes and ranges need the attention shape and are the
// engine's checks. Used by the server's codecs and attnctl's --check.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"

namespace attnserve::wire {

// The mask parts of `mask`, as views into it. InvalidArgument naming the
// field (mask.alignment, mask.explicit_mask.dtype,
// mask.block_sparse.stride_pattern, ...).
absl::StatusOr<MaskSpec> DecodeMask(const v1::Mask& mask);

// Sets inputs->method and its parameters from the request's method oneof
// (unset = softmax). InvalidArgument naming the field (linear.feature_map).
absl::Status DecodeMethod(const v1::AttendRequest& request,
                          AttentionInputs* inputs);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_ATTEND_H_
