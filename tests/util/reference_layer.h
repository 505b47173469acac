#ifndef ATTNSERVE_TESTS_UTIL_REFERENCE_LAYER_H_
#define ATTNSERVE_TESTS_UTIL_REFERENCE_LAYER_H_

// A plain oracle of a hosted attention layer: naive double-precision
// projections, positional encodings, scores and norms around the core's
// reference attention. Slow; for tests only.

#include <vector>

#include "absl/status/status.h"
#include "model/attention_layer.h"

namespace attnserve::model::testing {

// Computes what AttentionLayer::Run computes for (config, weights) into
// `output` (f32 [B, Lq, d_model]) and, when given, `weights` (f32 [B, Hq, Lq,
// Lk]). A bf16 model rounds its weights, the projections' inputs and the
// attention's q, k, v to bf16 as the layer does (P is not rounded: the core
// reference does not model that).
absl::Status ReferenceLayer(const ModelConfig& config,
                            const LayerWeights& weights,
                            const LayerInputs& inputs,
                            std::vector<float>* output,
                            std::vector<float>* attention_weights);

}  // namespace attnserve::model::testing

#endif  // ATTNSERVE_TESTS_UTIL_REFERENCE_LAYER_H_
