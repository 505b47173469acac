#ifndef ATTNSERVE_MODEL_FILE_UTIL_H_
#define ATTNSERVE_MODEL_FILE_UTIL_H_

// Internal to attnserve_model: reading a whole file with errors that name it.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace attnserve::model {

// The contents of the regular file `path`. Errors start with `path`: the
// errno's code when it cannot be opened or read (NotFound, PermissionDenied,
// ...); InvalidArgument when it is not a regular file or is larger than
// `max_bytes`.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_FILE_UTIL_H_
