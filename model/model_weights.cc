#include "model/model_weights.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/convert.h"
#include "core/tensor.h"

namespace attnserve::model {
namespace {

constexpr int64_t kMaxAdditiveDim = 65536;

bool IsAdditive(absl::string_view name) {
  return absl::StartsWith(name, "additive.");
}

// `shape` for a message; with `unknown_a`, dimension 1 of an additive tensor
// is shown as "A" (no tensor told us its value).
std::string ShapeString(absl::Span<const int64_t> shape, bool unknown_a) {
  std::vector<std::string> dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims.push_back(unknown_a && i == 1 ? "A" : absl::StrCat(shape[i]));
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

struct Slot {
  absl::string_view name;
  std::vector<float> LayerWeights::*member;
};
constexpr Slot kSlots[] = {
    {"q_proj.weight", &LayerWeights::q_proj_weight},
    {"k_proj.weight", &LayerWeights::k_proj_weight},
    {"v_proj.weight", &LayerWeights::v_proj_weight},
    {"o_proj.weight", &LayerWeights::o_proj_weight},
    {"q_proj.bias", &LayerWeights::q_proj_bias},
    {"k_proj.bias", &LayerWeights::k_proj_bias},
    {"v_proj.bias", &LayerWeights::v_proj_bias},
    {"o_proj.bias", &LayerWeights::o_proj_bias},
    {"norm.weight", &LayerWeights::norm_weight},
    {"norm.bias", &LayerWeights::norm_bias},
    {"general.weight", &LayerWeights::general_weight},
    {"additive.w_query", &LayerWeights::additive_w_query},
    {"additive.w_key", &LayerWeights::additive_w_key},
    {"additive.v", &LayerWeights::additive_v},
    {"linformer.e", &LayerWeights::linformer_e},
    {"linformer.f", &LayerWeights::linformer_f},
    {"local.w_p", &LayerWeights::local_w_p},
    {"local.v_p", &LayerWeights::local_v_p},
    {"relative.w_r", &LayerWeights::relative_w_r},
    {"relative.u", &LayerWeights::relative_u},
    {"relative.v", &LayerWeights::relative_v},
};

// Where the tensor `name` goes in LayerWeights; nullptr for a name no config
// uses.
const Slot* FindSlot(absl::string_view name) {
  for (const Slot& slot : kSlots) {
    if (slot.name == name) return &slot;
  }
  return nullptr;
}

// Why a tensor the file holds is not wanted, when a config option explains it.
std::string UnusedHint(absl::string_view name, const ModelConfig& config) {
  if (FindSlot(name) == nullptr) return " (not a tensor of this layer)";
  if (absl::StartsWith(name, "k_proj.") &&
      config.attention == AttentionKind::kLsh) {
    return " (attention \"lsh\" shares queries and keys)";
  }
  if (absl::EndsWith(name, "_proj.bias")) return " (bias is false)";
  if (absl::StartsWith(name, "norm.")) return " (norm is \"none\")";
  if (absl::StartsWith(name, "local.")) {
    return absl::StrCat(" (local is \"", LocalAttentionName(config.local),
                        "\")");
  }
  if (absl::StartsWith(name, "relative.")) {
    return absl::StrCat(" (positional is \"", PositionalName(config.positional),
                        "\")");
  }
  if (absl::StartsWith(name, "linformer.")) {
    return absl::StrCat(" (attention is \"",
                        AttentionKindName(config.attention), "\")");
  }
  return absl::StrCat(" (scoring is \"", ScoringName(config.scoring), "\")");
}

DType CoreDType(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return DType::kFloat32;
    case SafetensorsDType::kF16:
      return DType::kFloat16;
    case SafetensorsDType::kBF16:
      return DType::kBFloat16;
  }
  return DType::kFloat32;
}

// A from the first additive tensor of the right rank, and which one it was.
struct AdditiveDim {
  int64_t value = 0;
  std::string source;
};
AdditiveDim FindAdditiveDim(const ModelConfig& config,
                            const SafetensorsFile& file) {
  if (config.additive_dim > 0) {
    return {config.additive_dim, "config additive_dim"};
  }
  for (const auto& [name, rank] :
       {std::pair<const char*, size_t>{"additive.w_query", 3},
        {"additive.w_key", 3},
        {"additive.v", 2}}) {
    const auto it = file.tensors().find(name);
    if (it != file.tensors().end() && it->second.shape.size() == rank) {
      return {it->second.shape[1], name};
    }
  }
  return {};
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config,
                                            int64_t additive_dim) {
  const int64_t d = config.d_model;
  const int64_t hq = config.num_heads;
  const int64_t hd = config.head_dim;
  const int64_t q = hq * hd;
  const int64_t kv = config.num_kv_heads * hd;
  std::vector<ExpectedTensor> out;
  const auto linear = [&](const char* name, int64_t rows, int64_t cols) {
    out.push_back({absl::StrCat(name, ".weight"), {rows, cols}});
    if (config.bias) out.push_back({absl::StrCat(name, ".bias"), {rows}});
  };
  linear("q_proj", q, d);
  // LSH attention's keys are its queries.
  if (config.attention != AttentionKind::kLsh) linear("k_proj", kv, d);
  linear("v_proj", kv, d);
  linear("o_proj", d, q);
  if (config.norm != NormPlacement::kNone) {
    out.push_back({"norm.weight", {d}});
    out.push_back({"norm.bias", {d}});
  }
  if (config.scoring == Scoring::kGeneral) {
    out.push_back({"general.weight", {hq, hd, hd}});
  }
  if (config.scoring == Scoring::kAdditive) {
    const int64_t a = additive_dim;
    out.push_back({"additive.w_query", {hq, a, hd}});
    out.push_back({"additive.w_key", {hq, a, hd}});
    out.push_back({"additive.v", {hq, a}});
  }
  if (config.attention == AttentionKind::kLinformer) {
    const int64_t k = config.linformer_k, n = config.linformer_max_len;
    out.push_back({"linformer.e", {k, n}});
    out.push_back({"linformer.f", {k, n}});
  }
  if (config.local == LocalAttention::kPredictive) {
    out.push_back({"local.w_p", {config.local_dim, d}});
    out.push_back({"local.v_p", {config.local_dim}});
  }
  if (config.positional == Positional::kRelative) {
    out.push_back({"relative.w_r", {q, d}});
    out.push_back({"relative.u", {hq, hd}});
    out.push_back({"relative.v", {hq, hd}});
  }
  return out;
}

absl::StatusOr<LayerWeights> LoadLayerWeights(const ModelConfig& config,
                                              const SafetensorsFile& file,
                                              absl::string_view file_name) {
  const auto error = [&](absl::string_view tensor, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": tensor ", tensor, what));
  };
  const AdditiveDim a = config.scoring == Scoring::kAdditive
                            ? FindAdditiveDim(config, file)
                            : AdditiveDim{};
  if (!a.source.empty() && (a.value < 1 || a.value > kMaxAdditiveDim)) {
    return error(a.source, absl::StrCat(": A = ", a.value,
                                        " (dimension 1) is "
                                        "out of range (expected 1 to ",
                                        kMaxAdditiveDim, ")"));
  }
  const std::vector<ExpectedTensor> expected = ExpectedTensors(config, a.value);

