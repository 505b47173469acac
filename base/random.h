#ifndef ATTNSERVE_BASE_RANDOM_H_
#define ATTNSERVE_BASE_RANDOM_H_

// The one seeded generator of the project (test data, fuzz drivers, benchmark
// inputs, attnctl's random inputs and arrival times): splitmix64, which gives
// the same sequence from the same seed on every machine and with any standard
// library, unlike std::mt19937 fed through std:: distributions. Not for
// anything that must be unpredictable.

#include <cstdint>
#include <limits>

namespace attnserve::base {

// splitmix64's finalizer of x + 0x9e3779b97f4a7c15: a bijective 64-bit mix,
// for data that is a pure function of (seed, index).
constexpr uint64_t SplitMix64Hash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A splitmix64 stream. Meets UniformRandomBitGenerator, so std::
// distributions accept it (their output then depends on the standard library
// again). Not thread-safe: one per thread.
class SplitMix64 {
 public:
  using result_type = uint64_t;

  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    const uint64_t x = state_;
    state_ += 0x9e3779b97f4a7c15ull;
    return SplitMix64Hash(x);
  }
  uint64_t operator()() { return Next(); }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() {
    return std::numeric_limits<uint64_t>::max();
  }

  // Uniform in [0, n) (with a bias below 2^-32 for n < 2^32); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }
  bool OneIn(uint64_t n) { return Below(n) == 0; }
  // Uniform in [0, 1), on a grid of 2^-24.
  float UnitFloat() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * UnitFloat(); }
  // Uniform in [0, 1), on a grid of 2^-53.
  double UnitDouble() { return static_cast<double>(Next() >> 11) * 0x1p-53; }

 private:
  uint64_t state_;
};

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_RANDOM_H_
