#include "base/byte_size.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/marshalling.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::base {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, ParsesNumbersWithAndWithoutUnits) {
  EXPECT_EQ(*ParseByteSize("1073741824"), int64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("1GiB"), int64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize(" 64 MiB "), int64_t{64} << 20);
  EXPECT_EQ(*ParseByteSize("3KiB"), 3072);
  EXPECT_EQ(*ParseByteSize("2TiB"), int64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("5GB"), 5000000000);
  EXPECT_EQ(*ParseByteSize("7kB"), 7000);
  EXPECT_EQ(*ParseByteSize("7KB"), 7000);
  EXPECT_EQ(*ParseByteSize("100B"), 100);
  EXPECT_EQ(*ParseByteSize("0"), 0);
  // Negative values parse; the flag's owner says whether they mean anything.
  EXPECT_EQ(*ParseByteSize("-1"), -1);
}

TEST(ByteSizeTest, RefusesAnythingElseNamingTheText) {
  for (const char* bad : {"", "GiB", "1.5GiB", "1gib", "1 G", "12x", "0x10",
                          "1GiBs", "--1", "9999999999999999999"}) {
    const absl::StatusOr<int64_t> parsed = ParseByteSize(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr(bad)) << bad;
  }
  EXPECT_THAT(ParseByteSize("9000000TiB").status().message(),
              HasSubstr("too large"));
}

TEST(ByteSizeTest, PrintsTheLargestExactBinaryUnit) {
  EXPECT_EQ(ByteSizeText(int64_t{1} << 30), "1GiB");
  EXPECT_EQ(ByteSizeText(int64_t{1536} << 20), "1536MiB");
  EXPECT_EQ(ByteSizeText(int64_t{64} << 30), "64GiB");
  EXPECT_EQ(ByteSizeText(1000), "1000");
  EXPECT_EQ(ByteSizeText(0), "0");
  for (int64_t n : {int64_t{1} << 30, int64_t{123456789}, int64_t{3} << 40}) {
    EXPECT_EQ(*ParseByteSize(ByteSizeText(n)), n);
  }
}

TEST(ByteSizeTest, WorksAsAnAbslFlagType) {
  ByteSize size;
  std::string error;
  EXPECT_TRUE(absl::ParseFlag("256MiB", &size, &error));
  EXPECT_EQ(size.bytes, int64_t{256} << 20);
  EXPECT_EQ(absl::UnparseFlag(size), "256MiB");
  EXPECT_FALSE(absl::ParseFlag("256 apples", &size, &error));
  EXPECT_THAT(error, HasSubstr("is not a size"));
}

}  // namespace
}  // namespace attnserve::base
