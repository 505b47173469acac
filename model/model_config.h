#ifndef ATTNSERVE_MODEL_MODEL_CONFIG_H_
#define ATTNSERVE_MODEL_MODEL_CONFIG_H_

// A hosted attention layer's config.json (docs/models.md): what the layer
// computes and the shapes of its weights.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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
};
enum class Scoring {
  kScaledDot,  // q·k / sqrt(head_dim)
  kGeneral,    // Luong: q·W_h·k, unscaled
  kAdditive,   // Bahdanau: v_hᵀ·tanh(W1_h·q + W2_h·k), unscaled
};
enum class ModelDType { kFloat32, kBFloat16 };

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
};

// Parses config.json text. Optional keys take their defaults (filled in, so
// num_kv_heads and head_dim are never 0 in the result).
// InvalidArgument naming the key for: malformed JSON, an unknown key, a value
// of the wrong JSON type, an unknown enum string, d_model/num_heads/...
// not positive, num_heads % num_kv_heads != 0, d_model % num_heads != 0
// without head_dim, an odd head_dim with "rope", norm_eps or rope_theta not
// positive and finite, dimensions above 65536.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json);

// The config as JSON with every key (defaults filled in), for GetServerInfo.
std::string ModelConfigToJson(const ModelConfig& config);

// "post", "pre", "none"; "none", "sinusoidal", "rope"; "scaled_dot",
// "general", "additive"; "float32", "bfloat16".
absl::string_view NormPlacementName(NormPlacement norm);
absl::string_view PositionalName(Positional positional);
absl::string_view ScoringName(Scoring scoring);
absl::string_view ModelDTypeName(ModelDType dtype);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_MODEL_CONFIG_H_