  std::set<std::string, std::less<>> wanted;
  for (const ExpectedTensor& tensor : expected) {
    const bool additive = IsAdditive(tensor.name);
    const auto it = file.tensors().find(tensor.name);
    if (it == file.tensors().end()) {
      return error(
          tensor.name,
          absl::StrCat(" is missing (expected shape ",
                       ShapeString(tensor.shape, additive && a.value == 0),
                       ")"));
    }
    if (it->second.shape != tensor.shape) {
      return error(
          tensor.name,
          absl::StrCat(
              ": shape ", ShapeString(it->second.shape, false), ", expected ",
              ShapeString(tensor.shape, additive && a.value == 0),
              additive && a.value > 0
                  ? absl::StrCat(" (A = ", a.value, " from ", a.source, ")")
                  : ""));
    }
    wanted.insert(tensor.name);
  }
  for (const auto& [name, tensor] : file.tensors()) {
    if (wanted.count(name) == 0) {
      return error(name, absl::StrCat(" is not used by this config",
                                      UnusedHint(name, config)));
    }
  }

  LayerWeights weights;
  weights.additive_dim = a.value;
  for (const ExpectedTensor& tensor : expected) {
    const SafetensorsTensor& source = file.tensors().find(tensor.name)->second;
    std::vector<float>& values = weights.*(FindSlot(tensor.name)->member);
    // The file validated data size = product(shape) × dtype size.
    const DType dtype = CoreDType(source.dtype);
    values.resize(source.data.size() / DTypeSize(dtype));
    ConvertToFloat(source.data.data(), dtype, values.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        return error(
            tensor.name,
            absl::StrCat(": element ", i, " is ",
                         std::isnan(values[i]) ? "NaN" : "infinite", " (",
                         SafetensorsDTypeName(source.dtype), ")"));
      }
    }
  }
  return weights;
}

}  // namespace attnserve::model
