#include "client/tensors/wire_tensor.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tensors/wire_names.h"
#include "core/convert.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::client {

float ElementAsFloat(const v1::Tensor& tensor, int64_t i) {
  // core/convert.h's element access, which the client shares with the
  // reference; the caller has checked the dtype.
  return LoadAsFloat(
      tensor.data().data(),
      wire::DTypeFromWire(tensor.dtype(), "").value_or(DType::kFloat32), i);
}

TensorStats ComputeStats(const v1::Tensor& tensor) {
  TensorStats stats;
  // INT32 has a size but no float view: it counts as nothing to summarize.
  const int64_t size = wire::DTypeFromWire(tensor.dtype(), "").ok()
                           ? wire::ElementSize(tensor.dtype())
                           : 0;
  const int64_t available =
      size == 0 ? 0 : static_cast<int64_t>(tensor.data().size()) / size;
  double sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < available; ++i) {
    const double x = ElementAsFloat(tensor, i);
    if (!std::isfinite(x)) {
      ++stats.non_finite;
      continue;
    }
    sum += x;
    ++finite;
    stats.abs_max = std::max(stats.abs_max, std::fabs(x));
  }
  if (finite > 0) stats.mean = sum / static_cast<double>(finite);
  return stats;
}

v1::Tensor TensorFromNpy(NpyArray array) {
  v1::Tensor tensor;
  switch (array.dtype) {
    case NpyDType::kFloat32:
      tensor.set_dtype(v1::FLOAT32);
      break;
    case NpyDType::kFloat16:
      tensor.set_dtype(v1::FLOAT16);
      break;
    case NpyDType::kBFloat16:
      tensor.set_dtype(v1::BFLOAT16);
      break;
    case NpyDType::kUInt8:
    case NpyDType::kBool:
      tensor.set_dtype(v1::BOOL);
      break;
  }
  for (int64_t dim : array.shape) tensor.add_shape(dim);
  tensor.set_data(std::move(array.data));
  return tensor;
}

absl::StatusOr<NpyArray> NpyFromTensor(const v1::Tensor& tensor) {
  NpyArray array;
  switch (tensor.dtype()) {
    case v1::FLOAT32:
      array.dtype = NpyDType::kFloat32;
      break;
    case v1::FLOAT16:
      array.dtype = NpyDType::kFloat16;
      break;
    case v1::BFLOAT16:
      array.dtype = NpyDType::kBFloat16;
      break;
    case v1::BOOL:
      array.dtype = NpyDType::kBool;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot store a tensor of dtype ",
                       wire::ShortDataTypeName(tensor.dtype()), " as .npy"));
  }
  array.shape.assign(tensor.shape().begin(), tensor.shape().end());
  if (static_cast<int64_t>(tensor.data().size()) !=
      wire::NumElements(tensor) * wire::ElementSize(tensor.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data is ", tensor.data().size(), " bytes, shape ",
        wire::ShapeText(tensor), " of ",
        wire::ShortDataTypeName(tensor.dtype()), " needs ",
        wire::NumElements(tensor) * wire::ElementSize(tensor.dtype())));
  }
  array.data = tensor.data();
  return array;
}

std::string MaskText(const v1::Mask& mask) {
  std::vector<std::string> parts;
  if (mask.causal()) {
    parts.push_back(absl::StrCat("causal ", AlignmentName(mask.alignment())));
  }
  if (mask.has_window_left() || mask.has_window_right()) {
    parts.push_back(absl::StrCat(
        "window left ",
        mask.has_window_left() ? absl::StrCat(mask.window_left()) : "inf",
        " right ",
        mask.has_window_right() ? absl::StrCat(mask.window_right()) : "inf"));
  }
  if (!mask.key_lengths().empty()) {
    parts.push_back(absl::StrCat("key_lengths [",
                                 absl::StrJoin(mask.key_lengths(), ", "), "]"));
  }
  if (mask.has_explicit_mask()) {
    parts.push_back(absl::StrCat(
        "explicit ", wire::ShortDataTypeName(mask.explicit_mask().dtype()), " ",
        wire::ShapeText(mask.explicit_mask())));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, "; ");
}

}  // namespace attnserve::client
