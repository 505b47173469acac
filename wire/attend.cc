#include "wire/attend.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::wire {
namespace {

absl::StatusOr<CausalAlignment> DecodeAlignment(v1::Alignment alignment) {
  switch (alignment) {
    case v1::ALIGNMENT_UNSPECIFIED:
    case v1::TOP_LEFT:
      return CausalAlignment::kTopLeft;
    case v1::BOTTOM_RIGHT:
      return CausalAlignment::kBottomRight;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "mask.alignment: unknown value ", static_cast<int>(alignment),
          " (expected TOP_LEFT = 1 or BOTTOM_RIGHT = 2)"));
  }
}

absl::StatusOr<TensorView> DecodeExplicitMask(const v1::Tensor& tensor) {
  ASSIGN_OR_RETURN(DType dtype,
                   DTypeFromWire(tensor.dtype(), "mask.explicit_mask.dtype"));
  if (dtype != DType::kBool && dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.explicit_mask.dtype: ", DataTypeName(tensor.dtype()),
                     " is not supported (expected BOOL or FLOAT32)"));
  }
  // Rank above 4 is rejected here; broadcastability needs the attention shape
  // and is the engine's check.
  return ViewAs("mask.explicit_mask", tensor, dtype);
}

absl::StatusOr<BlockSparseSpec> DecodeBlockSparse(
    const v1::BlockSparse& message) {
  BlockSparseSpec spec;
  spec.block_size = message.block_size();
  if (message.has_local_left()) spec.local_left = message.local_left();
  if (message.has_local_right()) spec.local_right = message.local_right();
  spec.stride = message.stride();
  switch (message.stride_pattern()) {
    case v1::STRIDE_PATTERN_UNSPECIFIED:
    case v1::STRIDED:
      spec.stride_pattern = StridePattern::kStrided;
      break;
    case v1::FIXED:
      spec.stride_pattern = StridePattern::kFixed;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("mask.block_sparse.stride_pattern: unknown value ",
                       static_cast<int>(message.stride_pattern()),
                       " (expected STRIDED = 1 or FIXED = 2)"));
  }
  spec.random_blocks = message.random_blocks();
  spec.seed = message.seed();
  spec.global_tokens = absl::MakeConstSpan(message.global_tokens().data(),
                                           message.global_tokens().size());
  if (message.has_block_mask()) {
    ASSIGN_OR_RETURN(const DType dtype,
                     DTypeFromWire(message.block_mask().dtype(),
                                   "mask.block_sparse.block_mask.dtype"));
    if (dtype != DType::kBool) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask.block_sparse.block_mask.dtype: ",
                       DataTypeName(message.block_mask().dtype()),
                       " is not supported (expected BOOL)"));
    }
    ASSIGN_OR_RETURN(spec.block_mask, ViewAs("mask.block_sparse.block_mask",
                                             message.block_mask(), dtype));
  }
  return spec;
}

