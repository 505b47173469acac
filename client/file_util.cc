#include "client/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::client {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    std::string message =
        absl::StrCat(path, ": cannot open: ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {
    contents.append(buffer, n);
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return absl::InternalError(
        absl::StrCat(path, ": read error: ", std::strerror(error)));
  }
  return contents;
}

absl::Status WriteStringToFile(const std::string& path,
                               absl::string_view contents) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, ": cannot open for writing: ", std::strerror(errno)));
  }
  const bool written =
      std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    return absl::InternalError(absl::StrCat(
        path,
        ": write failed: ", std::strerror(written ? errno : write_error)));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::client
