#include "core/variants/favor_features.h"

#include <cmath>
#include <deque>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/random.h"

namespace attnserve {
namespace {

double Gaussian(base::SplitMix64& rng) {
  const double u1 = rng.UnitDouble();
  const double u2 = rng.UnitDouble();
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
}

// Enough for every (m, d, seed) a few concurrent clients use at once.
constexpr size_t kCacheEntries = 16;

}  // namespace

std::vector<double> FavorMatrix(int64_t m, int64_t d, uint64_t seed) {
  base::SplitMix64 rng(seed);
  std::vector<double> omega(static_cast<size_t>(m * d));
  std::vector<double> block(static_cast<size_t>(d * d));
  for (int64_t r0 = 0; r0 < m; r0 += d) {
    for (double& x : block) x = Gaussian(rng);
    for (int64_t r = 0; r < d; ++r) {
      double* row = &block[r * d];
      for (int64_t s = 0; s < r; ++s) {
        const double* done = &block[s * d];
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c) dot += row[c] * done[c];
        for (int64_t c = 0; c < d; ++c) row[c] -= dot * done[c];
      }
      double norm = 0.0;
      for (int64_t c = 0; c < d; ++c) norm += row[c] * row[c];
      norm = std::sqrt(norm);
      // A Gaussian matrix is singular with probability 0; should a row still
      // vanish it stays zero rather than dividing by 0.
      if (norm > 0.0) {
        for (int64_t c = 0; c < d; ++c) row[c] /= norm;
      }
    }
    for (int64_t r = 0; r < d; ++r) {
      double norm = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        const double g = Gaussian(rng);
        norm += g * g;
      }
      norm = std::sqrt(norm);
      if (r0 + r >= m) continue;
      for (int64_t c = 0; c < d; ++c) {
        omega[(r0 + r) * d + c] = block[r * d + c] * norm;
      }
    }
  }
  return omega;
}

std::shared_ptr<const std::vector<float>> CachedFavorMatrix(int64_t m,
                                                            int64_t d,
                                                            uint64_t seed) {
  using Key = std::tuple<int64_t, int64_t, uint64_t>;
  struct Cache {
    absl::Mutex mu;
    std::deque<std::pair<Key, std::shared_ptr<const std::vector<float>>>>
        entries ABSL_GUARDED_BY(mu);  // most recently used first
  };
  static Cache* const cache = new Cache;
  const Key key(m, d, seed);
  {
    absl::MutexLock lock(&cache->mu);
    for (auto it = cache->entries.begin(); it != cache->entries.end(); ++it) {
      if (it->first == key) {
        auto found = it->second;
        cache->entries.erase(it);
        cache->entries.emplace_front(key, found);
        return found;
      }
    }
  }
  // Drawn outside the lock: other calls should not wait for it.
  const std::vector<double> exact = FavorMatrix(m, d, seed);
  auto rounded =
      std::make_shared<std::vector<float>>(exact.begin(), exact.end());
  absl::MutexLock lock(&cache->mu);
  cache->entries.emplace_front(key, rounded);
  if (cache->entries.size() > kCacheEntries) cache->entries.pop_back();
  return rounded;
}

}  // namespace attnserve
