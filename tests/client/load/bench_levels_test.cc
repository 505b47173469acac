#include "client/load/bench_levels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<double> Levels(const char* text, bool integer = true) {
  absl::StatusOr<std::vector<double>> levels =
      ParseLevels("concurrency", text, integer);
  EXPECT_TRUE(levels.ok()) << levels.status();
  return levels.value_or(std::vector<double>{});
}

TEST(ParseLevelsTest, OneLevel) { EXPECT_THAT(Levels("4"), ElementsAre(4)); }

TEST(ParseLevelsTest, AListKeepsItsOrder) {
  EXPECT_THAT(Levels("8,1,2"), ElementsAre(8, 1, 2));
}

TEST(ParseLevelsTest, FactorSweep) {
  EXPECT_THAT(Levels("1:64:x2"), ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_THAT(Levels("1:10:x3"), ElementsAre(1, 3, 9));
}

TEST(ParseLevelsTest, WholeNumberFactorsDropRepeats) {
  // 1, 1.5, 2.25, 3.375 (5.06 is beyond END).
  EXPECT_THAT(Levels("1:5:x1.5"), ElementsAre(1, 2, 3));
}

TEST(ParseLevelsTest, StepSweep) {
  EXPECT_THAT(Levels("1:8:3"), ElementsAre(1, 4, 7));
  EXPECT_THAT(Levels("2:4"), ElementsAre(2, 3, 4));
}

TEST(ParseLevelsTest, RatesMayBeFractional) {
  absl::StatusOr<std::vector<double>> rates =
      ParseLevels("rate", "0.5:1:0.1", /*integer=*/false);
  ASSERT_TRUE(rates.ok()) << rates.status();
  ASSERT_EQ(rates->size(), 6u);
  EXPECT_DOUBLE_EQ(rates->back(), 1.0);
  EXPECT_THAT(ParseLevels("rate", "100:300:100", false).value(),
              ElementsAre(100, 200, 300));
}

TEST(ParseLevelsTest, BadLevelsNameTheFlagAndThePart) {
  EXPECT_THAT(ParseLevels("concurrency", "0", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--concurrency \"0\": 0 is not positive")));
  EXPECT_THAT(ParseLevels("concurrency", "1.5", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1.5 is not a whole number")));
  EXPECT_THAT(ParseLevels("rate", "fast", false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"fast\" is not a number")));
  EXPECT_THAT(ParseLevels("concurrency", "8:1", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("END is below START")));
  EXPECT_THAT(ParseLevels("concurrency", "1:8:x1", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a factor must be above 1")));
  EXPECT_THAT(ParseLevels("concurrency", "1:2:3:4", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("too many parts")));
  EXPECT_THAT(ParseLevels("concurrency", "1,,2", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"\" is not a number")));
  EXPECT_THAT(ParseLevels("concurrency", "-3", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("-3 is not positive")));
}

TEST(ParseLevelsTest, AtMost64Levels) {
  EXPECT_EQ(Levels("1:64").size(), 64u);
  EXPECT_THAT(ParseLevels("concurrency", "1:65", true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 64 levels")));
}

}  // namespace
}  // namespace attnserve::client
