#include "model/local_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnserve::model {

bool ApplyLocalBand(const ModelConfig& c, const LocalCall& call,
                    MaskSpec* mask) {
  if (c.local != LocalAttention::kMonotonic || call.positions != nullptr) {
    return false;
  }
  const bool aligned_free =
      !mask->causal && !mask->window_left && !mask->window_right;
  if (mask->alignment != CausalAlignment::kTopLeft && !aligned_free) {
    return false;
  }
  mask->alignment = CausalAlignment::kTopLeft;
  mask->window_left =
      std::min(mask->window_left.value_or(c.local_window), c.local_window);
  mask->window_right =
      std::min(mask->window_right.value_or(c.local_window), c.local_window);
  return true;
}

std::vector<double> AlignedPositions(const ModelConfig& c,
                                     const LocalCall& call,
                                     const float* projected,
                                     const std::vector<float>& v_p) {
  std::vector<double> aligned(static_cast<size_t>(call.batch * call.q_len));
  const int64_t a = c.local_dim;
  for (int64_t b = 0; b < call.batch; ++b) {
    const double keys = call.key_lengths.empty()
                            ? static_cast<double>(call.k_len)
                            : static_cast<double>(call.key_lengths[b]);
    for (int64_t i = 0; i < call.q_len; ++i) {
      const int64_t r = b * call.q_len + i;
      if (c.local == LocalAttention::kMonotonic) {
        aligned[r] = static_cast<double>(call.QueryPosition(b, i));
        continue;
      }
      const float* row = projected + r * a;
      double logit = 0;
      for (int64_t e = 0; e < a; ++e) {
        logit += double(v_p[e]) * std::tanh(double(row[e]));
      }
      aligned[r] = keys / (1.0 + std::exp(-logit));
    }
  }
  return aligned;
}

void AddLocalWindow(const ModelConfig& c, const LocalCall& call,
                    const std::vector<double>& aligned, int64_t heads,
                    float* mask) {
  const double window = static_cast<double>(c.local_window);
  for (int64_t b = 0; b < call.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < call.q_len; ++i) {
        const double p = aligned[b * call.q_len + i];
        float* row = mask + ((b * heads + h) * call.q_len + i) * call.k_len;
        for (int64_t j = 0; j < call.k_len; ++j) {
          if (std::abs(double(call.KeyPosition(b, j)) - p) > window) {
            row[j] = -std::numeric_limits<float>::infinity();
          }
        }
      }
    }
  }
}

void ApplyGaussian(const ModelConfig& c, const LocalCall& call,
                   const std::vector<double>& aligned, const float* v,
                   float* weights, float* out) {
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t group = hq / hkv;
  const double sigma = c.local_window / 2.0;
  std::vector<float> gauss(static_cast<size_t>(call.k_len));
  std::vector<float> acc(static_cast<size_t>(hd));
  for (int64_t b = 0; b < call.batch; ++b) {
    for (int64_t i = 0; i < call.q_len; ++i) {
      const double p = aligned[b * call.q_len + i];
      for (int64_t j = 0; j < call.k_len; ++j) {
        // Keys outside the window have no weight to multiply.
        const double dist = double(call.KeyPosition(b, j)) - p;
        gauss[j] = std::abs(dist) > c.local_window
                       ? 0.0f
                       : static_cast<float>(
                             std::exp(-dist * dist / (2 * sigma * sigma)));
      }
      for (int64_t h = 0; h < hq; ++h) {
        float* w = weights + ((b * hq + h) * call.q_len + i) * call.k_len;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < call.k_len; ++j) {
          w[j] *= gauss[j];
          if (w[j] == 0) continue;
          const float* vr = v + ((b * call.k_len + j) * hkv + h / group) * hd;
          for (int64_t e = 0; e < hd; ++e) acc[e] += w[j] * vr[e];
        }
        std::copy(acc.begin(), acc.end(),
                  out + ((b * call.q_len + i) * hq + h) * hd);
      }
    }
  }
}

}  // namespace attnserve::model
