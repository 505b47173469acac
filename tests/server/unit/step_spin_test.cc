// StepSpin: how long a step channel's thread polls for the next step, from the
// client's pauses between steps.

#include "server/step_spin.h"

#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using absl::Microseconds;
using absl::Milliseconds;

TEST(StepSpinTest, PollsTheLongestUntilAPauseWasSeen) {
  EXPECT_EQ(StepSpin(Milliseconds(5)).Window(), Milliseconds(5));
  EXPECT_EQ(StepSpin(Microseconds(300)).Window(), Microseconds(300));
}

TEST(StepSpinTest, ASteadyPaceIsPolledForTwiceItsPauses) {
  StepSpin spin(Milliseconds(5));
  for (int i = 0; i < 20; ++i) spin.Observe(Microseconds(1500));
  EXPECT_EQ(spin.Window(), Milliseconds(3));
  // Never below the floor, never above the longest.
  StepSpin fast(Milliseconds(5));
  for (int i = 0; i < 20; ++i) fast.Observe(Microseconds(20));
  EXPECT_EQ(fast.Window(), StepSpin::kFloor);
  StepSpin near(Milliseconds(5));
  for (int i = 0; i < 20; ++i) near.Observe(Milliseconds(4));
  EXPECT_EQ(near.Window(), Milliseconds(5));
}

TEST(StepSpinTest, PausesLongerThanTheLongestPollOnlyAMoment) {
  StepSpin spin(Milliseconds(5));
  for (int i = 0; i < 5; ++i) spin.Observe(Milliseconds(40));
  EXPECT_EQ(spin.Window(), StepSpin::kShort);
  // A steady pace again brings the poll back within a few steps: one long
  // pause counts as at most 4 x the longest.
  for (int i = 0; i < 8; ++i) spin.Observe(Microseconds(900));
  EXPECT_GE(spin.Window(), Microseconds(1800));
  EXPECT_LE(spin.Window(), Milliseconds(5));
}

TEST(StepSpinTest, OneLongPauseAmongSteadyOnesKeepsThePoll) {
  StepSpin spin(Milliseconds(5));
  for (int i = 0; i < 20; ++i) spin.Observe(Microseconds(900));
  spin.Observe(Milliseconds(8));  // the model sampling a token, say
  EXPECT_GE(spin.Window(), Microseconds(1800));
}

TEST(StepSpinTest, ZeroNeverPolls) {
  StepSpin spin(absl::ZeroDuration());
  EXPECT_EQ(spin.Window(), absl::ZeroDuration());
  spin.Observe(Microseconds(10));
  EXPECT_EQ(spin.Window(), absl::ZeroDuration());
  spin.Observe(Milliseconds(10));
  EXPECT_EQ(spin.Window(), absl::ZeroDuration());
}

TEST(StepSpinTest, AShortLongestCapsEverything) {
  StepSpin spin(Microseconds(200));
  for (int i = 0; i < 20; ++i) spin.Observe(Microseconds(50));
  EXPECT_EQ(spin.Window(), Microseconds(200));
  for (int i = 0; i < 20; ++i) spin.Observe(Milliseconds(2));
  EXPECT_EQ(spin.Window(), StepSpin::kShort);
}

}  // namespace
}  // namespace attnserve::server
