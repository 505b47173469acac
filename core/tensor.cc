#include "core/tensor.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kBool:
    case DType::kInt8:
      return 1;
  }
  return 0;
}

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat16;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "f16";
    case DType::kBool:
      return "bool";
    case DType::kInt8:
      return "int8";
  }
  return "?";
}

std::array<int64_t, kMaxRank> ContiguousStrides(
    absl::Span<const int64_t> shape) {
  std::array<int64_t, kMaxRank> strides{};
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

template <typename View, typename Data>
static View MakeView(Data* data, DType dtype, absl::Span<const int64_t> shape) {
  View view;
  view.data = data;
  view.dtype = dtype;
  view.rank = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) view.shape[i] = shape[i];
  view.strides = ContiguousStrides(shape);
  return view;
}

TensorView MakeTensorView(const void* data, DType dtype,
                          absl::Span<const int64_t> shape) {
  return MakeView<TensorView>(data, dtype, shape);
}

MutableTensorView MakeMutableTensorView(void* data, DType dtype,
                                        absl::Span<const int64_t> shape) {
  return MakeView<MutableTensorView>(data, dtype, shape);
}

absl::StatusOr<TensorView> TensorViewFromBytes(
    absl::string_view name, const void* data, size_t size_bytes, DType dtype,
    absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": rank ", shape.size(), " exceeds the maximum ",
                     kMaxRank, " (shape ", ShapeString(shape), ")"));
  }
  const int64_t max_elements = std::numeric_limits<int64_t>::max() /
                               static_cast<int64_t>(DTypeSize(dtype));
  // The bound applies to the non-zero dimensions too: the strides of an empty
  // tensor are still their products.
  int64_t elements = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": negative dimension in shape ", ShapeString(shape)));
    }
    if (d == 0) {
      empty = true;
      continue;
    }
    if (elements > max_elements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": element count of shape ", ShapeString(shape), " overflows"));
    }
    elements *= d;
  }
  if (empty) elements = 0;
  const uint64_t expected = static_cast<uint64_t>(elements) * DTypeSize(dtype);
  if (expected != size_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", size_bytes, " bytes do not match shape ",
                     ShapeString(shape), " of ", DTypeName(dtype),
                     " (expected ", expected, " bytes)"));
  }
  return MakeTensorView(data, dtype, shape);
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace attnserve
