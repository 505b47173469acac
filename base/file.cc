#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::base {
namespace {

absl::Status ErrnoError(int error, const std::string& path, const char* what) {
  const std::string message =
      absl::StrCat(path, ": ", what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status TooLarge(const std::string& path, uint64_t size,
                      int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      path, ": file is ", size, " bytes, above the limit of ", max_bytes));
}

absl::StatusOr<std::string> ReadOpenFile(int fd, const std::string& path,
                                         int64_t max_bytes) {
  struct stat info;
  if (fstat(fd, &info) != 0) return ErrnoError(errno, path, "cannot stat");
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(0, max_bytes));
  const uint64_t reported =
      S_ISREG(info.st_mode) ? static_cast<uint64_t>(info.st_size) : 0;
  if (reported > limit) return TooLarge(path, reported, max_bytes);
  // Sized to what fstat reports, so that a large regular file is read into
  // one allocation of its size. Past that (files that report 0, such as /proc
  // files and pipes, or one that grew) it is read in chunks.
  std::string bytes(static_cast<size_t>(reported), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, path, "cannot read");
    if (n == 0) break;  // The file shrank while we read it.
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  if (done < reported) return bytes;
  char chunk[4096];
  while (true) {
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, path, "cannot read");
    if (n == 0) break;
    const uint64_t size = bytes.size() + static_cast<uint64_t>(n);
    if (size > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          path, ": file is more than ", max_bytes, " bytes, the limit"));
    }
    bytes.append(chunk, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     int64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, path, "cannot open");
  absl::StatusOr<std::string> bytes = ReadOpenFile(fd, path, max_bytes);
  close(fd);
  return bytes;
}

}  // namespace attnserve::base
