#include "model/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::model {
namespace {

absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path,
                                         uint64_t max_bytes) {
  struct stat info;
  if (fstat(fd, &info) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": file is ", size, " bytes, above the limit of ", max_bytes));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
    }
    if (n == 0) break;  // The file shrank while we read it.
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // ErrnoToStatus maps ENOENT to NotFound, EACCES to PermissionDenied, ...
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  }
  absl::StatusOr<std::string> bytes = ReadOpenFile(fd, path, max_bytes);
  close(fd);
  return bytes;
}

}  // namespace attnserve::model
