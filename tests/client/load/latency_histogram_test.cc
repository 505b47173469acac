#include "client/load/latency_histogram.h"

#include <cmath>

#include "gtest/gtest.h"

namespace attnserve::client {
namespace {

double Micros(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

TEST(LatencyHistogramTest, EmptyIsAllZero) {
  const LatencyHistogram h;
  EXPECT_EQ(h.count(), 0);
  EXPECT_EQ(h.min(), absl::ZeroDuration());
  EXPECT_EQ(h.max(), absl::ZeroDuration());
  EXPECT_EQ(h.mean(), absl::ZeroDuration());
  EXPECT_EQ(h.Percentile(50), absl::ZeroDuration());
}

TEST(LatencyHistogramTest, SmallValuesAreExact) {
  LatencyHistogram h;
  for (int ns = 1; ns <= 100; ++ns) h.Record(absl::Nanoseconds(ns));
  EXPECT_EQ(h.Percentile(50), absl::Nanoseconds(50));
  EXPECT_EQ(h.Percentile(99), absl::Nanoseconds(99));
  EXPECT_EQ(h.Percentile(100), absl::Nanoseconds(100));
  EXPECT_EQ(h.Percentile(0), absl::Nanoseconds(1));
  EXPECT_EQ(h.min(), absl::Nanoseconds(1));
}

TEST(LatencyHistogramTest, PercentilesAreWithinOnePercentOfTheTruth) {
  LatencyHistogram h;
  // 1 µs .. 100 ms in 100000 evenly spaced steps.
  for (int i = 1; i <= 100000; ++i) h.Record(absl::Microseconds(i));
  for (double p : {1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9}) {
    const double truth = std::ceil(p / 100 * 100000);
    EXPECT_NEAR(Micros(h.Percentile(p)), truth, truth * 0.008) << "p" << p;
    EXPECT_GE(Micros(h.Percentile(p)), truth) << "upper edges, p" << p;
  }
  EXPECT_EQ(h.count(), 100000);
  EXPECT_EQ(h.max(), absl::Microseconds(100000));
  EXPECT_EQ(h.min(), absl::Microseconds(1));
  EXPECT_EQ(h.mean(), absl::Nanoseconds(50000500));
  EXPECT_EQ(h.Percentile(100), h.max());
}

TEST(LatencyHistogramTest, PercentilesNeverDecrease) {
  LatencyHistogram h;
  for (int i = 0; i < 5000; ++i) {
    h.Record(absl::Nanoseconds(
        static_cast<int64_t>(std::exp(0.004 * (i * 7919 % 5000)) * 1000)));
  }
  absl::Duration previous = absl::ZeroDuration();
  for (double p = 0; p <= 100; p += 0.1) {
    const absl::Duration d = h.Percentile(p);
    ASSERT_GE(d, previous) << "p" << p;
    ASSERT_LE(d, h.max());
    ASSERT_GE(d, h.min());
    previous = d;
  }
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverything) {
  LatencyHistogram a, b, all;
  for (int i = 1; i <= 300; ++i) {
    const absl::Duration d = absl::Microseconds(i * i);
    (i % 3 == 0 ? a : b).Record(d);
    all.Record(d);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_EQ(a.mean(), all.mean());
  for (double p : {10.0, 50.0, 99.0, 99.9}) {
    EXPECT_EQ(a.Percentile(p), all.Percentile(p)) << "p" << p;
  }
  LatencyHistogram empty;
  empty.Merge(all);
  EXPECT_EQ(empty.min(), all.min());
}

TEST(LatencyHistogramTest, OutOfRangeValuesAreKept) {
  LatencyHistogram h;
  h.Record(absl::ZeroDuration());
  h.Record(-absl::Seconds(1));
  h.Record(absl::Hours(2));
  EXPECT_EQ(h.count(), 3);
  EXPECT_EQ(h.min(), absl::Nanoseconds(1));
  EXPECT_EQ(h.max(), absl::Hours(2));
  EXPECT_EQ(h.Percentile(100), absl::Hours(2));
  EXPECT_EQ(h.Percentile(50), absl::Nanoseconds(1));
}

}  // namespace
}  // namespace attnserve::client
