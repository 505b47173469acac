#ifndef ATTNSERVE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_
#define ATTNSERVE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_

// A fine-grained, fixed-size latency histogram for attnctl bench: log-linear
// buckets (128 per power of two, so any recorded value is reported within
// 0.8 % of itself) from 1 ns to about 36 minutes, with the exact count, sum,
// minimum and maximum. Recording is O(1) and allocation-free.

#include <array>
#include <cstdint>

#include "absl/time/time.h"

namespace attnserve::client {

class LatencyHistogram {
 public:
  // Values at or below 0 count as 1 ns; values beyond the range count in the
  // last bucket (their exact value still reaches max()).
  void Record(absl::Duration latency);
  // Adds every value of `other`.
  void Merge(const LatencyHistogram& other);

  int64_t count() const { return count_; }
  // Exact; zero when empty.
  absl::Duration min() const;
  absl::Duration max() const;
  absl::Duration mean() const;

  // The nearest-rank percentile (p in [0, 100]): the upper edge of the bucket
  // holding the value of rank ceil(p/100 * count), never above max() nor
  // below min(). Non-decreasing in p; zero when empty.
  absl::Duration Percentile(double p) const;

 private:
  static constexpr int kSubBucketBits = 7;
  static constexpr int kSubBuckets = 1 << kSubBucketBits;
  // Values below kSubBuckets ns get a bucket each; every power of two above
  // gets kSubBuckets.
  static constexpr int kPowers = 34;
  static constexpr int kBuckets = kSubBuckets * (kPowers + 1);

  static int BucketOf(int64_t nanos);
  static int64_t UpperEdge(int bucket);

  std::array<int64_t, kBuckets> buckets_{};
  int64_t count_ = 0;
  int64_t sum_ns_ = 0;
  int64_t min_ns_ = 0;
  int64_t max_ns_ = 0;
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_LATENCY_HISTOGRAM_H_
