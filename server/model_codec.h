#ifndef ATTNSERVE_SERVER_MODEL_CODEC_H_
#define ATTNSERVE_SERVER_MODEL_CODEC_H_

// A ModelRequest for a hosted model: the model looked up, its fields decoded
// (wire/model_request.h: tensor data not copied, except the few int32
// positions, which the wire does not align), the layer's shape rules and the
// server's limits applied; and the layer's outputs → AttendResponse.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "model/attention_layer.h"
#include "server/model_registry.h"
#include "server/request_codec.h"

namespace attnserve::server {

// Borrows from the request message (which must outlive it, unmodified) and
// from its own `positions`: move it, never copy it.
struct DecodedModelRequest {
  const HostedModel* model = nullptr;
  model::LayerInputs inputs;
  model::LayerShape shape;
  DType output_dtype = DType::kFloat32;
  double flops = 0;
  // The response's output and weights bytes, and an upper bound of the
  // layer's f32 working buffers (hidden, memory, q, k, v, attention and
  // output rows).
  int64_t response_payload_bytes = 0;
  int64_t working_bytes = 0;
  std::vector<int32_t> positions;

  DecodedModelRequest() = default;
  DecodedModelRequest(DecodedModelRequest&&) = default;
  DecodedModelRequest& operator=(DecodedModelRequest&&) = default;
  DecodedModelRequest(const DecodedModelRequest&) = delete;
  DecodedModelRequest& operator=(const DecodedModelRequest&) = delete;
};

// InvalidArgument naming the field ("model", "hidden.shape", "positions",
// "mask.key_lengths", ...); NotFound for a model the registry does not hold
// (the message lists the hosted ones); ResourceExhausted beyond the response
// bytes or FLOPs limits. `validator` checks the mask against the attention
// the layer would run.
absl::StatusOr<DecodedModelRequest> DecodeModelRequest(
    const v1::ModelRequest& request, const ModelRegistry& registry,
    const AttentionEngine& validator, const RequestLimits& limits);

// Sets the output [B, Lq, d_model] (and weights [B, Hq, Lq, Lk]) tensors of
// `response`, and its timing.flops, and returns views of the tensors for the
// layer to fill.
model::LayerOutputs PrepareModelResponse(const DecodedModelRequest& decoded,
                                         v1::AttendResponse* response);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_MODEL_CODEC_H_
