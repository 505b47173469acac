#ifndef ATTNSERVE_CLIENT_REQUEST_BUILDER_H_
#define ATTNSERVE_CLIENT_REQUEST_BUILDER_H_

// Builds AttendRequests from a plain description: random inputs of a given
// shape, and the call's options (layout, mask, scale, weights, output dtype).
// Shared by the subcommands that send requests (infer; bench and heatmap).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  // Empty (default) or one per batch element.
  std::vector<int32_t> key_lengths;
  // Unset (default) = the server's 1/sqrt(D).
  std::optional<float> scale;
  bool return_weights = false;
  // DATA_TYPE_UNSPECIFIED (default) = the inputs' dtype.
  v1::DataType output_dtype = v1::DATA_TYPE_UNSPECIFIED;
};

// What a request-sending subcommand was asked for.
struct RequestSpec {
  RandomInputs random;
  CallOptions call;
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
// flag and output dtype of `request`.
void ApplyCallOptions(const CallOptions& options, v1::AttendRequest* request);

// `count` values uniform in [-1, 1) as `dtype` (a float dtype), from a
// counter-based generator: value i depends only on (seed, stream, i).
std::string UniformBytes(v1::DataType dtype, int64_t count, uint64_t seed,
                         uint64_t stream);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_REQUEST_BUILDER_H_
