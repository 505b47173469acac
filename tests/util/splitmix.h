#ifndef ATTNSERVE_TESTS_UTIL_SPLITMIX_H_
#define ATTNSERVE_TESTS_UTIL_SPLITMIX_H_

// splitmix64: the same sequence from the same seed on every machine and with
// any standard library, for the seeded fuzz drivers.

#include <cstdint>

namespace attnserve::testing {

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }
  bool OneIn(uint64_t n) { return Below(n) == 0; }
  // Uniform in [0, 1).
  float UnitFloat() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }

 private:
  uint64_t state_;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_SPLITMIX_H_
