#include "server/request_codec.h"

#include <array>
#include <limits>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::server {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The server's shared memory as the wire decoder reads it: every region read
// is pinned in `use` for the call.
class RegistryInputs final : public wire::SharedInputs {
 public:
  RegistryInputs(SharedMemoryRegistry* registry, SharedMemoryUse* use)
      : registry_(registry), use_(use) {}

  absl::StatusOr<absl::string_view> Read(absl::string_view field,
                                         const v1::Tensor& tensor,
                                         size_t element_size) override {
    return use_->Input(field, tensor, element_size, registry_);
  }

 private:
  SharedMemoryRegistry* const registry_;
  SharedMemoryUse* const use_;
};

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

absl::StatusOr<int64_t> CheckResponseBytes(absl::Span<const ResponsePart> parts,
                                           const RequestLimits& limits) {
  int64_t total = 0;
  bool overflows = false;
  for (const ResponsePart& part : parts) {
    ASSIGN_OR_RETURN(const int64_t bytes,
                     DenseBytes(part.name, part.shape, part.dtype));
    overflows = overflows || bytes > kInt64Max - total;
    if (!overflows) total += bytes;
  }
  if (overflows || total > limits.max_response_bytes) {
    // Each part again, for the message (DenseBytes passed for every one).
    std::string listed;
    for (const ResponsePart& part : parts) {
      absl::StrAppend(&listed, listed.empty() ? "" : "; ", part.name, " ",
                      ShapeString(part.shape), " of ", DTypeName(part.dtype),
                      ": ", *DenseBytes(part.name, part.shape, part.dtype),
                      " bytes");
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "response: ", overflows ? "more than 2^63" : absl::StrCat(total),
        " bytes (", listed, ") exceed the limit of ", limits.max_response_bytes,
        " bytes (the server's --max_response_bytes flag)"));
  }
  return total;
}

absl::StatusOr<DecodedRequest> DecodeRequest(
    const v1::AttendRequest& request, const AttentionEngine& engine,
    const RequestLimits& limits, SharedMemoryRegistry* shared_memory) {
  DecodedRequest decoded;
  RegistryInputs shared(shared_memory, &decoded.shared_memory);
  ASSIGN_OR_RETURN(static_cast<wire::AttendCall&>(decoded),
                   wire::DecodeAttend(request, &shared));
  ASSIGN_OR_RETURN(decoded.plan,
                   engine.Validate(decoded.inputs, decoded.return_weights));
  const AttentionShape& shape = decoded.plan.shape;
  absl::InlinedVector<ResponsePart, 4> parts;
  if (decoded.output_ref == nullptr) {
    parts.push_back({"output", shape.output_shape, decoded.output_dtype});
  }
  if (decoded.return_weights && decoded.weights_ref == nullptr) {
    parts.push_back({"weights", shape.weights_shape, DType::kFloat32});
  }
  if (decoded.return_weight_stats) {
    parts.push_back({"entropy", shape.row_stats_shape, DType::kFloat32});
    parts.push_back({"max_weight", shape.row_stats_shape, DType::kFloat32});
  }
  ASSIGN_OR_RETURN(decoded.response_payload_bytes,
                   CheckResponseBytes(parts, limits));
  if (decoded.output_ref != nullptr) {
    ASSIGN_OR_RETURN(decoded.output_data,
                     PlaceOutput("output", *decoded.output_ref,
                                 shape.output_shape, decoded.output_dtype,
                                 shared_memory, &decoded.shared_memory));
  }
  if (decoded.weights_ref != nullptr) {
    ASSIGN_OR_RETURN(
        decoded.weights_data,
        PlaceOutput("weights", *decoded.weights_ref, shape.weights_shape,
                    DType::kFloat32, shared_memory, &decoded.shared_memory));
  }
  // A small request can ask for hours of compute (Lq = Lk = 1e5, D = 1 is 400
  // KB per tensor); the limit keeps one call from holding a worker
  // indefinitely.
  if (shape.flops > limits.max_flops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request: ", shape.flops, " FLOPs of attention exceed the limit of ",
        limits.max_flops, " (the server's --max_request_flops flag)"));
  }
  return decoded;
}

AttentionOutputs PrepareResponse(const DecodedRequest& decoded,
                                 v1::AttendResponse* response) {
  AttentionOutputs outputs;
  outputs.output =
      decoded.output_data != nullptr
          ? PlaceTensor(decoded.output_dtype, decoded.plan.shape.output_shape,
                        *decoded.output_ref, decoded.output_data,
                        response->mutable_output())
          : wire::PrepareTensor(decoded.output_dtype,
                                decoded.plan.shape.output_shape,
                                response->mutable_output());
  if (decoded.return_weights) {
    outputs.weights =
        decoded.weights_data != nullptr
            ? PlaceTensor(DType::kFloat32, decoded.plan.shape.weights_shape,
                          *decoded.weights_ref, decoded.weights_data,
                          response->mutable_weights())
            : wire::PrepareTensor(DType::kFloat32,
                                  decoded.plan.shape.weights_shape,
                                  response->mutable_weights());
  } else {
    response->clear_weights();
  }
  if (decoded.return_weight_stats) {
    outputs.entropy =
        wire::PrepareTensor(DType::kFloat32, decoded.plan.shape.row_stats_shape,
                            response->mutable_entropy());
    outputs.max_weight =
        wire::PrepareTensor(DType::kFloat32, decoded.plan.shape.row_stats_shape,
                            response->mutable_max_weight());
  } else {
    response->clear_entropy();
    response->clear_max_weight();
  }
  response->mutable_timing()->set_flops(decoded.plan.shape.flops);
  return outputs;
}

}  // namespace attnserve::server
