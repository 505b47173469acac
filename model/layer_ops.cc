#include "model/layer_ops.h"

#include <cmath>
#include <vector>

namespace attnserve::model {
namespace {

int64_t Position(const int32_t* positions, int64_t period, int64_t r) {
  return positions != nullptr ? positions[r] : r % period;
}

// base^(-2i/dim) for i < count: the frequencies of sinusoidal encodings.
std::vector<double> InverseFrequencies(int64_t count, double base,
                                       int64_t dim) {
  std::vector<double> f(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    f[static_cast<size_t>(i)] =
        std::pow(base, -2.0 * static_cast<double>(i) / dim);
  }
  return f;
}

}  // namespace

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* gamma,
               const float* beta, double eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * dim;
    float* out = y + r * dim;
    double sum = 0;
    for (int64_t c = 0; c < dim; ++c) sum += in[c];
    const double mean = sum / dim;
    double sq = 0;
    for (int64_t c = 0; c < dim; ++c) {
      const double d = in[c] - mean;
      sq += d * d;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / dim + eps));
    const float m = static_cast<float>(mean);
    for (int64_t c = 0; c < dim; ++c) {
      out[c] = (in[c] - m) * inv * gamma[c] + beta[c];
    }
  }
}

void RelativeSinusoid(int64_t first, int64_t rows, int64_t dim, float* out) {
  const int64_t half = dim / 2;
  const std::vector<double> inv_freq = InverseFrequencies(half, 10000.0, dim);
  for (int64_t t = 0; t < rows; ++t) {
    const double p = static_cast<double>(first + t);
    float* row = out + t * dim;
    for (int64_t i = 0; i < half; ++i) {
      row[i] = static_cast<float>(std::sin(p * inv_freq[i]));
      row[half + i] = static_cast<float>(std::cos(p * inv_freq[i]));
    }
  }
}

void AddSinusoidal(float* x, int64_t rows, int64_t dim,
                   const int32_t* positions, int64_t period) {
  // 10000^(-2i/dim) for each pair, computed once.
  const std::vector<double> inv_freq =
      InverseFrequencies((dim + 1) / 2, 10000.0, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(Position(positions, period, r));
    float* row = x + r * dim;
    for (int64_t c = 0; c < dim; ++c) {
      const double angle = p * inv_freq[static_cast<size_t>(c / 2)];
      row[c] +=
          static_cast<float>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
}

void ApplyRope(float* x, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t row_stride, const int32_t* positions, int64_t period,
               double theta) {
  const int64_t half = head_dim / 2;
  const std::vector<double> inv_freq =
      InverseFrequencies(half, theta, head_dim);
  std::vector<float> cos_row(static_cast<size_t>(half));
  std::vector<float> sin_row(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(Position(positions, period, r));
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * inv_freq[static_cast<size_t>(i)];
      cos_row[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle));
      sin_row[static_cast<size_t>(i)] = static_cast<float>(std::sin(angle));
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        const float c = cos_row[static_cast<size_t>(i)];
        const float s = sin_row[static_cast<size_t>(i)];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void ProjectAlongSequence(const float* x, int64_t batch, int64_t k_len,
                          int64_t width, const float* proj, int64_t k,
                          int64_t max_len, const int32_t* lengths, float* out) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < k; ++r) {
      const int64_t len = lengths != nullptr ? lengths[b] : k_len;
      float* y = out + (b * k + r) * width;
      for (int64_t c = 0; c < width; ++c) y[c] = 0.0f;
      const float* e = proj + r * max_len;
      for (int64_t j = 0; j < len; ++j) {
        const float w = e[j];
        const float* row = x + (b * k_len + j) * width;
        for (int64_t c = 0; c < width; ++c) y[c] += w * row[c];
      }
    }
  }
}

}  // namespace attnserve::model
