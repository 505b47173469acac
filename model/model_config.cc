#include "model/model_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "model/json_util.h"
#include "nlohmann/json.hpp"

namespace attnserve::model {
namespace {

using nlohmann::json;

constexpr int64_t kMaxDimension = 65536;

const std::set<std::string, std::less<>>& KnownKeys() {
  static const auto* const keys =
      new std::set<std::string, std::less<>>{"kind",
                                             "d_model",
                                             "num_heads",
                                             "num_kv_heads",
                                             "head_dim",
                                             "bias",
                                             "norm",
                                             "norm_eps",
                                             "positional",
                                             "rope_theta",
                                             "scoring",
                                             "additive_dim",
                                             "dtype",
                                             "local",
                                             "local_window",
                                             "local_dim",
                                             "attention",
                                             "linformer_k",
                                             "linformer_max_len",
                                             "feature_map",
                                             "num_features",
                                             "num_hashes",
                                             "num_buckets",
                                             "chunk_size",
                                             "seed"};
  return *keys;
}

absl::Status KeyError(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("key \"", key, "\": ", what));
}

absl::Status TypeError(absl::string_view key, absl::string_view expected,
                       const json& value) {
  return KeyError(
      key, absl::StrCat("expected ", expected, ", got ", JsonTypeName(value)));
}

// Reads an integer key into `out` when present (`out` keeps its default
// otherwise). `min` and kMaxDimension bound it.
absl::Status ReadDimension(const json& object, absl::string_view key,
                           int64_t min, bool required, int64_t* out) {
  const auto it = object.find(key);
  if (it == object.end()) {
    if (required) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing required key \"", key, "\""));
    }
    return absl::OkStatus();
  }
  if (!it->is_number_integer()) return TypeError(key, "an integer", *it);
  // Integers beyond int64 arrive as number_unsigned; they are out of range
  // whatever the bounds.
  const bool too_large =
      it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(kMaxDimension);
  const int64_t value = too_large ? kMaxDimension + 1 : it->get<int64_t>();
  if (value < min || value > kMaxDimension) {
    return KeyError(
        key, absl::StrCat(JsonShortDump(*it), " is out of range (expected ",
                          min, " to ", kMaxDimension, ")"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadPositiveNumber(const json& object, absl::string_view key,
                                double* out) {
  const auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_number()) return TypeError(key, "a number", *it);
  const double value = it->get<double>();
  if (!std::isfinite(value) || value <= 0) {
    return KeyError(
        key, absl::StrCat(JsonShortDump(*it), " must be positive and finite"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadSeed(const json& object, absl::string_view key,
                      uint64_t* out) {
  const auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_number_integer() ||
      (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
    return KeyError(key, absl::StrCat("expected a non-negative integer, got ",
                                      JsonShortDump(*it)));
  }
  *out = it->get<uint64_t>();
  return absl::OkStatus();
}

absl::Status ReadBool(const json& object, absl::string_view key, bool* out) {
  const auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_boolean()) return TypeError(key, "a boolean", *it);
  *out = it->get<bool>();
  return absl::OkStatus();
}

// Maps a string key through `names` (value → enumerator) when present.
template <typename Enum>
absl::Status ReadEnum(
    const json& object, absl::string_view key,
    const std::vector<std::pair<absl::string_view, Enum>>& names, Enum* out) {
  const auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_string()) return TypeError(key, "a string", *it);
  const std::string& value = it->get_ref<const std::string&>();
  std::vector<std::string> quoted;
  for (const auto& [name, enumerator] : names) {
    if (name == value) {
      *out = enumerator;
      return absl::OkStatus();
    }
    quoted.push_back(absl::StrCat("\"", name, "\""));
  }
  return KeyError(
      key, absl::StrCat("unknown value ", JsonShortDump(*it), " (expected ",
                        absl::StrJoin(quoted, ", "), ")"));
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view text) {
  ASSIGN_OR_RETURN(const json object, ParseStrictJson(text));
  if (!object.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config must be a JSON object, got ", JsonTypeName(object)));
  }
  for (const auto& [key, value] : object.items()) {
    if (KnownKeys().count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key \"", key, "\" (expected ",
                       absl::StrJoin(KnownKeys(), ", "), ")"));
    }
  }

  ModelConfig config;
  if (const auto it = object.find("kind"); it != object.end()) {
    if (!it->is_string()) return TypeError("kind", "a string", *it);
    if (it->get_ref<const std::string&>() != "multi_head_attention") {
      return KeyError("kind", absl::StrCat("unknown value ", JsonShortDump(*it),
                                           " (expected "
                                           "\"multi_head_attention\")"));
    }
  }
  RETURN_IF_ERROR(
      ReadDimension(object, "d_model", 1, /*required=*/true, &config.d_model));
  RETURN_IF_ERROR(ReadDimension(object, "num_heads", 1, /*required=*/true,
                                &config.num_heads));
  config.num_kv_heads = config.num_heads;
  RETURN_IF_ERROR(ReadDimension(object, "num_kv_heads", 1, /*required=*/false,
                                &config.num_kv_heads));
  RETURN_IF_ERROR(ReadDimension(object, "head_dim", 1, /*required=*/false,
                                &config.head_dim));
  RETURN_IF_ERROR(ReadBool(object, "bias", &config.bias));
  RETURN_IF_ERROR(ReadEnum<NormPlacement>(object, "norm",
                                          {{"post", NormPlacement::kPost},
                                           {"pre", NormPlacement::kPre},
                                           {"none", NormPlacement::kNone}},
                                          &config.norm));
  RETURN_IF_ERROR(ReadPositiveNumber(object, "norm_eps", &config.norm_eps));
  RETURN_IF_ERROR(ReadEnum<Positional>(object, "positional",
                                       {{"none", Positional::kNone},
                                        {"sinusoidal", Positional::kSinusoidal},
                                        {"rope", Positional::kRope},
                                        {"relative", Positional::kRelative}},
                                       &config.positional));
  RETURN_IF_ERROR(ReadPositiveNumber(object, "rope_theta", &config.rope_theta));
  RETURN_IF_ERROR(ReadEnum<Scoring>(object, "scoring",
                                    {{"scaled_dot", Scoring::kScaledDot},
                                     {"dot", Scoring::kDot},
                                     {"general", Scoring::kGeneral},
                                     {"additive", Scoring::kAdditive}},
                                    &config.scoring));
  RETURN_IF_ERROR(ReadDimension(object, "additive_dim", 0, /*required=*/false,
                                &config.additive_dim));
  RETURN_IF_ERROR(ReadEnum<ModelDType>(
      object, "dtype",
      {{"float32", ModelDType::kFloat32}, {"bfloat16", ModelDType::kBFloat16}},
      &config.dtype));
  RETURN_IF_ERROR(
      ReadEnum<LocalAttention>(object, "local",
                               {{"none", LocalAttention::kNone},
                                {"monotonic", LocalAttention::kMonotonic},
                                {"predictive", LocalAttention::kPredictive}},
                               &config.local));
  const bool local = config.local != LocalAttention::kNone;
  const bool predictive = config.local == LocalAttention::kPredictive;
  // Local-p's Gaussian has σ = D / 2, so its window cannot be empty.
  RETURN_IF_ERROR(ReadDimension(object, "local_window", predictive ? 1 : 0,
                                /*required=*/local, &config.local_window));
  RETURN_IF_ERROR(ReadDimension(object, "local_dim", predictive ? 1 : 0,
                                /*required=*/predictive, &config.local_dim));
  RETURN_IF_ERROR(
      ReadEnum<AttentionKind>(object, "attention",
                              {{"softmax", AttentionKind::kSoftmax},
                               {"linformer", AttentionKind::kLinformer},
                               {"linear", AttentionKind::kLinear},
                               {"lsh", AttentionKind::kLsh}},
                              &config.attention));
  const bool linformer = config.attention == AttentionKind::kLinformer;
  RETURN_IF_ERROR(ReadDimension(object, "linformer_k", linformer ? 1 : 0,
                                /*required=*/linformer, &config.linformer_k));
  RETURN_IF_ERROR(ReadDimension(object, "linformer_max_len", linformer ? 1 : 0,
                                /*required=*/linformer,
                                &config.linformer_max_len));
  RETURN_IF_ERROR(ReadEnum<FeatureMap>(object, "feature_map",
                                       {{"elu", FeatureMap::kEluPlusOne},
                                        {"relu", FeatureMap::kRelu},
                                        {"favor", FeatureMap::kFavorPlus}},
                                       &config.feature_map));
  RETURN_IF_ERROR(ReadDimension(object, "num_features", 1, /*required=*/false,
                                &config.num_features));
  RETURN_IF_ERROR(ReadDimension(object, "num_hashes", 1, /*required=*/false,
                                &config.num_hashes));
  RETURN_IF_ERROR(ReadDimension(object, "num_buckets", 1, /*required=*/false,
                                &config.num_buckets));
  RETURN_IF_ERROR(ReadDimension(object, "chunk_size", 1, /*required=*/false,
                                &config.chunk_size));
  RETURN_IF_ERROR(ReadSeed(object, "seed", &config.seed));
  if (config.attention != AttentionKind::kSoftmax &&
      config.scoring != Scoring::kScaledDot) {
    return KeyError("attention",
                    absl::StrCat("\"", AttentionKindName(config.attention),
                                 "\" needs scoring \"scaled_dot\", got \"",
                                 ScoringName(config.scoring), "\""));
  }
  if (local && config.attention != AttentionKind::kSoftmax) {
    return KeyError("local",
                    absl::StrCat("\"", LocalAttentionName(config.local),
                                 "\" needs attention \"softmax\", got \"",
                                 AttentionKindName(config.attention), "\""));
  }
  if (config.attention == AttentionKind::kLsh &&
      config.num_kv_heads != config.num_heads) {
    return KeyError(
        "num_kv_heads",
        absl::StrCat("attention \"lsh\" shares queries and keys, "
                     "so num_kv_heads must equal num_heads ",
                     config.num_heads, ", got ", config.num_kv_heads));
  }

  if (config.num_kv_heads > config.num_heads ||
      config.num_heads % config.num_kv_heads != 0) {
    return KeyError("num_kv_heads",
                    absl::StrCat(config.num_kv_heads, " must divide num_heads ",
                                 config.num_heads));
  }
  if (config.head_dim == 0) {
    if (config.d_model % config.num_heads != 0) {
      return KeyError(
          "num_heads",
          absl::StrCat("d_model ", config.d_model,
                       " is not a multiple of num_heads ", config.num_heads,
                       " (set head_dim to choose the head size)"));
    }
    config.head_dim = config.d_model / config.num_heads;
  }
  // The attention engine's limit on D and Dv (a layer's heads have both):
  // a config beyond it would load and then fail every call.
  constexpr int kMaxLayerHeadDim = std::min(kMaxHeadDim, kMaxValueDim);
  if (config.head_dim > kMaxLayerHeadDim) {
    return KeyError(
        "head_dim",
        absl::StrCat("head_dim ", config.head_dim,
                     " (d_model / num_heads unless set) is above ",
                     kMaxLayerHeadDim, ", the largest the kernels take"));
  }
  if (config.positional == Positional::kRelative) {
    // Relative position keys are the engine's softmax over q·k (scaled or
    // not); its sinusoid pairs sin and cos over d_model.
    if (config.attention != AttentionKind::kSoftmax) {
      return KeyError("positional",
                      absl::StrCat("\"relative\" needs attention \"softmax\", "
                                   "got \"",
                                   AttentionKindName(config.attention), "\""));
    }
    if (config.scoring != Scoring::kScaledDot &&
        config.scoring != Scoring::kDot) {
      return KeyError("positional",
                      absl::StrCat("\"relative\" needs scoring \"scaled_dot\" "
                                   "or \"dot\", got \"",
                                   ScoringName(config.scoring), "\""));
    }
    if (config.d_model % 2 != 0) {
      return KeyError("d_model",
                      absl::StrCat("positional \"relative\" needs an even "
                                   "d_model, got ",
                                   config.d_model));
    }
  }
  if (config.positional == Positional::kRope && config.head_dim % 2 != 0) {
    return KeyError("head_dim",
                    absl::StrCat("positional \"rope\" needs an even head_dim, "
                                 "got ",
                                 config.head_dim));
  }
  return config;
}

std::string ModelConfigToJson(const ModelConfig& config) {
  // ordered_json keeps the keys in the order of the struct (and the docs).
  nlohmann::ordered_json out;
  out["kind"] = config.kind;
  out["d_model"] = config.d_model;
  out["num_heads"] = config.num_heads;
  out["num_kv_heads"] = config.num_kv_heads;
  out["head_dim"] = config.head_dim;
  out["bias"] = config.bias;
  out["norm"] = std::string(NormPlacementName(config.norm));
  out["norm_eps"] = config.norm_eps;
  out["positional"] = std::string(PositionalName(config.positional));
  out["rope_theta"] = config.rope_theta;
  out["scoring"] = std::string(ScoringName(config.scoring));
  out["additive_dim"] = config.additive_dim;
  out["dtype"] = std::string(ModelDTypeName(config.dtype));
  out["local"] = std::string(LocalAttentionName(config.local));
  out["local_window"] = config.local_window;
  out["local_dim"] = config.local_dim;
  out["attention"] = std::string(AttentionKindName(config.attention));
  out["linformer_k"] = config.linformer_k;
  out["linformer_max_len"] = config.linformer_max_len;
  out["feature_map"] = std::string(FeatureMapName(config.feature_map));
  out["num_features"] = config.num_features;
  out["num_hashes"] = config.num_hashes;
  out["num_buckets"] = config.num_buckets;
  out["chunk_size"] = config.chunk_size;
  out["seed"] = config.seed;
  return out.dump(-1, ' ', false,
                  nlohmann::ordered_json::error_handler_t::replace);
}

absl::string_view NormPlacementName(NormPlacement norm) {
  switch (norm) {
    case NormPlacement::kPost:
      return "post";
    case NormPlacement::kPre:
      return "pre";
    case NormPlacement::kNone:
      return "none";
  }
  return "unknown";
}

absl::string_view PositionalName(Positional positional) {
  switch (positional) {
    case Positional::kNone:
      return "none";
    case Positional::kSinusoidal:
      return "sinusoidal";
    case Positional::kRope:
      return "rope";
    case Positional::kRelative:
      return "relative";
  }
  return "unknown";
}

absl::string_view ScoringName(Scoring scoring) {
  switch (scoring) {
    case Scoring::kScaledDot:
      return "scaled_dot";
    case Scoring::kDot:
      return "dot";
    case Scoring::kGeneral:
      return "general";
    case Scoring::kAdditive:
      return "additive";
  }
  return "unknown";
}

absl::string_view ModelDTypeName(ModelDType dtype) {
  switch (dtype) {
    case ModelDType::kFloat32:
      return "float32";
    case ModelDType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

absl::string_view LocalAttentionName(LocalAttention local) {
  switch (local) {
    case LocalAttention::kNone:
      return "none";
    case LocalAttention::kMonotonic:
      return "monotonic";
    case LocalAttention::kPredictive:
      return "predictive";
  }
  return "unknown";
}

absl::string_view AttentionKindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSoftmax:
      return "softmax";
    case AttentionKind::kLinformer:
      return "linformer";
    case AttentionKind::kLinear:
      return "linear";
    case AttentionKind::kLsh:
      return "lsh";
  }
  return "unknown";
}

absl::string_view FeatureMapName(FeatureMap map) {
  switch (map) {
    case FeatureMap::kEluPlusOne:
      return "elu";
    case FeatureMap::kRelu:
      return "relu";
    case FeatureMap::kFavorPlus:
      return "favor";
  }
  return "unknown";
}

}  // namespace attnserve::model
