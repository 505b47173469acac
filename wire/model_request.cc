#include "wire/model_request.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::wire {
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
                   FloatDType(name, tensor, hidden_dtype, "hidden"));
  return ViewAs(name, tensor, dtype);
}

}  // namespace

absl::StatusOr<model::LayerInputs> DecodeModelInputs(
    const v1::ModelRequest& request, DType* output_dtype) {
  model::LayerInputs inputs;
  ASSIGN_OR_RETURN(inputs.hidden, DecodeStates("hidden", request.has_hidden(),
                                               request.hidden(), std::nullopt));
  if (request.has_memory()) {
    ASSIGN_OR_RETURN(
        inputs.memory,
        DecodeStates("memory", true, request.memory(), inputs.hidden.dtype));
  }
  ASSIGN_OR_RETURN(inputs.mask, DecodeMask(request.mask()));
  ASSIGN_OR_RETURN(*output_dtype, DecodeOutputDType(request.output_dtype(),
                                                    inputs.hidden.dtype));
  inputs.return_weights = request.return_weights();
  return inputs;
}

absl::Status DecodePositions(const v1::Tensor& tensor, int64_t batch,
                             int64_t q_len, std::vector<int32_t>* positions) {
  if (tensor.dtype() != v1::INT32) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions.dtype: ", DataTypeName(tensor.dtype()),
                     " is not supported (expected INT32)"));
  }
  const absl::Span<const int64_t> shape = ShapeOf(tensor);
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

}  // namespace attnserve::wire
