#include "bench/layer_weights.h"

#include <cmath>

#include "base/random.h"

namespace attnserve::bench {

std::vector<float> Uniform(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  base::SplitMix64 rng(seed);
  for (float& x : v) x = scale * rng.Uniform(-1.0f, 1.0f);
  return v;
}

model::LayerWeights LayerWeightsFor(const model::ModelConfig& c,
                                    int64_t additive_dim) {
  const size_t d = c.d_model, q = c.num_heads * c.head_dim,
               kv = c.num_kv_heads * c.head_dim, hd = c.head_dim,
               h = c.num_heads;
  model::LayerWeights w;
  const float s = 1.0f / std::sqrt(float(d));
  w.q_proj_weight = Uniform(q * d, 1, s);
  w.k_proj_weight = Uniform(kv * d, 2, s);
  w.v_proj_weight = Uniform(kv * d, 3, s);
  w.o_proj_weight = Uniform(d * q, 4, s);
  w.q_proj_bias = Uniform(q, 5, 0.1f);
  w.k_proj_bias = Uniform(kv, 6, 0.1f);
  w.v_proj_bias = Uniform(kv, 7, 0.1f);
  w.o_proj_bias = Uniform(d, 8, 0.1f);
  w.norm_weight.assign(d, 1.0f);
  w.norm_bias.assign(d, 0.0f);
  if (c.scoring == model::Scoring::kGeneral) {
    w.general_weight = Uniform(h * hd * hd, 9, 0.1f);
  }
  if (c.scoring == model::Scoring::kAdditive) {
    const size_t a = static_cast<size_t>(additive_dim);
    w.additive_w_query = Uniform(h * a * hd, 10, 0.1f);
    w.additive_w_key = Uniform(h * a * hd, 11, 0.1f);
    w.additive_v = Uniform(h * a, 12, 0.1f);
    w.additive_dim = additive_dim;
  }
  if (c.local == model::LocalAttention::kPredictive) {
    w.local_w_p = Uniform(c.local_dim * d, 13, s);
    w.local_v_p = Uniform(c.local_dim, 14, 1.0f);
  }
  return w;
}

}  // namespace attnserve::bench
