// The float64 oracle of LSH attention (ReferenceLsh), written straight from
// the definition in docs/long_sequences.md ("LSH attention"): one (b, h) and
// one round at a time, every candidate list built explicitly.
//
// It hashes in double with the rotations of LshRotations, where RunLsh hashes
// in float with the same rotations rounded to float. A position whose largest
// two projections are within float rounding of each other can land in
// different buckets in the two, which changes which keys it attends: that is
// the one place where the kernel and the oracle may legitimately differ, and
// the tests keep their inputs away from such near-ties.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "core/convert.h"
#include "core/variants/lsh.h"

namespace attnserve {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// One (b, h): its queries (the keys before normalisation) and values.
struct Head {
  int64_t length = 0, dim = 0, value_dim = 0;
  std::vector<double> x;     // [L][D]
  std::vector<double> unit;  // [L][D], x / |x| (zero rows stay zero)
  std::vector<double> v;     // [L][Dv]
};

// bucket(i) = argmax of [x_i R, -x_i R], the lowest index on ties.
std::vector<int64_t> Buckets(const Head& head, const double* rotation,
                             int64_t num_buckets) {
  std::vector<int64_t> bucket(head.length, 0);
  if (num_buckets == 1) return bucket;
  const int64_t half = num_buckets / 2;
  std::vector<double> values(num_buckets);
  for (int64_t i = 0; i < head.length; ++i) {
    for (int64_t c = 0; c < half; ++c) {
      double dot = 0.0;
      for (int64_t d = 0; d < head.dim; ++d) {
        dot += head.x[i * head.dim + d] * rotation[d * half + c];
      }
      values[c] = dot;
      values[half + c] = -dot;
    }
    int64_t best = 0;
    for (int64_t c = 1; c < num_buckets; ++c) {
      if (values[c] > values[best]) best = c;
    }
    bucket[i] = best;
  }
  return bucket;
}

// Position i's attention in one round: the allowed keys among its candidates
// and their probabilities, and the round's log-sum-exp (-inf when no key is
// allowed).
struct RoundRow {
  std::vector<int64_t> keys;
  std::vector<double> probs;
  double lse = kMinusInf;
};

RoundRow AttendInRound(const Problem& p, const Head& head,
                       const std::vector<int64_t>& sorted, int64_t t,
                       int64_t key_length) {
  const int64_t length = head.length;
  const int64_t chunk = p.lsh.chunk_size;
  const int64_t c = t / chunk;
  const int64_t begin = std::max<int64_t>(0, (c - 1) * chunk);
  const int64_t end = std::min(length, (c + 1) * chunk);
  const int64_t i = sorted[t];
  auto allowed = [&](int64_t j) {
    return j < key_length && (!p.causal || j <= i);
  };
  RoundRow row;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t j = sorted[u];
    if (j != i && allowed(j)) row.keys.push_back(j);
  }
  if (row.keys.empty() && allowed(i)) row.keys.push_back(i);
  if (row.keys.empty()) return row;
  std::vector<double> scores(row.keys.size());
  double max_score = kMinusInf;
  for (size_t n = 0; n < row.keys.size(); ++n) {
    const int64_t j = row.keys[n];
    double dot = 0.0;
    for (int64_t d = 0; d < head.dim; ++d) {
      dot += head.x[i * head.dim + d] * head.unit[j * head.dim + d];
    }
    scores[n] = static_cast<double>(p.scale) * dot;
    max_score = std::max(max_score, scores[n]);
  }
  double sum = 0.0;
  row.probs.resize(scores.size());
  for (size_t n = 0; n < scores.size(); ++n) {
    row.probs[n] = std::exp(scores[n] - max_score);
    sum += row.probs[n];
  }
  for (double& prob : row.probs) prob /= sum;
  row.lse = max_score + std::log(sum);
  return row;
}

}  // namespace

