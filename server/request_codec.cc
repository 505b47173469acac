#include "server/request_codec.h"

#include <array>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::server {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

absl::StatusOr<Layout> DecodeLayout(v1::Layout layout) {
  switch (layout) {
    case v1::LAYOUT_UNSPECIFIED:
    case v1::BHLD:
      return Layout::kBHLD;
    case v1::BLHD:
      return Layout::kBLHD;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("layout: unknown value ", static_cast<int>(layout),
                       " (expected BHLD = 1 or BLHD = 2)"));
  }
}

// The wire names of the axes, so a rank error tells the caller what to send.
absl::string_view AxesOf(absl::string_view name, Layout layout) {
  const bool bhld = layout == Layout::kBHLD;
  if (name == "query") return bhld ? "[B, Hq, Lq, D]" : "[B, Lq, Hq, D]";
  if (name == "key") return bhld ? "[B, Hkv, Lk, D]" : "[B, Lk, Hkv, D]";
  return bhld ? "[B, Hkv, Lk, Dv]" : "[B, Lk, Hkv, Dv]";
}

// One of query/key/value; `dtype` is the query's once known, so key and value
// are held to it.
absl::StatusOr<TensorView> DecodeOperand(absl::string_view name, bool present,
                                         const v1::Tensor& tensor,
                                         Layout layout,
                                         std::optional<DType> query_dtype,
                                         SharedMemoryRegistry* shared_memory,
                                         SharedMemoryUse* use) {
  if (!present) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": missing (expected a FLOAT32, BFLOAT16 or FLOAT16 tensor ",
        AxesOf(name, layout), ")"));
  }
  ASSIGN_OR_RETURN(
      const DType dtype,
      wire::FloatDType(name, tensor, query_dtype, "query",
                       "query, key and value must share one dtype"));
  TensorView view;
  if (tensor.has_shared_memory()) {
    ASSIGN_OR_RETURN(const absl::string_view bytes,
                     use->Input(name, tensor, DTypeSize(dtype), shared_memory));
    ASSIGN_OR_RETURN(view, TensorViewFromBytes(name, bytes.data(), bytes.size(),
                                               dtype, wire::ShapeOf(tensor)));
  } else {
    ASSIGN_OR_RETURN(view, wire::ViewAs(name, tensor, dtype));
  }
  if (view.rank != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".shape: expected rank 4 ", AxesOf(name, layout), ", got rank ",
        view.rank, " (shape ", ShapeString(view.dims()), ")"));
  }
  return view;
}

// `tensor` as dtype, shape and `ref` (no data); a view of `data` for the
// kernel to write.
MutableTensorView PlaceTensor(DType dtype, absl::Span<const int64_t> shape,
                              const v1::SharedMemoryRef& ref, char* data,
                              v1::Tensor* tensor) {
  tensor->set_dtype(wire::DTypeToWire(dtype));
  tensor->clear_shape();
  for (int64_t d : shape) tensor->add_shape(d);
  tensor->clear_data();
  *tensor->mutable_shared_memory() = ref;
  return MakeMutableTensorView(data, dtype, shape);
}

}  // namespace

// As in TensorViewFromBytes, the product of the nonzero dimensions must fit
// too: an empty tensor's strides are still built from them.
absl::StatusOr<int64_t> DenseBytes(absl::string_view name,
                                   absl::Span<const int64_t> shape,
                                   DType dtype) {
  const int64_t element_size = static_cast<int64_t>(DTypeSize(dtype));
  const int64_t max_elements = kInt64Max / element_size;
  int64_t elements = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (elements > max_elements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": element count of shape ", ShapeString(shape),
                       " of ", DTypeName(dtype), " overflows"));
    }
    elements *= d;
  }
  return empty ? 0 : elements * element_size;
}

namespace {

// The span of a registered region that `ref` gives the `name` result
// ("output" or "weights") of `shape` and `dtype`.
absl::StatusOr<char*> PlaceOutput(absl::string_view name,
                                  const v1::SharedMemoryRef& ref,
                                  absl::Span<const int64_t> shape, DType dtype,
                                  SharedMemoryRegistry* shared_memory,
                                  SharedMemoryUse* use) {
  ASSIGN_OR_RETURN(const int64_t bytes, DenseBytes(name, shape, dtype));
  return use->Output(absl::StrCat(name, "_shared_memory"), ref, bytes,
                     DTypeSize(dtype), shared_memory);
}

}  // namespace

absl::StatusOr<DType> DecodeOutputDType(v1::DataType wire, DType fallback) {
  if (wire == v1::DATA_TYPE_UNSPECIFIED) return fallback;
  ASSIGN_OR_RETURN(const DType dtype,
                   wire::DTypeFromWire(wire, "output_dtype"));
  if (dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        "output_dtype: BOOL is not supported (expected FLOAT32, BFLOAT16, "
        "FLOAT16 or unspecified for the inputs' dtype)");
  }
  return dtype;
}

