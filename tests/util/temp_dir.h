#ifndef ATTNSERVE_TESTS_UTIL_TEMP_DIR_H_
#define ATTNSERVE_TESTS_UTIL_TEMP_DIR_H_

// A fresh directory under the test temp dir for files a test writes
// (certificates, token files, .npy files, model repositories), removed with
// its contents.

#include <string>

#include "absl/strings/string_view.h"

namespace attnserve::testing {

class TempDir {
 public:
  TempDir();  // A test failure when the directory cannot be made.
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // `name` may contain '/'.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  // Creates or truncates `name` (and its missing parent folders); a test
  // failure when it cannot be written.
  void Write(const std::string& name, absl::string_view contents) const;
  void MakeDir(const std::string& name) const;
  // The whole file; empty when it cannot be read.
  std::string Read(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_TEMP_DIR_H_
