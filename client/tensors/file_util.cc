#include "client/tensors/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace attnserve::client {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  absl::StatusOr<std::string> contents = base::ReadFile(path);
  // attnctl exits with its usage code on InvalidArgument; a directory named as
  // an input file is a file error like the others.
  if (contents.status().code() == absl::StatusCode::kInvalidArgument) {
    return absl::InternalError(contents.status().message());
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