absl::StatusOr<int64_t> CheckResponseBytes(
    absl::Span<const int64_t> output_shape, DType output_dtype, bool weights,
    absl::Span<const int64_t> weights_shape, const RequestLimits& limits,
    bool output) {
  int64_t output_bytes = 0;
  if (output) {
    ASSIGN_OR_RETURN(output_bytes,
                     DenseBytes("output", output_shape, output_dtype));
  }
  int64_t weights_bytes = 0;
  if (weights) {
    ASSIGN_OR_RETURN(weights_bytes,
                     DenseBytes("weights", weights_shape, DType::kFloat32));
  }
  const bool sum_overflows = weights_bytes > kInt64Max - output_bytes;
  if (sum_overflows ||
      output_bytes + weights_bytes > limits.max_response_bytes) {
    const std::string total = sum_overflows
                                  ? "more than 2^63"
                                  : absl::StrCat(output_bytes + weights_bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "response: ", total, " bytes (",
        output ? absl::StrCat("output ", ShapeString(output_shape), " of ",
                              DTypeName(output_dtype), ": ", output_bytes,
                              " bytes")
               : "",
        weights ? absl::StrCat(output ? "; " : "", "weights ",
                               ShapeString(weights_shape),
                               " of f32: ", weights_bytes, " bytes")
                : "",
        ") exceed the limit of ", limits.max_response_bytes,
        " bytes (the server's --max_response_bytes flag)"));
  }
  return output_bytes + weights_bytes;
}

absl::StatusOr<DecodedRequest> DecodeRequest(
    const v1::AttendRequest& request, const AttentionEngine& engine,
    const RequestLimits& limits, SharedMemoryRegistry* shared_memory) {
  DecodedRequest decoded;
  AttentionInputs& inputs = decoded.inputs;
  ASSIGN_OR_RETURN(inputs.layout, DecodeLayout(request.layout()));
  RETURN_IF_ERROR(wire::DecodeMethod(request, &inputs));
  ASSIGN_OR_RETURN(inputs.query,
                   DecodeOperand("query", request.has_query(), request.query(),
                                 inputs.layout, std::nullopt, shared_memory,
                                 &decoded.shared_memory));
  if (inputs.method != AttentionMethod::kLsh) {
    ASSIGN_OR_RETURN(inputs.key,
                     DecodeOperand("key", request.has_key(), request.key(),
                                   inputs.layout, inputs.query.dtype,
                                   shared_memory, &decoded.shared_memory));
  } else if (request.has_key()) {
    return absl::InvalidArgumentError(
        "key: LSH attention shares queries and keys (Reformer's shared-QK); "
        "send no key");
  }
  ASSIGN_OR_RETURN(inputs.value,
                   DecodeOperand("value", request.has_value(), request.value(),
                                 inputs.layout, inputs.query.dtype,
                                 shared_memory, &decoded.shared_memory));

  ASSIGN_OR_RETURN(inputs.mask, wire::DecodeMask(request.mask()));
  if (request.has_scale()) inputs.scale = request.scale();
  ASSIGN_OR_RETURN(
      decoded.output_dtype,
      DecodeOutputDType(request.output_dtype(), inputs.query.dtype));
  decoded.return_weights = request.return_weights();
  if (request.has_weights_shared_memory() && !decoded.return_weights) {
    return absl::InvalidArgumentError(
        "weights_shared_memory: set without return_weights");
  }

  ASSIGN_OR_RETURN(decoded.shape, engine.Validate(inputs));
  const bool output_shm = request.has_output_shared_memory();
  const bool weights_shm = request.has_weights_shared_memory();
  ASSIGN_OR_RETURN(
      decoded.response_payload_bytes,
      CheckResponseBytes(decoded.shape.output_shape, decoded.output_dtype,
                         decoded.return_weights && !weights_shm,
                         decoded.shape.weights_shape, limits, !output_shm));
  if (output_shm) {
    decoded.output_ref = &request.output_shared_memory();
    ASSIGN_OR_RETURN(
        decoded.output_data,
        PlaceOutput("output", *decoded.output_ref, decoded.shape.output_shape,
                    decoded.output_dtype, shared_memory,
                    &decoded.shared_memory));
  }
  if (weights_shm) {
    decoded.weights_ref = &request.weights_shared_memory();
    ASSIGN_OR_RETURN(decoded.weights_data,
                     PlaceOutput("weights", *decoded.weights_ref,
                                 decoded.shape.weights_shape, DType::kFloat32,
                                 shared_memory, &decoded.shared_memory));
  }
  // A small request can ask for hours of compute (Lq = Lk = 1e5, D = 1 is 400
  // KB per tensor); the limit keeps one call from holding a worker
  // indefinitely.
  if (decoded.shape.flops > limits.max_flops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request: ", decoded.shape.flops,
        " FLOPs of attention exceed the limit of ", limits.max_flops,
        " (the server's --max_request_flops flag)"));
  }
  return decoded;
}

AttentionOutputs PrepareResponse(const DecodedRequest& decoded,
                                 v1::AttendResponse* response) {
  AttentionOutputs outputs;
  outputs.output =
      decoded.output_data != nullptr
          ? PlaceTensor(decoded.output_dtype, decoded.shape.output_shape,
                        *decoded.output_ref, decoded.output_data,
                        response->mutable_output())
          : wire::PrepareTensor(decoded.output_dtype,
                                decoded.shape.output_shape,
                                response->mutable_output());
  if (decoded.return_weights) {
    outputs.weights =
        decoded.weights_data != nullptr
            ? PlaceTensor(DType::kFloat32, decoded.shape.weights_shape,
                          *decoded.weights_ref, decoded.weights_data,
                          response->mutable_weights())
            : wire::PrepareTensor(DType::kFloat32, decoded.shape.weights_shape,
                                  response->mutable_weights());
  } else {
    response->clear_weights();
  }
  response->mutable_timing()->set_flops(decoded.shape.flops);
  return outputs;
}

}  // namespace attnserve::server
