#include "core/variants/lsh.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/random.h"

namespace attnserve {

absl::Status CheckLsh(const Problem& p) {
  const LshSpec& l = p.lsh;
  if (l.num_hashes < 1 || l.num_hashes > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("lsh.num_hashes: must be in [1, 64], got ", l.num_hashes));
  }
  if (l.num_buckets != 1 &&
      (l.num_buckets < 2 || l.num_buckets > 4096 || l.num_buckets % 2 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lsh.num_buckets: must be 1 or even in [2, 4096], got ",
                     l.num_buckets));
  }
  if (l.chunk_size < 1 || l.chunk_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lsh.chunk_size: must be in [1, 65536], got ", l.chunk_size));
  }
  if (p.shape.q_len > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("query: LSH attention takes at most 2^31 - 1 positions, "
                     "got Lq = ",
                     p.shape.q_len));
  }
  const char* why =
      " is not supported by LSH attention, which attends within hash chunks "
      "(only causal and key_lengths apply)";
  return CheckOnlyCausalAndPadding(p, why);
}

double LshFlops(const Problem& p) {
  const AttentionShape& s = p.shape;
  const LshSpec& l = p.lsh;
  const double keys = std::min<double>(2.0 * l.chunk_size, s.k_len);
  // Rotations (D x num_buckets/2 per round), then every query against at
  // most two chunks of keys per round.
  const double per_round = 2.0 * s.q_len * s.head_dim * (l.num_buckets / 2.0) +
                           2.0 * s.q_len * keys * (s.head_dim + s.value_dim);
  return double(s.batch) * s.q_heads * l.num_hashes * per_round;
}

std::vector<double> LshRotations(const LshSpec& spec, int64_t head_dim) {
  const int64_t columns = spec.num_buckets / 2;
  std::vector<double> rotations(
      static_cast<size_t>(spec.num_hashes * head_dim * columns));
  base::SplitMix64 random(spec.seed);
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t n = 0; n < rotations.size(); n += 2) {
    const double u1 = static_cast<double>((random.Next() >> 11) + 1) * 0x1p-53;
    const double u2 = static_cast<double>(random.Next() >> 11) * 0x1p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    rotations[n] = r * std::cos(kTwoPi * u2);
    if (n + 1 < rotations.size()) rotations[n + 1] = r * std::sin(kTwoPi * u2);
  }
  return rotations;
}

}  // namespace attnserve
