#ifndef ATTNSERVE_BASE_FILE_H_
#define ATTNSERVE_BASE_FILE_H_

// Reading a whole file, with errors that name it.

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"

namespace attnserve::base {

// The contents of `path`, read to its end: regular files, and also what
// reports no size (/proc and cgroup files) or has none (a FIFO, /dev/stdin).
// Every error message starts with `path`:
//   NotFound          it does not exist (ENOENT, ENOTDIR);
//   PermissionDenied  it may not be opened (EACCES, EPERM);
//   InvalidArgument   it is a directory ("<path>: not a regular file");
//   ResourceExhausted it holds more than `max_bytes` bytes, or the process is
//                     out of file descriptors or memory;
//   Internal          any other open or read error.
// Messages of open errors read "<path>: cannot open: <strerror>". Callers that
// want a flag name in the message wrap the status. Thread-safe.
absl::StatusOr<std::string> ReadFile(
    const std::string& path,
    int64_t max_bytes = std::numeric_limits<int64_t>::max());

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_FILE_H_