// Sets inputs->method and its parameters from the request's method oneof
// (unset = softmax). InvalidArgument naming the field (linear.feature_map).
absl::Status DecodeMethod(const v1::AttendRequest& request,
                          AttentionInputs* inputs) {
  switch (request.method_case()) {
    case v1::AttendRequest::METHOD_NOT_SET:
      inputs->method = AttentionMethod::kSoftmax;
      return absl::OkStatus();
    case v1::AttendRequest::kLinear: {
      const v1::LinearAttention& linear = request.linear();
      inputs->method = AttentionMethod::kLinear;
      switch (linear.feature_map()) {
        case v1::ELU_PLUS_ONE:
          inputs->linear.feature_map = FeatureMap::kEluPlusOne;
          break;
        case v1::RELU:
          inputs->linear.feature_map = FeatureMap::kRelu;
          break;
        case v1::FAVOR_PLUS:
          inputs->linear.feature_map = FeatureMap::kFavorPlus;
          break;
        default:
          return absl::InvalidArgumentError(absl::StrCat(
              "linear.feature_map: ",
              linear.feature_map() == v1::FEATURE_MAP_UNSPECIFIED
                  ? std::string("missing")
                  : absl::StrCat("unknown value ",
                                 static_cast<int>(linear.feature_map())),
              " (expected ELU_PLUS_ONE = 1, RELU = 2 or FAVOR_PLUS = 3)"));
      }
      inputs->linear.num_features = linear.num_features();
      inputs->linear.seed = linear.seed();
      return absl::OkStatus();
    }
    case v1::AttendRequest::kLsh: {
      const v1::LshAttention& lsh = request.lsh();
      inputs->method = AttentionMethod::kLsh;
      inputs->lsh.num_hashes = lsh.num_hashes();
      inputs->lsh.num_buckets = lsh.num_buckets();
      inputs->lsh.chunk_size = lsh.chunk_size();
      inputs->lsh.seed = lsh.seed();
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("method: unknown variant");
}

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

// One of query/key/value; `query_dtype` is the query's once known, so key
// and value are held to it.
absl::StatusOr<TensorView> DecodeOperand(absl::string_view name, bool present,
                                         const v1::Tensor& tensor,
                                         Layout layout,
                                         std::optional<DType> query_dtype,
                                         SharedInputs* shared) {
  if (!present) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": missing (expected a FLOAT32, BFLOAT16 or FLOAT16 tensor ",
        AxesOf(name, layout), ")"));
  }
  ASSIGN_OR_RETURN(const DType dtype,
                   FloatDType(name, tensor, query_dtype, "query",
                              "query, key and value must share one dtype"));
  TensorView view;
  if (tensor.has_shared_memory()) {
    if (shared == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          name,
          ".shared_memory: tensors in shared memory cannot be read "
          "here"));
    }
    ASSIGN_OR_RETURN(const absl::string_view bytes,
                     shared->Read(name, tensor, DTypeSize(dtype)));
    ASSIGN_OR_RETURN(view, TensorViewFromBytes(name, bytes.data(), bytes.size(),
                                               dtype, ShapeOf(tensor)));
  } else {
    ASSIGN_OR_RETURN(view, ViewAs(name, tensor, dtype));
  }
  if (view.rank != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".shape: expected rank 4 ", AxesOf(name, layout), ", got rank ",
        view.rank, " (shape ", ShapeString(view.dims()), ")"));
  }
  return view;
}

}  // namespace

absl::StatusOr<MaskSpec> DecodeMask(const v1::Mask& wire_mask) {
  MaskSpec mask;
  mask.causal = wire_mask.causal();
  ASSIGN_OR_RETURN(mask.alignment, DecodeAlignment(wire_mask.alignment()));
  if (wire_mask.has_window_left()) mask.window_left = wire_mask.window_left();
  if (wire_mask.has_window_right()) {
    mask.window_right = wire_mask.window_right();
  }
  mask.sink_tokens = wire_mask.sink_tokens();
  mask.key_lengths = absl::MakeConstSpan(wire_mask.key_lengths().data(),
                                         wire_mask.key_lengths().size());
  if (wire_mask.has_explicit_mask()) {
    ASSIGN_OR_RETURN(mask.explicit_mask,
                     DecodeExplicitMask(wire_mask.explicit_mask()));
  }
  mask.alibi_slopes = absl::MakeConstSpan(wire_mask.alibi_slopes().data(),
                                          wire_mask.alibi_slopes().size());
  if (wire_mask.has_block_sparse()) {
    ASSIGN_OR_RETURN(mask.block_sparse,
                     DecodeBlockSparse(wire_mask.block_sparse()));
  }
  if (wire_mask.has_relative_bias()) {
    mask.relative_bias = DecodeRelativeBias(wire_mask.relative_bias());
  }
  if (wire_mask.has_relative_keys()) {
    ASSIGN_OR_RETURN(
        mask.relative_keys,
        DecodeRelativeKeys(wire_mask.relative_keys(), "mask.relative_keys"));
  }
  return mask;
}

