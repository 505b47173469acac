#include "server/model_codec.h"

#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "wire/model_request.h"
#include "wire/tensor.h"

namespace attnserve::server {

absl::StatusOr<DecodedModelRequest> DecodeModelRequest(
    const v1::ModelRequest& request, const ModelRegistry& registry,
    const AttentionEngine& validator, const RequestLimits& limits) {
  const std::string hosted =
      registry.models().empty()
          ? std::string(
                "this server hosts no models: start it with "
                "--model_repository")
          : absl::StrCat("this server hosts: ", registry.NameList());
  if (request.model().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: missing (", hosted, ")"));
  }
  DecodedModelRequest decoded;
  decoded.model = registry.Find(request.model());
  if (decoded.model == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "model: \"", request.model(), "\" is not hosted here (", hosted, ")"));
  }
  const model::AttentionLayer& layer = *decoded.model->layer;
  const int64_t d_model = layer.config().d_model;
  model::LayerInputs& inputs = decoded.inputs;
  ASSIGN_OR_RETURN(inputs,
                   wire::DecodeModelInputs(request, &decoded.output_dtype));
  // The layer owns the shape rules of hidden and memory; the positions' wire
  // shape is checked against the sizes it found, and the layer then checks
  // their values.
  ASSIGN_OR_RETURN(decoded.shape, layer.Validate(inputs, validator));
  if (request.has_positions()) {
    RETURN_IF_ERROR(
        wire::DecodePositions(request.positions(), decoded.shape.batch,
                              decoded.shape.q_len, &decoded.positions));
    inputs.positions = decoded.positions;
    ASSIGN_OR_RETURN(decoded.shape, layer.Validate(inputs, validator));
  }

  const model::LayerShape& s = decoded.shape;
  const int64_t output_shape[] = {s.batch, s.q_len, d_model};
  const int64_t weights_shape[] = {s.batch, layer.config().num_heads, s.q_len,
                                   s.k_len};
  absl::InlinedVector<ResponsePart, 2> parts = {
      {"output", output_shape, decoded.output_dtype}};
  if (decoded.inputs.return_weights) {
    parts.push_back({"weights", weights_shape, DType::kFloat32});
  }
  ASSIGN_OR_RETURN(decoded.response_payload_bytes,
                   CheckResponseBytes(parts, limits));
  decoded.working_bytes = layer.WorkingBytes(s);
  decoded.flops = layer.Flops(s);
  if (decoded.flops > limits.max_flops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request: ", decoded.flops, " FLOPs of model ", decoded.model->name,
        " exceed the limit of ", limits.max_flops,
        " (the server's --max_request_flops flag)"));
  }
  return decoded;
}

model::LayerOutputs PrepareModelResponse(const DecodedModelRequest& decoded,
                                         v1::AttendResponse* response) {
  const model::LayerShape& s = decoded.shape;
  const model::ModelConfig& c = decoded.model->layer->config();
  model::LayerOutputs outputs;
  const int64_t output_shape[] = {s.batch, s.q_len, c.d_model};
  outputs.output = wire::PrepareTensor(decoded.output_dtype, output_shape,
                                       response->mutable_output());
  if (decoded.inputs.return_weights) {
    const int64_t weights_shape[] = {s.batch, c.num_heads, s.q_len, s.k_len};
    outputs.weights = wire::PrepareTensor(DType::kFloat32, weights_shape,
                                          response->mutable_weights());
  } else {
    response->clear_weights();
  }
  response->mutable_timing()->set_flops(decoded.flops);
  return outputs;
}

}  // namespace attnserve::server