absl::Status ReferenceLsh(const Problem& p, const AttentionOutputs& outputs,
                          const Strides4& out_strides) {
  const AttentionShape& s = p.shape;
  const int64_t length = s.q_len;
  const int64_t dim = s.head_dim;
  const int64_t dv = s.value_dim;
  const int64_t rounds = p.lsh.num_hashes;
  const int64_t num_buckets = p.lsh.num_buckets;
  const std::vector<double> rotations = LshRotations(p.lsh, dim);
  const int64_t rotation_size = dim * (num_buckets / 2);
  float* weights =
      outputs.weights ? static_cast<float*>(outputs.weights->data) : nullptr;

  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t key_length =
        p.key_lengths != nullptr ? p.key_lengths[b] : length;
    for (int64_t h = 0; h < s.q_heads; ++h) {
      Head head;
      head.length = length;
      head.dim = dim;
      head.value_dim = dv;
      head.x.resize(length * dim);
      head.unit.resize(length * dim);
      head.v.resize(length * dv);
      for (int64_t i = 0; i < length; ++i) {
        double norm2 = 0.0;
        for (int64_t d = 0; d < dim; ++d) {
          const double x =
              LoadAsFloat(p.q, p.dtype, p.q_strides.offset(b, h, i) + d);
          head.x[i * dim + d] = x;
          norm2 += x * x;
        }
        const double norm = std::sqrt(norm2);
        for (int64_t d = 0; d < dim; ++d) {
          head.unit[i * dim + d] =
              norm > 0.0 ? head.x[i * dim + d] / norm : 0.0;
        }
        for (int64_t d = 0; d < dv; ++d) {
          head.v[i * dv + d] =
              LoadAsFloat(p.v, p.dtype, p.v_strides.offset(b, h, i) + d);
        }
      }

      // Round by round: the sorted order, then every position's o_r and
      // lse_r.
      std::vector<std::vector<int64_t>> sorted(rounds);
      std::vector<double> lse(rounds * length);
      std::vector<double> o(rounds * length * dv, 0.0);
      for (int64_t r = 0; r < rounds; ++r) {
        const std::vector<int64_t> bucket =
            Buckets(head, rotations.data() + r * rotation_size, num_buckets);
        std::vector<int64_t>& order = sorted[r];
        order.resize(length);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
          return bucket[a] < bucket[c];
        });
        for (int64_t t = 0; t < length; ++t) {
          const int64_t i = order[t];
          const RoundRow row = AttendInRound(p, head, order, t, key_length);
          lse[r * length + i] = row.lse;
          double* oi = &o[(r * length + i) * dv];
          for (size_t n = 0; n < row.keys.size(); ++n) {
            for (int64_t d = 0; d < dv; ++d) {
              oi[d] += row.probs[n] * head.v[row.keys[n] * dv + d];
            }
          }
        }
      }

      // Rounds combined by their log-sum-exp.
      std::vector<double> total(length, kMinusInf);
      for (int64_t i = 0; i < length; ++i) {
        double max_lse = kMinusInf;
        for (int64_t r = 0; r < rounds; ++r) {
          max_lse = std::max(max_lse, lse[r * length + i]);
        }
        std::vector<double> out(dv, 0.0);
        if (max_lse != kMinusInf) {
          double sum = 0.0;
          for (int64_t r = 0; r < rounds; ++r) {
            sum += std::exp(lse[r * length + i] - max_lse);
          }
          total[i] = max_lse + std::log(sum);
          for (int64_t r = 0; r < rounds; ++r) {
            const double w = std::exp(lse[r * length + i] - total[i]);
            for (int64_t d = 0; d < dv; ++d) {
              out[d] += w * o[(r * length + i) * dv + d];
            }
          }
        }
        for (int64_t d = 0; d < dv; ++d) {
          StoreFromFloat(outputs.output.data, outputs.output.dtype,
                         out_strides.offset(b, h, i) + d,
                         static_cast<float>(out[d]));
        }
      }

      if (weights == nullptr) continue;
      float* w = weights + (b * s.q_heads + h) * length * length;
      std::vector<double> wrow(length);
      for (int64_t i = 0; i < length; ++i) {
        std::fill(wrow.begin(), wrow.end(), 0.0);
        for (int64_t r = 0; r < rounds && total[i] != kMinusInf; ++r) {
          const std::vector<int64_t>& order = sorted[r];
          const int64_t t =
              std::find(order.begin(), order.end(), i) - order.begin();
          const RoundRow row = AttendInRound(p, head, order, t, key_length);
          if (row.keys.empty()) continue;
          const double share = std::exp(row.lse - total[i]);
          for (size_t n = 0; n < row.keys.size(); ++n) {
            wrow[row.keys[n]] += share * row.probs[n];
          }
        }
        for (int64_t j = 0; j < length; ++j) {
          w[i * length + j] = static_cast<float>(wrow[j]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
