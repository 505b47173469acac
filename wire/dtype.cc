#include "wire/dtype.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::wire {
namespace {

// The wire dtypes with a protocol name, in the protocol's order.
constexpr v1::DataType kV2DataTypes[] = {v1::BOOL, v1::INT32, v1::FLOAT16,
                                         v1::BFLOAT16, v1::FLOAT32};

// The protocol's datatypes attnserve has no dtype for.
constexpr const char* kOtherV2DataTypes[] = {"UINT8",  "UINT16", "UINT32",
                                             "UINT64", "INT8",   "INT16",
                                             "INT64",  "FP64",   "BYTES"};

std::string AcceptedV2Names() {
  std::vector<std::string> names;
  for (v1::DataType dtype : kV2DataTypes)
    names.push_back(V2DataTypeName(dtype));
  return absl::StrJoin(names, ", ");
}

}  // namespace

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
    case v1::INT8:
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ": INT8 is only for SessionShape.storage_dtype (expected FLOAT32, "
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
    case DType::kInt8:
      return v1::INT8;
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
  if (dtype == v1::INT8) return "int8";
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

namespace attnserve::wire {

std::string V2DataTypeName(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return "FP32";
    case v1::BFLOAT16:
      return "BF16";
    case v1::FLOAT16:
      return "FP16";
    case v1::BOOL:
      return "BOOL";
    case v1::INT32:
      return "INT32";
    default:
      return "";
  }
}

absl::StatusOr<v1::DataType> DataTypeFromV2Name(absl::string_view name,
                                                absl::string_view field) {
  for (v1::DataType dtype : kV2DataTypes) {
    if (name == V2DataTypeName(dtype)) return dtype;
  }
  for (const char* other : kOtherV2DataTypes) {
    if (name == other) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", name, "\" is not supported (expected ",
                       AcceptedV2Names(), ")"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": unknown datatype \"", name, "\" (expected ", AcceptedV2Names(),
      "; datatypes are upper case, as the protocol spells them)"));
}

}  // namespace attnserve::wire
