#ifndef ATTNSERVE_CLIENT_INPUT_FILES_H_
#define ATTNSERVE_CLIENT_INPUT_FILES_H_

// Reading a request's tensors from .npy files (infer, heatmap): the inputs'
// and the explicit mask's dtype rules, with messages that name the flags.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"

namespace attnserve::client {

// Reads the query, key or value (`role`, for messages) from `path` into
// `tensor`. Accepted: '<f4', '<f2', and '<u2' as bfloat16 bits when
// `file_dtype` is BFLOAT16; when `file_dtype` is set the file must hold that
// dtype. ReadNpyFile's errors, or InvalidArgument naming the path for a dtype
// that cannot be used.
absl::Status LoadInputFile(const std::string& path, absl::string_view role,
                           const std::optional<v1::DataType>& file_dtype,
                           v1::Tensor* tensor);

// Reads an explicit mask: '|b1' or '|u1' (nonzero = attend) or '<f4' (added
// to the scores). ReadNpyFile's errors, or InvalidArgument naming the path
// for another dtype.
absl::Status LoadMaskFile(const std::string& path, v1::Tensor* tensor);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_INPUT_FILES_H_
