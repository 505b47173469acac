#include "client/request_builder.h"

#include <array>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/random.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "core/convert.h"
#include "core/status_macros.h"

namespace attnserve::client {
namespace {

using base::SplitMix64Hash;

// a * b, or -1 when either is negative or the product overflows.
int64_t CheckedMul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return -1;
  return a * b;
}

using Shape = std::array<int64_t, 4>;

int64_t Product(absl::Span<const int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n = CheckedMul(n, d);
  return n;
}

void SetRandom(v1::DataType dtype, absl::Span<const int64_t> shape,
               uint64_t seed, uint64_t stream, v1::Tensor* tensor) {
  *tensor = RandomTensor(dtype, shape, seed, stream);
}

// InvalidArgument naming the flag of the first negative value.
absl::Status CheckNotNegative(
    std::initializer_list<std::pair<const char*, int64_t>> flags) {
  for (const auto& [flag, value] : flags) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be >= 0, got ", value));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument unless `dtype` is one of the float dtypes.
absl::Status CheckFloatDType(absl::string_view what, v1::DataType dtype) {
  if (dtype == v1::FLOAT32 || dtype == v1::BFLOAT16 || dtype == v1::FLOAT16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " must be f32, bf16 or f16, not ", wire::ShortDataTypeName(dtype)));
}

}  // namespace

RandomInputs ResolveDefaults(const RandomInputs& inputs) {
  RandomInputs r = inputs;
  if (r.kv_heads == 0) r.kv_heads = r.heads;
  if (r.k_len == 0) r.k_len = r.q_len;
  if (r.value_dim == 0) r.value_dim = r.head_dim;
  return r;
}

int64_t RandomInputBytes(const RandomInputs& inputs) {
  const RandomInputs r = ResolveDefaults(inputs);
  const int64_t q = Product({r.batch, r.heads, r.q_len, r.head_dim});
  const int64_t k = Product({r.batch, r.kv_heads, r.k_len, r.head_dim});
  const int64_t v = Product({r.batch, r.kv_heads, r.k_len, r.value_dim});
  if (q < 0 || k < 0 || v < 0) return -1;
  const int64_t elements = q + k;
  if (elements < 0 || elements + v < 0) return -1;
  return CheckedMul(elements + v, wire::ElementSize(r.dtype));
}

absl::Status ValidateRandomInputs(const RandomInputs& inputs,
                                  int64_t max_bytes) {
  RETURN_IF_ERROR(CheckNotNegative({{"batch", inputs.batch},
                                    {"heads", inputs.heads},
                                    {"kv_heads", inputs.kv_heads},
                                    {"lq", inputs.q_len},
                                    {"lk", inputs.k_len},
                                    {"dim", inputs.head_dim},
                                    {"dv", inputs.value_dim}}));
  RETURN_IF_ERROR(CheckFloatDType("random inputs", inputs.dtype));
  const int64_t bytes = RandomInputBytes(inputs);
  if (bytes < 0 || bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query, key and value would take ",
        bytes < 0 ? std::string("more than 2^63") : absl::StrCat(bytes),
        " bytes, above --max_message_bytes = ", max_bytes));
  }
  return absl::OkStatus();
}

void FillRandomInputs(const RandomInputs& inputs, v1::Layout layout,
                      v1::AttendRequest* request) {
  const RandomInputs r = ResolveDefaults(inputs);
  const bool bhld = layout != v1::BLHD;
  auto dims = [&](int64_t heads, int64_t len, int64_t dim) {
    return bhld ? Shape{r.batch, heads, len, dim}
                : Shape{r.batch, len, heads, dim};
  };
  SetRandom(r.dtype, dims(r.heads, r.q_len, r.head_dim), r.seed, 0,
            request->mutable_query());
  SetRandom(r.dtype, dims(r.kv_heads, r.k_len, r.head_dim), r.seed, 1,
            request->mutable_key());
  SetRandom(r.dtype, dims(r.kv_heads, r.k_len, r.value_dim), r.seed, 2,
            request->mutable_value());
}

void ApplyCallOptions(const CallOptions& options, v1::AttendRequest* request) {
  request->set_layout(options.layout);
  ApplyMaskOptions(options, request->mutable_mask());
  if (options.scale) {
    request->set_scale(*options.scale);
  } else {
    request->clear_scale();
  }
  request->set_return_weights(options.return_weights);
  request->set_return_weight_stats(options.return_weight_stats);
  request->set_output_dtype(options.output_dtype);
  request->clear_method();
  if (options.linear) *request->mutable_linear() = *options.linear;
  if (options.lsh) {
    *request->mutable_lsh() = *options.lsh;
    request->clear_key();
  }
}

void ApplyMaskOptions(const CallOptions& options, v1::Mask* mask) {
  mask->set_causal(options.causal);
  mask->set_alignment(options.alignment);
  if (options.window_left) {
    mask->set_window_left(*options.window_left);
  } else {
    mask->clear_window_left();
  }
  if (options.window_right) {
    mask->set_window_right(*options.window_right);
  } else {
    mask->clear_window_right();
  }
  mask->set_sink_tokens(options.sink_tokens);
  mask->mutable_key_lengths()->Assign(options.key_lengths.begin(),
                                      options.key_lengths.end());
  if (options.block_sparse) {
    *mask->mutable_block_sparse() = *options.block_sparse;
  } else {
    mask->clear_block_sparse();
  }
}

