#ifndef ATTNSERVE_WIRE_TENSOR_H_
#define ATTNSERVE_WIRE_TENSOR_H_

// Views of v1::Tensor messages as the core's tensors, checked, without copies:
// a view points into the message's bytes, so the message must outlive it and
// stay unmodified (the kernels accept any alignment).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "attnserve/v1/attention.pb.h"
#include "core/tensor.h"

namespace attnserve::wire {

// The tensor's shape, borrowed from the message.
absl::Span<const int64_t> ShapeOf(const v1::Tensor& tensor);

// product(shape); 1 for a scalar. The caller has checked that it fits (a view
// made by ViewAs does).
int64_t NumElements(const v1::Tensor& tensor);

// "[1, 8, 128, 64]"
std::string ShapeText(const v1::Tensor& tensor);

// The dtype of a floating-point operand named `name` ("query", "hidden", ...).
// InvalidArgument naming "<name>.dtype" for unspecified, unknown, INT32 or BOOL
// values, and, when `same_as` is set, for a dtype other than it: "key.dtype:
// BFLOAT16 differs from query.dtype FLOAT32", followed by " (<why>)" when `why`
// is not empty.
absl::StatusOr<DType> FloatDType(absl::string_view name,
                                 const v1::Tensor& tensor,
                                 std::optional<DType> same_as = std::nullopt,
                                 absl::string_view same_as_name = "",
                                 absl::string_view why = "");

// The tensor's bytes as a dense row-major `dtype` tensor of its shape.
// InvalidArgument naming `name` for a negative dimension, an element count that
// overflows, a byte count that does not match the shape, or a shared-memory
// reference (the server resolves those itself where it accepts them).
absl::StatusOr<TensorView> ViewAs(absl::string_view name,
                                  const v1::Tensor& tensor, DType dtype);

// ViewAs with the tensor's own dtype; InvalidArgument naming "<name>.dtype"
// when it has no core dtype.
absl::StatusOr<TensorView> ViewOf(absl::string_view name,
                                  const v1::Tensor& tensor);

// Sets the dtype, shape and zero-filled data of `tensor` (replacing what it
// held) and returns a view of its data for a kernel to fill. The caller has
// bounded the size.
MutableTensorView PrepareTensor(DType dtype, absl::Span<const int64_t> shape,
                                v1::Tensor* tensor);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_TENSOR_H_
