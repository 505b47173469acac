#include "core/variants/linear.h"

#include "absl/strings/str_cat.h"

namespace attnserve {

absl::Status CheckLinear(const Problem& p) {
  if (p.linear.feature_map == FeatureMap::kFavorPlus &&
      (p.linear.num_features < 1 || p.linear.num_features > 4096)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linear.num_features: must be in [1, 4096] for FAVOR+, got ",
        p.linear.num_features));
  }
  const char* why =
      " cannot be linearised: linear attention sums phi(k) v^T over the keys "
      "once, so only causal and key_lengths can restrict them";
  if (p.window_left || p.window_right) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.window_left/window_right: a sliding window", why));
  }
  if (p.mask != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.explicit_mask: an explicit mask", why));
  }
  if (p.alibi != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.alibi_slopes: ALiBi", why));
  }
  if (p.block_layout != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.block_sparse: a block-sparse layout", why));
  }
  return absl::OkStatus();
}

double LinearFlops(const Problem& p) {
  const AttentionShape& s = p.shape;
  const bool favor = p.linear.feature_map == FeatureMap::kFavorPlus;
  const double f = favor ? double(p.linear.num_features) : double(s.head_dim);
  // Random features of queries and keys, S = phi(K)^T V (and z), then
  // phi(q) . S (and the denominator).
  const double per_head =
      (favor ? 2.0 * (s.q_len + s.k_len) * f * s.head_dim : 0.0) +
      2.0 * s.k_len * f * (s.value_dim + 1) +
      2.0 * s.q_len * f * (s.value_dim + 1);
  return double(s.batch) * s.q_heads * per_head;
}

absl::Status RunLinear(const Problem&, const AttentionOutputs&, const Strides4&,
                       const VecOps&, int) {
  return absl::UnimplementedError("linear attention: not built yet");
}

absl::Status ReferenceLinear(const Problem&, const AttentionOutputs&,
                             const Strides4&) {
  return absl::UnimplementedError("linear attention: not built yet");
}

}  // namespace attnserve
