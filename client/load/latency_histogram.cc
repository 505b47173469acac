#include "client/load/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace attnserve::client {

int LatencyHistogram::BucketOf(int64_t nanos) {
  if (nanos < kSubBuckets) return static_cast<int>(nanos);
  // The highest set bit picks the power; the next kSubBucketBits bits pick
  // the sub-bucket.
  const int top = 63 - __builtin_clzll(static_cast<uint64_t>(nanos));
  const int power = top - kSubBucketBits + 1;
  if (power > kPowers) return kBuckets - 1;
  const int sub =
      static_cast<int>((nanos >> (top - kSubBucketBits)) & (kSubBuckets - 1));
  return power * kSubBuckets + sub;
}

int64_t LatencyHistogram::UpperEdge(int bucket) {
  if (bucket < kSubBuckets) return bucket;
  const int power = bucket / kSubBuckets;
  const int sub = bucket % kSubBuckets;
  const int shift = power - 1;
  // Bucket (power, sub) holds [(kSubBuckets + sub) << shift, +1 << shift).
  return ((int64_t{kSubBuckets + sub + 1}) << shift) - 1;
}

void LatencyHistogram::Record(absl::Duration latency) {
  const int64_t nanos = std::max<int64_t>(1, absl::ToInt64Nanoseconds(latency));
  ++buckets_[BucketOf(nanos)];
  if (count_ == 0) {
    min_ns_ = max_ns_ = nanos;
  } else {
    min_ns_ = std::min(min_ns_, nanos);
    max_ns_ = std::max(max_ns_, nanos);
  }
  ++count_;
  sum_ns_ += nanos;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  if (count_ == 0) {
    min_ns_ = other.min_ns_;
    max_ns_ = other.max_ns_;
  } else {
    min_ns_ = std::min(min_ns_, other.min_ns_);
    max_ns_ = std::max(max_ns_, other.max_ns_);
  }
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
}

absl::Duration LatencyHistogram::min() const {
  return absl::Nanoseconds(min_ns_);
}

absl::Duration LatencyHistogram::max() const {
  return absl::Nanoseconds(max_ns_);
}

absl::Duration LatencyHistogram::mean() const {
  return count_ == 0 ? absl::ZeroDuration()
                     : absl::Nanoseconds(sum_ns_) / count_;
}

absl::Duration LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return absl::ZeroDuration();
  p = std::clamp(p, 0.0, 100.0);
  const int64_t rank = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(p / 100.0 * count_)), 1, count_);
  int64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      // The last bucket also holds everything beyond the range.
      if (i == kBuckets - 1) return max();
      return absl::Nanoseconds(std::clamp(UpperEdge(i), min_ns_, max_ns_));
    }
  }
  return max();
}

}  // namespace attnserve::client
