#ifndef ATTNSERVE_CLIENT_TENSORS_INPUT_FILES_H_
#define ATTNSERVE_CLIENT_TENSORS_INPUT_FILES_H_

// Reading a request's tensors from .npy files (infer, heatmap): the inputs'
// and the explicit mask's dtype rules, with messages that name the flags.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"

namespace attnserve::client {

// The .npy inputs of a request (infer, heatmap), as --q --k --v --mask and
// --dtype give them; empty paths = not given (default).
struct InputFiles {
  std::string query;
  std::string key;
  std::string value;
  // An explicit mask: '|b1' or '|u1' (nonzero = attend) or '<f4' (added to the
  // scores), broadcastable to [B, Hq, Lq, Lk].
  std::string mask;
  // When set, the query/key/value files must hold this dtype, and BFLOAT16
  // reads '<u2' files as bfloat16 bits. Unset (default): the files' own dtype,
  // where '<u2' is an error.
  std::optional<v1::DataType> dtype;

  // True when any of query, key or value is given.
  bool HasTensors() const {
    return !query.empty() || !key.empty() || !value.empty();
  }
};

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

#endif  // ATTNSERVE_CLIENT_TENSORS_INPUT_FILES_H_
