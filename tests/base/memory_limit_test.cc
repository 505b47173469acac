#include "base/memory_limit.h"

#include "gtest/gtest.h"

namespace attnserve::base {
namespace {

TEST(MemoryLimitTest, ParsesCgroupLimits) {
  EXPECT_EQ(MemoryLimitFromCgroup("1073741824\n"), int64_t{1} << 30);
  EXPECT_EQ(MemoryLimitFromCgroup("max\n"), std::nullopt);
  EXPECT_EQ(MemoryLimitFromCgroup("9223372036854771712"), std::nullopt);
  EXPECT_EQ(MemoryLimitFromCgroup("12abc"), std::nullopt);
  EXPECT_EQ(MemoryLimitFromCgroup(""), std::nullopt);
  EXPECT_EQ(MemoryLimitFromCgroup("0"), std::nullopt);
}

TEST(MemoryLimitTest, AvailableMemoryIsPositiveAndAtMostPhysical) {
  const int64_t bytes = AvailableMemoryBytes();
  EXPECT_GT(bytes, int64_t{64} << 20);
  EXPECT_LE(bytes, int64_t{1} << 62);
}

}  // namespace
}  // namespace attnserve::base
