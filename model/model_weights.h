#ifndef ATTNSERVE_MODEL_MODEL_WEIGHTS_H_
#define ATTNSERVE_MODEL_MODEL_WEIGHTS_H_

// A hosted layer's weights, checked against its config and widened to f32
// (a bfloat16 model narrows them again, exactly, when it packs them).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace attnserve::model {

// Row-major f32, PyTorch's conventions (Linear: weight [out, in], y = x·Wᵀ +
// b). Empty vectors for tensors the config does not use.
struct LayerWeights {
  std::vector<float> q_proj_weight;     // [Hq·hd, d_model]
  std::vector<float> k_proj_weight;     // [Hkv·hd, d_model]
  std::vector<float> v_proj_weight;     // [Hkv·hd, d_model]
  std::vector<float> o_proj_weight;     // [d_model, Hq·hd]
  std::vector<float> q_proj_bias;       // [Hq·hd] when bias
  std::vector<float> k_proj_bias;       // [Hkv·hd]
  std::vector<float> v_proj_bias;       // [Hkv·hd]
  std::vector<float> o_proj_bias;       // [d_model]
  std::vector<float> norm_weight;       // [d_model] when norm != none
  std::vector<float> norm_bias;         // [d_model]
  std::vector<float> general_weight;    // [Hq, hd, hd] when scoring = general
  std::vector<float> additive_w_query;  // [Hq, A, hd] when scoring = additive
  std::vector<float> additive_w_key;    // [Hq, A, hd]
  std::vector<float> additive_v;        // [Hq, A]
  std::vector<float> linformer_e;       // [k, max_len] when linformer
  std::vector<float> linformer_f;       // [k, max_len]
  std::vector<float> local_w_p;  // [A_p, d_model] when local = predictive
  std::vector<float> local_v_p;  // [A_p]
  // Transformer-XL's r_net weight, r_w_bias and r_r_bias when positional =
  // relative.
  std::vector<float> relative_w_r;  // [Hq·hd, d_model]
  std::vector<float> relative_u;    // [Hq, hd]
  std::vector<float> relative_v;    // [Hq, hd]
  // A (from the additive tensors); 0 unless scoring = additive.
  int64_t additive_dim = 0;
};

// The tensor names and shapes `config` needs, in a stable order (with
// additive_dim = A, taken from the file when config.additive_dim is 0).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config,
                                            int64_t additive_dim);

// Takes the tensors of `file` (read from `file_name`, used in messages) that
// `config` needs, converting F32, BF16 and F16 to f32. InvalidArgument
// naming the file and the tensor for: a missing tensor, a tensor the config
// does not use, a wrong shape (expected and actual), a non-finite value, or
// additive tensors that disagree on A (or with config.additive_dim).
absl::StatusOr<LayerWeights> LoadLayerWeights(const ModelConfig& config,
                                              const SafetensorsFile& file,
                                              absl::string_view file_name);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_MODEL_WEIGHTS_H_
