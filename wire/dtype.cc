#include "wire/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::wire {

absl::StatusOr<DType> DTypeFromWire(v1::DataType dtype,
                                    absl::string_view field) {
  switch (dtype) {
    case v1::FLOAT32:
      return DType::kFloat32;
    case v1::BFLOAT16:
      return DType::kBFloat16;
    case v1::FLOAT16:
      return DType::kFloat16;
    case v1::BOOL:
      return DType::kBool;
    case v1::DATA_TYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ": DATA_TYPE_UNSPECIFIED (expected FLOAT32, BFLOAT16, FLOAT16 "
          "or BOOL)"));
    case v1::INT32:
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ": INT32 is only for ModelRequest.positions (expected FLOAT32, "
          "BFLOAT16, FLOAT16 or BOOL)"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown value ", static_cast<int>(dtype),
                       " (expected FLOAT32 = 1, BFLOAT16 = 2, FLOAT16 = 3 or "
                       "BOOL = 4)"));
  }
}

v1::DataType DTypeToWire(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kBFloat16:
      return v1::BFLOAT16;
    case DType::kFloat16:
      return v1::FLOAT16;
    case DType::kBool:
      return v1::BOOL;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

std::string DataTypeName(v1::DataType dtype) {
  const std::string& name = v1::DataType_Name(dtype);
  if (name.empty()) {
    return absl::StrCat("unknown value ", static_cast<int>(dtype));
  }
  return name;
}

std::string ShortDataTypeName(v1::DataType dtype) {
  if (dtype == v1::INT32) return "i32";
  if (dtype == v1::DATA_TYPE_UNSPECIFIED) return "unspecified";
  const absl::StatusOr<DType> core = DTypeFromWire(dtype, "");
  if (!core.ok())
    return absl::StrCat("DataType(", static_cast<int>(dtype), ")");
  return std::string(DTypeName(*core));
}

int64_t ElementSize(v1::DataType dtype) {
  if (dtype == v1::INT32) return 4;
  const absl::StatusOr<DType> core = DTypeFromWire(dtype, "");
  return core.ok() ? static_cast<int64_t>(DTypeSize(*core)) : 0;
}

}  // namespace attnserve::wire