absl::StatusOr<RelativeKeysSpec> DecodeRelativeKeys(
    const v1::RelativeKeys& keys, absl::string_view field) {
  RelativeKeysSpec r;
  ASSIGN_OR_RETURN(r.table,
                   ViewOf(absl::StrCat(field, ".table"), keys.table()));
  r.zero_row = keys.zero_row();
  r.query_bias =
      absl::MakeConstSpan(keys.query_bias().data(), keys.query_bias().size());
  return r;
}

RelativeBiasSpec DecodeRelativeBias(const v1::RelativeBias& wire) {
  RelativeBiasSpec r;
  r.table = absl::MakeConstSpan(wire.table().data(), wire.table().size());
  r.num_buckets = wire.num_buckets();
  r.max_distance = wire.max_distance();
  r.bidirectional = wire.bidirectional();
  return r;
}

absl::StatusOr<DType> DecodeOutputDType(v1::DataType wire, DType fallback) {
  if (wire == v1::DATA_TYPE_UNSPECIFIED) return fallback;
  ASSIGN_OR_RETURN(const DType dtype, DTypeFromWire(wire, "output_dtype"));
  if (dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        "output_dtype: BOOL is not supported (expected FLOAT32, BFLOAT16, "
        "FLOAT16 or unspecified for the inputs' dtype)");
  }
  return dtype;
}

absl::StatusOr<AttendCall> DecodeAttend(const v1::AttendRequest& request,
                                        SharedInputs* shared) {
  AttendCall call;
  AttentionInputs& inputs = call.inputs;
  ASSIGN_OR_RETURN(inputs.layout, DecodeLayout(request.layout()));
  RETURN_IF_ERROR(DecodeMethod(request, &inputs));
  ASSIGN_OR_RETURN(inputs.query,
                   DecodeOperand("query", request.has_query(), request.query(),
                                 inputs.layout, std::nullopt, shared));
  if (inputs.method != AttentionMethod::kLsh) {
    ASSIGN_OR_RETURN(inputs.key,
                     DecodeOperand("key", request.has_key(), request.key(),
                                   inputs.layout, inputs.query.dtype, shared));
  } else if (request.has_key()) {
    return absl::InvalidArgumentError(
        "key: LSH attention shares queries and keys (Reformer's shared-QK); "
        "send no key");
  }
  ASSIGN_OR_RETURN(inputs.value,
                   DecodeOperand("value", request.has_value(), request.value(),
                                 inputs.layout, inputs.query.dtype, shared));
  ASSIGN_OR_RETURN(inputs.mask, DecodeMask(request.mask()));
  if (request.has_scale()) inputs.scale = request.scale();
  if (request.has_softcap()) inputs.softcap = request.softcap();
  inputs.sinks =
      absl::MakeConstSpan(request.sinks().data(), request.sinks().size());
  ASSIGN_OR_RETURN(call.output_dtype, DecodeOutputDType(request.output_dtype(),
                                                        inputs.query.dtype));
  call.return_weights = request.return_weights();
  call.return_weight_stats = request.return_weight_stats();
  if (call.return_weight_stats &&
      request.method_case() != v1::AttendRequest::METHOD_NOT_SET) {
    return absl::InvalidArgumentError(absl::StrCat(
        "return_weight_stats: only softmax attention has weights to "
        "summarize, not ",
        request.has_linear() ? "linear" : "LSH", " attention"));
  }
  if (request.has_output_shared_memory()) {
    call.output_ref = &request.output_shared_memory();
  }
  if (request.has_weights_shared_memory()) {
    if (!call.return_weights) {
      return absl::InvalidArgumentError(
          "weights_shared_memory: set without return_weights");
    }
    call.weights_ref = &request.weights_shared_memory();
  }
  return call;
}

}  // namespace attnserve::wire
