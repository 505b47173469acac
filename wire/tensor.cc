#include "wire/tensor.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "wire/dtype.h"

namespace attnserve::wire {

absl::Span<const int64_t> ShapeOf(const v1::Tensor& tensor) {
  return absl::MakeConstSpan(tensor.shape().data(), tensor.shape().size());
}

int64_t NumElements(const v1::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t dim : tensor.shape()) n *= dim;
  return n;
}

std::string ShapeText(const v1::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape(), ", "), "]");
}

absl::StatusOr<DType> FloatDType(absl::string_view name,
                                 const v1::Tensor& tensor,
                                 std::optional<DType> same_as,
                                 absl::string_view same_as_name,
                                 absl::string_view why) {
  // The field's name is spelled only for a message: this runs for every
  // tensor of every call.
  const absl::StatusOr<DType> parsed = DTypeFromWire(tensor.dtype(), name);
  if (!parsed.ok()) {
    return DTypeFromWire(tensor.dtype(), absl::StrCat(name, ".dtype"));
  }
  const DType dtype = *parsed;
  if (dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        ".dtype: BOOL is not supported (expected FLOAT32, BFLOAT16 or "
        "FLOAT16)"));
  }
  if (same_as && dtype != *same_as) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".dtype: ", DataTypeName(tensor.dtype()), " differs from ",
        same_as_name, ".dtype ", DataTypeName(DTypeToWire(*same_as)),
        why.empty() ? "" : absl::StrCat(" (", why, ")")));
  }
  return dtype;
}

absl::StatusOr<TensorView> ViewAs(absl::string_view name,
                                  const v1::Tensor& tensor, DType dtype) {
  if (tensor.has_shared_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name,
        ".shared_memory: only the query, key and value of Attend and "
        "AttendStream requests may be in shared memory; send this tensor's "
        "data"));
  }
  return TensorViewFromBytes(name, tensor.data().data(), tensor.data().size(),
                             dtype, ShapeOf(tensor));
}

absl::StatusOr<TensorView> ViewOf(absl::string_view name,
                                  const v1::Tensor& tensor) {
  ASSIGN_OR_RETURN(const DType dtype,
                   DTypeFromWire(tensor.dtype(), absl::StrCat(name, ".dtype")));
  return ViewAs(name, tensor, dtype);
}

MutableTensorView PrepareTensor(DType dtype, absl::Span<const int64_t> shape,
                                v1::Tensor* tensor) {
  tensor->set_dtype(DTypeToWire(dtype));
  tensor->clear_shape();
  int64_t elements = 1;
  for (int64_t d : shape) {
    tensor->add_shape(d);
    elements *= d;
  }
  std::string* data = tensor->mutable_data();
  // assign, not resize: a reused response must not keep stale bytes.
  data->assign(static_cast<size_t>(elements) * DTypeSize(dtype), '\0');
  return MakeMutableTensorView(data->data(), dtype, shape);
}

}  // namespace attnserve::wire
