#ifndef ATTNSERVE_MODEL_LOCAL_ATTENTION_H_
#define ATTNSERVE_MODEL_LOCAL_ATTENTION_H_

// Internal: Luong's local attention in a hosted layer (docs/models.md, "What
// a layer computes"): each query's aligned position p_t, the window of keys
// within local_window of it (as an additive mask the engine applies with the
// call's other mask parts), and local-p's Gaussian on the weights.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/attention.h"
#include "model/model_config.h"

namespace attnserve::model {

// Where a call's queries and keys sit.
struct LocalCall {
  int64_t batch = 0, q_len = 0, k_len = 0;
  // [B·Lq] or empty (0..Lq-1): the queries' positions, which are also the
  // keys' in self-attention.
  const int32_t* positions = nullptr;
  bool cross = false;
  // [B] or empty: the keys of each batch element (S of local-p), else Lk.
  absl::Span<const int32_t> key_lengths;

  // The position of key j of batch element b.
  int64_t KeyPosition(int64_t b, int64_t j) const {
    return cross || positions == nullptr ? j : positions[b * q_len + j];
  }
  int64_t QueryPosition(int64_t b, int64_t i) const {
    return positions == nullptr ? i : positions[b * q_len + i];
  }
};

// Local-m over the default positions (query i at i, key j at j) is the band
// |j - i| <= local_window: the engine's own sliding window, which `mask`
// takes (narrowing a window it has) when its alignment is top-left or free.
// False, leaving `mask` as it was, for any other call (its window then goes
// into a float mask).
bool ApplyLocalBand(const ModelConfig& config, const LocalCall& call,
                    MaskSpec* mask);

// p_t of every query row [B·Lq]: local-m, its position; local-p,
// S·sigmoid(v_pᵀ·tanh(W_p·x_t)) from `projected` [B·Lq, A_p], the rows W_p·x_t
// (in double precision after the product), with v_p [A_p].
std::vector<double> AlignedPositions(const ModelConfig& config,
                                     const LocalCall& call,
                                     const float* projected,
                                     const std::vector<float>& v_p);

// mask[b, h, i, j] (dims [B, heads, Lq, Lk], dense) += -inf where key j is
// more than local_window from p_t of row (b, i).
void AddLocalWindow(const ModelConfig& config, const LocalCall& call,
                    const std::vector<double>& aligned, int64_t heads,
                    float* mask);

// Local-p: weights[b, h, i, j] ([B, Hq, Lq, Lk]) *= exp(-(pos_j - p_t)² /
// (2σ²)) with σ = local_window / 2, then out[b, i, h, :] = Σ_j weights ·
// v[b, j, h / (Hq / Hkv), :] (out [B, Lq, Hq, hd], v [B, Lk, Hkv, hd]).
void ApplyGaussian(const ModelConfig& config, const LocalCall& call,
                   const std::vector<double>& aligned, const float* v,
                   float* weights, float* out);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_LOCAL_ATTENTION_H_
