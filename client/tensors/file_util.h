#ifndef ATTNSERVE_CLIENT_TENSORS_FILE_UTIL_H_
#define ATTNSERVE_CLIENT_TENSORS_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::client {

// The whole file (base::ReadFile). Errors start with the path: NotFound when
// it does not exist, PermissionDenied when it may not be opened,
// ResourceExhausted when out of descriptors or memory, Internal on other
// errors, a directory included.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Creates or truncates `path` and writes `contents`. PermissionDenied when it
// cannot be opened, Internal when the write fails (e.g. a full disk).
absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_TENSORS_FILE_UTIL_H_
