#ifndef ATTNSERVE_WIRE_MODEL_REQUEST_H_
#define ATTNSERVE_WIRE_MODEL_REQUEST_H_

// A ModelRequest's fields as the hosted layer's inputs
// (model/attention_layer.h): hidden and memory states, the mask, whether
// weights are wanted, the output dtype and the positions. Views borrow from the
// message. The layer owns the shape rules (AttentionLayer::Validate), so only
// the wire's facts are checked here; the server looks the model up and applies
// its limits (server/model_codec.h).

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "core/tensor.h"
#include "model/attention_layer.h"

namespace attnserve::wire {

// hidden, memory (when present), mask and return_weights; positions are left
// empty (DecodePositions, once the layer knows B and Lq). `output_dtype`
// receives the output's dtype (unspecified: the hidden's). InvalidArgument
// naming the field for a missing hidden, a non-float or mismatched dtype,
// data that does not match its shape, or a malformed mask.
absl::StatusOr<model::LayerInputs> DecodeModelInputs(
    const v1::ModelRequest& request, DType* output_dtype);

// The request's positions [B, Lq] INT32 into `positions` (copied: the wire's
// bytes need not be aligned). InvalidArgument naming "positions.dtype",
// "positions.shape" or "positions.data".
absl::Status DecodePositions(const v1::Tensor& tensor, int64_t batch,
                             int64_t q_len, std::vector<int32_t>* positions);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_MODEL_REQUEST_H_
