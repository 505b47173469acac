#ifndef ATTNSERVE_MODEL_MODEL_CONFIG_H_
#define ATTNSERVE_MODEL_MODEL_CONFIG_H_

// A hosted attention layer's config.json (docs/models.md): what the layer
// computes and the shapes of its weights.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/attention.h"

namespace attnserve::model {

enum class NormPlacement {
  kPost,  // LN(x + attn(x))
  kPre,   // x + attn(LN(x))
  kNone,  // attn(x), no residual
};
enum class Positional {
  kNone,
  kSinusoidal,  // x + PE(position) before everything
  kRope,        // q and k rotated (rotate-half: pairs (i, i + head_dim / 2))
  kRelative,    // Transformer-XL: relative position keys W_R·R(d(i) − j),
                // content bias u, position bias v (relative.* weights)
};
enum class Scoring {
  kScaledDot,  // q·k / sqrt(head_dim)
  kDot,        // Luong: q·k, unscaled
  kGeneral,    // Luong: q·W_h·k, unscaled
  kAdditive,   // Bahdanau: v_hᵀ·tanh(W1_h·q + W2_h·k), unscaled
};
enum class ModelDType { kFloat32, kBFloat16 };
// Luong's local attention: each query attends to the keys within
// local_window positions of its aligned position p_t.
enum class LocalAttention {
  kNone,        // global: every key the mask allows
  kMonotonic,   // local-m: p_t = the query's position
  kPredictive,  // local-p: p_t = S·sigmoid(v_pᵀ·tanh(W_p·x_t)), weights
                // times a Gaussian around p_t (σ = local_window / 2)
};
// How the layer attends (docs/long_sequences.md).
enum class AttentionKind {
  kSoftmax,    // exact softmax attention
  kLinformer,  // softmax over k learned projections of the keys and values
  kLinear,     // linear attention (feature_map, num_features, seed)
  kLsh,        // Reformer's LSH attention, shared-QK (no k_proj)
};

struct ModelConfig {
  // "multi_head_attention", the only kind so far.
  std::string kind = "multi_head_attention";
  int64_t d_model = 0;
  int64_t num_heads = 0;
  // Default num_heads; must divide num_heads (GQA when smaller).
  int64_t num_kv_heads = 0;
  // Default d_model / num_heads (d_model must then be a multiple).
  int64_t head_dim = 0;
  bool bias = true;
  NormPlacement norm = NormPlacement::kPost;
  double norm_eps = 1e-5;
  Positional positional = Positional::kNone;
  double rope_theta = 10000.0;
  Scoring scoring = Scoring::kScaledDot;
  // Additive scoring's hidden size A ("additive_dim", optional): 0 = as the
  // additive.* tensors say; when set, they must agree.
  int64_t additive_dim = 0;
  ModelDType dtype = ModelDType::kFloat32;
  LocalAttention local = LocalAttention::kNone;
  // D of local attention: keys at most this far from p_t (required with
  // "local").
  int64_t local_window = 0;
  // Local-p's hidden size A_p: local.w_p is [A_p, d_model], local.v_p [A_p]
  // (required with "predictive").
  int64_t local_dim = 0;
  AttentionKind attention = AttentionKind::kSoftmax;
  // Linformer: keys and values are projected along the sequence by
  // linformer.e / linformer.f [linformer_k, linformer_max_len], Lk <=
  // linformer_max_len.
  int64_t linformer_k = 0;
  int64_t linformer_max_len = 0;
  // Linear attention's feature map ("elu", "relu", "favor") and FAVOR+'s
  // random features; LSH's rounds, buckets and chunk; the seed of both.
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  int64_t num_features = 256;
  int64_t num_hashes = 4;
  int64_t num_buckets = 64;
  int64_t chunk_size = 64;
  uint64_t seed = 0;
};

// Parses config.json text. Optional keys take their defaults (filled in, so
// num_kv_heads and head_dim are never 0 in the result).
// InvalidArgument naming the key for: malformed JSON, an unknown key, a value
// of the wrong JSON type, an unknown enum string, d_model/num_heads/...
// not positive, num_heads % num_kv_heads != 0, d_model % num_heads != 0
// without head_dim, an odd head_dim with "rope", norm_eps or rope_theta not
// positive and finite, dimensions above 65536, an "attention" other than
// "softmax" with a scoring other than "scaled_dot", "linformer" without its
// lengths, "lsh" with num_kv_heads != num_heads, "local" without
// local_window (or "predictive" with a window of 0) or with an attention
// other than "softmax", "predictive" without local_dim, "relative" with an
// attention other than "softmax", a scoring other than "scaled_dot" or
// "dot", or an odd d_model.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json);

// The config as JSON with every key (defaults filled in), for GetServerInfo.
std::string ModelConfigToJson(const ModelConfig& config);

// "post", "pre", "none"; "none", "sinusoidal", "rope", "relative";
// "scaled_dot", "dot",
// "general", "additive"; "float32", "bfloat16"; "none", "monotonic",
// "predictive".
absl::string_view NormPlacementName(NormPlacement norm);
absl::string_view PositionalName(Positional positional);
absl::string_view ScoringName(Scoring scoring);
absl::string_view ModelDTypeName(ModelDType dtype);
absl::string_view LocalAttentionName(LocalAttention local);
// "softmax", "linformer", "linear", "lsh"; "elu", "relu", "favor".
absl::string_view AttentionKindName(AttentionKind kind);
absl::string_view FeatureMapName(FeatureMap map);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_MODEL_CONFIG_H_
