#include "client/tensors/input_files.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/tensors/npy.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"

namespace attnserve::client {

absl::Status LoadInputFile(const std::string& path, absl::string_view role,
                           const std::optional<v1::DataType>& file_dtype,
                           v1::Tensor* tensor) {
  // '<u2' is read as bfloat16 here and refused below unless --dtype=bf16 says
  // so, which gives a message that names the flag.
  NpyReadOptions read_options;
  read_options.u2_as_bfloat16 = true;
  absl::StatusOr<NpyArray> array = ReadNpyFile(path, read_options);
  if (!array.ok()) return array.status();
  if (array->dtype == NpyDType::kBFloat16 && file_dtype != v1::BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": dtype '<u2' (uint16) is read as bfloat16 bits only with "
        "--dtype=bf16"));
  }
  if (array->dtype == NpyDType::kBool || array->dtype == NpyDType::kUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dtype '", NpyDescr(array->dtype), "' cannot be the ", role,
        " (expected '<f4', '<f2', or '<u2' bfloat16 bits with --dtype=bf16)"));
  }
  *tensor = TensorFromNpy(*std::move(array));
  if (file_dtype && tensor->dtype() != *file_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds ", wire::ShortDataTypeName(tensor->dtype()),
                     " but --dtype is ", wire::ShortDataTypeName(*file_dtype),
                     " (bf16 files are stored as '<u2')"));
  }
  return absl::OkStatus();
}

absl::Status LoadMaskFile(const std::string& path, v1::Tensor* tensor) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  if (!array.ok()) return array.status();
  if (array->dtype != NpyDType::kBool && array->dtype != NpyDType::kUInt8 &&
      array->dtype != NpyDType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": dtype '", NpyDescr(array->dtype),
        "' cannot be a mask (expected '|b1' or '|u1', true = attend, or '<f4', "
        "added to the scores)"));
  }
  *tensor = TensorFromNpy(*std::move(array));
  return absl::OkStatus();
}

}  // namespace attnserve::client
