#ifndef ATTNSERVE_CLIENT_REQUEST_BUILDER_H_
#define ATTNSERVE_CLIENT_REQUEST_BUILDER_H_

// Builds AttendRequests and ModelRequests from a plain description: random
// inputs of a given shape, and the call's options (layout, mask, scale,
// weights, output dtype). Shared by the subcommands that send requests (infer;
// bench and heatmap).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "attnserve/v1/attention.pb.h"

namespace attnserve::client {

// The shape of random query/key/value tensors, uniform in [-1, 1).
struct RandomInputs {
  int64_t batch = 1;
  int64_t heads = 8;
  // Key/value heads; 0 (default) = heads.
  int64_t kv_heads = 0;
  int64_t q_len = 128;
  // 0 (default) = q_len.
  int64_t k_len = 0;
  int64_t head_dim = 64;
  // 0 (default) = head_dim.
  int64_t value_dim = 0;
  // FLOAT32 (default), BFLOAT16 or FLOAT16.
  v1::DataType dtype = v1::FLOAT32;
  // The same seed gives the same tensors on every machine.
  uint64_t seed = 0;
};

// Everything of a request besides query, key, value and an explicit mask.
struct CallOptions {
  v1::Layout layout = v1::BHLD;
  bool causal = false;
  v1::Alignment alignment = v1::TOP_LEFT;
  // Unset (default) = unbounded.
  std::optional<int32_t> window_left;
  std::optional<int32_t> window_right;
  // With window_left: the first keys kept outside the window (0 = none).
  int32_t sink_tokens = 0;
  // Empty (default) or one per batch element.
  std::vector<int32_t> key_lengths;
  // Unset (default) = the server's 1/sqrt(D).
  std::optional<float> scale;
  bool return_weights = false;
  // Each query row's weight entropy and largest weight (softmax only).
  bool return_weight_stats = false;
  // DATA_TYPE_UNSPECIFIED (default) = the inputs' dtype.
  v1::DataType output_dtype = v1::DATA_TYPE_UNSPECIFIED;
  // The long-sequence variants (docs/long_sequences.md): a block-sparse
  // layout (a mask part), and linear or LSH attention instead of softmax
  // (at most one of the two). Unset (default) = none.
  std::optional<v1::BlockSparse> block_sparse;
  std::optional<v1::LinearAttention> linear;
  std::optional<v1::LshAttention> lsh;
};

// What a request-sending subcommand was asked for.
struct RequestSpec {
  RandomInputs random;
  CallOptions call;
};

// A call of a hosted model (ModelRequest) instead of Attend. Its random hidden
// states take batch, q_len, dtype and seed from RandomInputs (the other
// dimensions are the model's), and its mask, weights flag and output dtype
// from CallOptions (layout and scale do not apply).
struct ModelSpec {
  // The model's name; empty (default) = no model (Attend calls).
  std::string name;
  // Cross-attention: random memory [B, memory_len, d_model], Lk = memory_len.
  // 0 (default) = self-attention (no memory, Lk = Lq).
  int64_t memory_len = 0;
  // Sends positions [B, Lq] = offset, ..., offset + Lq - 1 in every row.
  // Unset (default) = none sent (the server's 0..Lq-1).
  std::optional<int64_t> position_offset;
};

// `inputs` with its zero defaults replaced by the dimensions they stand for.
RandomInputs ResolveDefaults(const RandomInputs& inputs);

// Query + key + value bytes of `inputs`, or -1 when that overflows.
int64_t RandomInputBytes(const RandomInputs& inputs);

// InvalidArgument (a usage error) for a negative dimension, a non-float dtype,
// or tensors whose bytes exceed `max_bytes` (the client's message limit).
// Everything else (head ratios, dimension limits) the server checks.
absl::Status ValidateRandomInputs(const RandomInputs& inputs,
                                  int64_t max_bytes);

// Fills request->query/key/value with random tensors in `layout`. The inputs
// must be valid.
void FillRandomInputs(const RandomInputs& inputs, v1::Layout layout,
                      v1::AttendRequest* request);

// Sets the layout, mask parts (leaving explicit_mask alone), scale, weights
// flag, output dtype and method of `request`; with LSH, clears the key (LSH
// attention takes its keys from the queries).
void ApplyCallOptions(const CallOptions& options, v1::AttendRequest* request);

// Sets the mask parts of `options` (causal, alignment, window, key lengths,
// block-sparse layout) on `mask`, leaving explicit_mask alone.
void ApplyMaskOptions(const CallOptions& options, v1::Mask* mask);

// Hidden + memory bytes of a model call, or -1 when that overflows.
int64_t ModelInputBytes(const RandomInputs& inputs, const ModelSpec& model,
                        int64_t d_model);

// InvalidArgument (a usage error) for a negative batch, --lq or --memory_len,
// a non-float dtype, a negative position offset or positions beyond INT32.
// Everything else the server checks. Needs no server: call it before asking
// for the model.
absl::Status ValidateModelSpec(const RandomInputs& inputs,
                               const ModelSpec& model);

// InvalidArgument (a usage error) when the hidden states and memory of `model`
// with `d_model` would exceed `max_bytes` (the client's message limit).
absl::Status ValidateModelInputBytes(const RandomInputs& inputs,
                                     const ModelSpec& model, int64_t d_model,
                                     int64_t max_bytes);

// Fills `request` for a model with `d_model`: the name, random hidden [B, Lq,
// d_model] (stream 0 of inputs.seed) and memory [B, memory_len, d_model]
// (stream 1) when memory_len > 0, positions when an offset is set, the mask
// parts (leaving explicit_mask alone), weights flag and output dtype of
// `call`. `inputs` and `model` must be valid.
void FillModelRequest(const RandomInputs& inputs, const ModelSpec& model,
                      int64_t d_model, const CallOptions& call,
                      v1::ModelRequest* request);

// `count` values uniform in [-1, 1) as `dtype` (a float dtype), from a
// counter-based generator: value i depends only on (seed, stream, i).
std::string UniformBytes(v1::DataType dtype, int64_t count, uint64_t seed,
                         uint64_t stream);

// A wire tensor of `shape` (valid, non-negative) holding UniformBytes(dtype,
// product(shape), seed, stream).
v1::Tensor RandomTensor(v1::DataType dtype, absl::Span<const int64_t> shape,
                        uint64_t seed, uint64_t stream);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_REQUEST_BUILDER_H_
