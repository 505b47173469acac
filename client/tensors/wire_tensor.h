#ifndef ATTNSERVE_CLIENT_TENSORS_WIRE_TENSOR_H_
#define ATTNSERVE_CLIENT_TENSORS_WIRE_TENSOR_H_

// attnctl's helpers for v1::Tensor: element access, summaries, and conversion
// from and to .npy arrays (sizes, shapes and dtype names are wire/'s).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "client/tensors/npy.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::client {

// Element i as a float. The tensor must be one of the four dtypes and hold
// more than i elements.
float ElementAsFloat(const v1::Tensor& tensor, int64_t i);

// "causal top_left; window left 2 right inf; key_lengths [3, 5]; explicit
// bool [1, 1, 4, 4]", or "none".
std::string MaskText(const v1::Mask& mask);

// Mean and largest magnitude of a tensor's elements, and how many are NaN or
// infinite (left out of the other two).
struct TensorStats {
  double mean = 0;
  double abs_max = 0;
  int64_t non_finite = 0;
};
TensorStats ComputeStats(const v1::Tensor& tensor);

// The wire tensor for an .npy array, taking its data: f4 → FLOAT32,
// f2 → FLOAT16, bfloat16 bits → BFLOAT16, b1 and u1 → BOOL (nonzero = true).
v1::Tensor TensorFromNpy(NpyArray array);

// The .npy array for a wire tensor (BFLOAT16 as '<u2' bits, BOOL as '|b1').
// InvalidArgument for an unknown dtype or data that does not match the shape.
absl::StatusOr<NpyArray> NpyFromTensor(const v1::Tensor& tensor);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_TENSORS_WIRE_TENSOR_H_
