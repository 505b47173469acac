#ifndef ATTNSERVE_CORE_VARIANTS_FAVOR_FEATURES_H_
#define ATTNSERVE_CORE_VARIANTS_FAVOR_FEATURES_H_

// Internal: the random matrix of FAVOR+ (LinearSpec, FeatureMap::kFavorPlus),
// drawn by a fixed procedure from the seed so that any client can rebuild it
// (docs/long_sequences.md, "Linear attention", gives the same steps):
//
//   1. A splitmix64 stream (base/random.h) starts at `seed`.
//   2. A standard normal takes two draws, u1 then u2, both UnitDouble() (a
//      multiple of 2^-53 in [0, 1)): sqrt(-2 ln(1 - u1)) * cos(2 pi u2).
//      1 - u1 is in (0, 1], so the logarithm never sees 0; the sine half of
//      Box-Muller is not used.
//   3. The m rows come in ceil(m / D) blocks of D rows. Each block draws a
//      D x D Gaussian matrix in row-major order, orthonormalises its rows by
//      modified Gram-Schmidt in double (row r loses its projection on each
//      already finished row s < r in turn, then is divided by its norm), and
//      then draws D more Gaussian vectors of D entries, one per row in row
//      order; row r is multiplied by the Euclidean norm of vector r.
//   4. Rows are kept in block order; the last block keeps only its first
//      m - D * (blocks - 1) rows (all its draws are still made).

#include <cstdint>
#include <memory>
#include <vector>

namespace attnserve {

// The matrix [m x d] row-major, in double. m, d >= 1.
std::vector<double> FavorMatrix(int64_t m, int64_t d, uint64_t seed);

// FavorMatrix rounded to float, from a small process-wide cache of the most
// recently used (m, d, seed): a call with a new seed costs O(m d^2).
// Thread-safe.
std::shared_ptr<const std::vector<float>> CachedFavorMatrix(int64_t m,
                                                            int64_t d,
                                                            uint64_t seed);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VARIANTS_FAVOR_FEATURES_H_
