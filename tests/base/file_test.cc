#include "base/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"

namespace attnserve::base {
namespace {

using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ReadFileTest, ReadsTheWholeFile) {
  TempDir dir;
  const std::string bytes = std::string("a\0b", 3) + std::string(100000, 'x');
  dir.Write("f", bytes);
  absl::StatusOr<std::string> read = ReadFile(dir.Path("f"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  dir.Write("empty", "");
  EXPECT_EQ(ReadFile(dir.Path("empty")).value_or("?"), "");
}

TEST(ReadFileTest, ReadsFilesThatReportNoSize) {
  absl::StatusOr<std::string> self = ReadFile("/proc/self/status");
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_THAT(*self, HasSubstr("Pid:"));
}

TEST(ReadFileTest, ErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.Path("missing");
  EXPECT_THAT(ReadFile(missing).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(StartsWith(missing + ": cannot open: "),
                             HasSubstr("No such file or directory"))));
  EXPECT_THAT(ReadFile(dir.Path("missing/below")).status(),
              StatusIs(absl::StatusCode::kNotFound, StartsWith(missing)));
  dir.MakeDir("folder");
  EXPECT_THAT(ReadFile(dir.Path("folder")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("folder: not a regular file")));
}

TEST(ReadFileTest, UnreadableIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file";
  TempDir dir;
  dir.Write("secret", "x");
  ASSERT_EQ(chmod(dir.Path("secret").c_str(), 0), 0);
  EXPECT_THAT(ReadFile(dir.Path("secret")).status(),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       StartsWith(dir.Path("secret") + ": cannot open")));
}

TEST(ReadFileTest, AboveTheLimitIsResourceExhausted) {
  TempDir dir;
  dir.Write("f", "12345");
  EXPECT_EQ(ReadFile(dir.Path("f"), 5).value_or("?"), "12345");
  EXPECT_THAT(ReadFile(dir.Path("f"), 4).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("f: file is 5 bytes, above the limit of 4")));
  // A file that reports no size is held to the limit as it is read.
  EXPECT_THAT(ReadFile("/proc/self/status", 8).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       StartsWith("/proc/self/status: file is more than 8")));
}

}  // namespace
}  // namespace attnserve::base
