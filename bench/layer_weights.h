#ifndef ATTNSERVE_BENCH_LAYER_WEIGHTS_H_
#define ATTNSERVE_BENCH_LAYER_WEIGHTS_H_

// Seeded weights for a hosted layer in the benchmarks: what every layer has
// (the four projections with biases, uniform in ±1/sqrt(d_model) and ±0.1; a
// unit norm) and what its config's scoring and local attention add.

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace attnserve::bench {

// n values uniform in [-scale, scale) from `seed`.
std::vector<float> Uniform(size_t n, uint64_t seed, float scale);

// `additive_dim`: the additive scoring's inner size (used only by it).
model::LayerWeights LayerWeightsFor(const model::ModelConfig& c,
                                    int64_t additive_dim = 0);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_LAYER_WEIGHTS_H_
