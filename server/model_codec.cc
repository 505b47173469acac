#include "server/model_codec.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::server {
namespace {

// hidden or memory, as a view of its own dtype and shape (memory: in the
// hidden's dtype). Ranks and d_model are the layer's rules
// (AttentionLayer::Validate), not checked twice here.
absl::StatusOr<TensorView> DecodeStates(absl::string_view name, bool present,
                                        const v1::Tensor& tensor,
                                        std::optional<DType> hidden_dtype) {
  if (!present) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": missing (expected a FLOAT32, BFLOAT16 or FLOAT16 tensor [B, ",
        name == "hidden" ? "Lq" : "Lk", ", d_model])"));
  }
  ASSIGN_OR_RETURN(const DType dtype,
                   wire::FloatDType(name, tensor, hidden_dtype, "hidden"));
  return wire::ViewAs(name, tensor, dtype);
}

absl::Status DecodePositions(const v1::Tensor& tensor, int64_t batch,
                             int64_t q_len, std::vector<int32_t>* positions) {
  if (tensor.dtype() != v1::INT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.dtype: ", wire::DataTypeName(tensor.dtype()),
                     " is not supported (expected INT32)"));
  }
  const absl::Span<const int64_t> shape = wire::ShapeOf(tensor);
  if (shape.size() != 2 || shape[0] != batch || shape[1] != q_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.shape: expected [B, Lq] = [", batch, ", ",
                     q_len, "], got ", ShapeString(shape)));
  }
  const size_t count = static_cast<size_t>(batch * q_len);
  if (tensor.data().size() != count * sizeof(int32_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "positions.data: ", tensor.data().size(), " bytes, expected ",
        count * sizeof(int32_t), " (", count, " INT32 values)"));
  }
  positions->resize(count);
  // Copied: the wire's bytes need not be aligned for int32.
  if (count > 0)
    std::memcpy(positions->data(), tensor.data().data(),
                count * sizeof(int32_t));
  return absl::OkStatus();
}

}  // namespace

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
  ASSIGN_OR_RETURN(inputs.hidden, DecodeStates("hidden", request.has_hidden(),
                                               request.hidden(), std::nullopt));
  if (request.has_memory()) {
    ASSIGN_OR_RETURN(
        inputs.memory,
        DecodeStates("memory", true, request.memory(), inputs.hidden.dtype));
  }
  ASSIGN_OR_RETURN(inputs.mask, wire::DecodeMask(request.mask()));
  ASSIGN_OR_RETURN(
      decoded.output_dtype,
      wire::DecodeOutputDType(request.output_dtype(), inputs.hidden.dtype));
  decoded.return_weights = request.return_weights();
  inputs.return_weights = decoded.return_weights;
  // The layer owns the shape rules of hidden and memory; the positions' wire
  // shape is checked against the sizes it found, and the layer then checks
  // their values.
  ASSIGN_OR_RETURN(decoded.shape, layer.Validate(inputs, validator));
  if (request.has_positions()) {
    RETURN_IF_ERROR(DecodePositions(request.positions(), decoded.shape.batch,
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
  if (decoded.return_weights) {
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
  if (decoded.return_weights) {
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