int64_t ModelInputBytes(const RandomInputs& inputs, const ModelSpec& model,
                        int64_t d_model) {
  const int64_t rows =
      inputs.q_len < 0 || model.memory_len < 0 ||
              model.memory_len >
                  std::numeric_limits<int64_t>::max() - inputs.q_len
          ? -1
          : inputs.q_len + model.memory_len;
  return CheckedMul(Product({inputs.batch, rows, d_model}),
                    wire::ElementSize(inputs.dtype));
}

absl::Status ValidateModelSpec(const RandomInputs& inputs,
                               const ModelSpec& model) {
  RETURN_IF_ERROR(CheckNotNegative({{"batch", inputs.batch},
                                    {"lq", inputs.q_len},
                                    {"memory_len", model.memory_len}}));
  RETURN_IF_ERROR(CheckFloatDType("hidden states", inputs.dtype));
  if (model.position_offset) {
    const int64_t offset = *model.position_offset;
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (offset < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--position_offset must be >= 0 (or -1 for none), got ", offset));
    }
    if (inputs.q_len > 0 && offset > kMax - (inputs.q_len - 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--position_offset ", offset, " with --lq ", inputs.q_len,
          " gives positions beyond ", kMax, " (INT32)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateModelInputBytes(const RandomInputs& inputs,
                                     const ModelSpec& model, int64_t d_model,
                                     int64_t max_bytes) {
  const int64_t bytes = ModelInputBytes(inputs, model, d_model);
  if (bytes < 0 || bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        model.memory_len > 0 ? "hidden states and memory" : "hidden states",
        " would take ",
        bytes < 0 ? std::string("more than 2^63") : absl::StrCat(bytes),
        " bytes, above --max_message_bytes = ", max_bytes));
  }
  return absl::OkStatus();
}

void FillModelRequest(const RandomInputs& inputs, const ModelSpec& model,
                      int64_t d_model, const CallOptions& call,
                      v1::ModelRequest* request) {
  request->set_model(model.name);
  SetRandom(inputs.dtype, {inputs.batch, inputs.q_len, d_model}, inputs.seed, 0,
            request->mutable_hidden());
  if (model.memory_len > 0) {
    SetRandom(inputs.dtype, {inputs.batch, model.memory_len, d_model},
              inputs.seed, 1, request->mutable_memory());
  } else {
    request->clear_memory();
  }
  if (model.position_offset) {
    v1::Tensor* positions = request->mutable_positions();
    positions->set_dtype(v1::INT32);
    positions->clear_shape();
    positions->add_shape(inputs.batch);
    positions->add_shape(inputs.q_len);
    std::string& data = *positions->mutable_data();
    data.resize(static_cast<size_t>(inputs.batch * inputs.q_len) *
                sizeof(int32_t));
    for (int64_t b = 0; b < inputs.batch; ++b) {
      for (int64_t i = 0; i < inputs.q_len; ++i) {
        const auto value = static_cast<uint32_t>(*model.position_offset + i);
        // Little-endian, as the wire says, whatever the host's order.
        char* p = &data[static_cast<size_t>((b * inputs.q_len + i) * 4)];
        for (int byte = 0; byte < 4; ++byte) {
          p[byte] = static_cast<char>((value >> (8 * byte)) & 0xff);
        }
      }
    }
  } else {
    request->clear_positions();
  }
  ApplyMaskOptions(call, request->mutable_mask());
  request->set_return_weights(call.return_weights);
  request->set_output_dtype(call.output_dtype);
}

std::string UniformBytes(v1::DataType dtype, int64_t count, uint64_t seed,
                         uint64_t stream) {
  const int size = wire::ElementSize(dtype);
  std::string bytes(static_cast<size_t>(count) * size, '\0');
  const DType core_dtype = dtype == v1::BFLOAT16  ? DType::kBFloat16
                           : dtype == v1::FLOAT16 ? DType::kFloat16
                                                  : DType::kFloat32;
  const uint64_t base =
      SplitMix64Hash(SplitMix64Hash(seed) ^ (stream * 0xd1b54a32d192ed03ull));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = SplitMix64Hash(base + static_cast<uint64_t>(i));
    // 24 random bits: exact in float, uniform on [-1, 1) in steps of 2^-23.
    const float value = static_cast<float>(bits >> 40) * 0x1p-23f - 1.0f;
    StoreFromFloat(bytes.data(), core_dtype, i, value);
  }
  return bytes;
}

v1::Tensor RandomTensor(v1::DataType dtype, absl::Span<const int64_t> shape,
                        uint64_t seed, uint64_t stream) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t d : shape) tensor.add_shape(d);
  tensor.set_data(UniformBytes(dtype, Product(shape), seed, stream));
  return tensor;
}

}  // namespace attnserve::client
