#include "base/cpu_quota.h"

#include <optional>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::base {
namespace {

using ::testing::Optional;

TEST(CpuQuotaTest, AvailableCpusIsAtLeastOneAndAtMostTheMachine) {
  const int cpus = AvailableCpus();
  EXPECT_GE(cpus, 1);
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 0) {
    EXPECT_LE(cpus, static_cast<int>(hardware));
  }
}

TEST(CpuQuotaTest, CgroupCpuMaxParsing) {
  EXPECT_EQ(CpuLimitFromCgroupCpuMax("max 100000\n"), std::nullopt);
  EXPECT_THAT(CpuLimitFromCgroupCpuMax("200000 100000\n"), Optional(2));
  EXPECT_THAT(CpuLimitFromCgroupCpuMax("400000 100000"), Optional(4));
  // Fractions round down, but never below one CPU.
  EXPECT_THAT(CpuLimitFromCgroupCpuMax("150000 100000\n"), Optional(1));
  EXPECT_THAT(CpuLimitFromCgroupCpuMax("50000 100000\n"), Optional(1));
  // cgroup v1's "no limit".
  EXPECT_EQ(CpuLimitFromCgroupCpuMax("-1 100000\n"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCgroupCpuMax(""), std::nullopt);
  EXPECT_EQ(CpuLimitFromCgroupCpuMax("200000"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCgroupCpuMax("200000 0"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCgroupCpuMax("lots 100000"), std::nullopt);
}

}  // namespace
}  // namespace attnserve::base
