#include "model/attention_layer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/malloc_policy.h"
#include "core/convert.h"
#include "core/dnnl_context.h"
#include "core/scoring.h"
#include "core/status_macros.h"
#include "model/layer_ops.h"
#include "model/local_attention.h"
#include "model/packed_matmul.h"

namespace attnserve::model {
namespace {

// `rows` × `cols` f32 values as product operands: themselves, or rounded to
// bf16 into `buffer` for a bf16 model.
const void* Operand(const float* values, int64_t count, bool bf16,
                    std::vector<uint16_t>* buffer) {
  if (!bf16) return values;
  buffer->resize(static_cast<size_t>(count));
  ConvertFromFloat(values, buffer->data(), DType::kBFloat16,
                   static_cast<size_t>(count));
  return buffer->data();
}

// A per-head column `offset` into a buffer of rows. A buffer of no rows (no
// batch, no queries or no keys) is an empty vector's null data, which stays
// null: there is nothing to offset into (null + offset is undefined), and the
// products read and write no row of it.
template <typename T>
T* Column(T* rows, int64_t offset) {
  return rows == nullptr ? nullptr : rows + offset;
}

// Column for an operand of either type.
const void* Advance(const void* operand, int64_t offset, bool bf16) {
  return Column(static_cast<const char*>(operand), offset * (bf16 ? 2 : 4));
}

// scores[b, h, i, j] += the explicit mask broadcast to [B, H, Lq, Lk]: a bool
// mask adds -inf where false, a float mask its value.
void AddExplicitMask(const TensorView& mask, const std::array<int64_t, 4>& dims,
                     float* scores) {
  // Strides of the mask aligned to the right, 0 along broadcast axes.
  std::array<int64_t, 4> strides{};
  for (int a = 0; a < mask.rank; ++a) {
    const int axis = 4 - mask.rank + a;
    strides[axis] = mask.shape[a] == 1 ? 0 : mask.strides[a];
  }
  int64_t index = 0;
  for (int64_t b = 0; b < dims[0]; ++b) {
    for (int64_t h = 0; h < dims[1]; ++h) {
      for (int64_t i = 0; i < dims[2]; ++i) {
        for (int64_t j = 0; j < dims[3]; ++j, ++index) {
          const int64_t m =
              b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3];
          if (mask.dtype == DType::kBool) {
            if (static_cast<const uint8_t*>(mask.data)[m] == 0) {
              scores[index] = -INFINITY;
            }
          } else {
            scores[index] += static_cast<const float*>(mask.data)[m];
          }
        }
      }
    }
  }
}

// The method of the engine call of a layer of `c` (LSH's key is its query:
// the call has none).
void ApplyMethod(const ModelConfig& c, AttentionInputs* attention) {
  switch (c.attention) {
    case AttentionKind::kLinear:
      attention->method = AttentionMethod::kLinear;
      attention->linear.feature_map = c.feature_map;
      attention->linear.num_features = c.num_features;
      attention->linear.seed = c.seed;
      break;
    case AttentionKind::kLsh:
      attention->method = AttentionMethod::kLsh;
      attention->lsh.num_hashes = c.num_hashes;
      attention->lsh.num_buckets = c.num_buckets;
      attention->lsh.chunk_size = c.chunk_size;
      attention->lsh.seed = c.seed;
      attention->key = TensorView();
      break;
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
      break;
  }
}

// A Linformer layer mixes the keys along the sequence before attending, so
// only padding (applied in the projection) can restrict them.
absl::Status CheckLinformerCall(const MaskSpec& mask, int64_t batch,
                                int64_t k_len, bool weights) {
  const char* why =
      " does not apply to a Linformer layer, which attends over k learned "
      "mixtures of the keys (only key_lengths can restrict them)";
  if (mask.causal)
    return absl::InvalidArgumentError(absl::StrCat("mask.causal", why));
  if (mask.window_left || mask.window_right) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask.window_left/window_right", why));
  }
  if (mask.explicit_mask) {
    return absl::InvalidArgumentError(absl::StrCat("mask.explicit_mask", why));
  }
  if (!mask.alibi_slopes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("mask.alibi_slopes", why));
  }
  if (mask.block_sparse) {
    return absl::InvalidArgumentError(absl::StrCat("mask.block_sparse", why));
  }
  if (mask.relative_bias) {
    return absl::InvalidArgumentError(absl::StrCat("mask.relative_bias", why));
  }
  if (weights) {
    return absl::InvalidArgumentError(
        "return_weights: a Linformer layer attends over k learned mixtures of "
        "the keys, so it has no weights per key");
  }
  if (!mask.key_lengths.empty()) {
    if (static_cast<int64_t>(mask.key_lengths.size()) != batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask.key_lengths: expected ", batch,
          " entries (one per batch), got ", mask.key_lengths.size()));
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (mask.key_lengths[b] < 0 || mask.key_lengths[b] > k_len) {
        return absl::InvalidArgumentError(
            absl::StrCat("mask.key_lengths[", b, "] = ", mask.key_lengths[b],
                         " is out of range [0, Lk = ", k_len, "]"));
      }
    }
  }
  return absl::OkStatus();
}

// Rows of the warm-up call a layer makes when it loads.
constexpr int64_t kWarmUpLength = 100;

// WarmUp readies the calling thread's heap for a call of this many rows
// (Lq = Lk): twice its WorkingBytes, at most kMaxWarmHeapBytes (with once,
// the call's input and output and the gaps between buffers left a test's
// L1000 call 132 of its 562 pages to fault in; with twice, 4).
constexpr int64_t kWarmHeapLength = 1024;
constexpr int64_t kMaxWarmHeapBytes = int64_t{32} << 20;

// The relative distances d(i) − j a call's scores can have (d(i) = i, or
// i + Lk − Lq bottom-right), none below 0 under a causal mask: the rows of
// its relative keys, row t at distance first + t.
struct RelativeRange {
  int64_t first = 0, rows = 1;
  int64_t zero_row() const { return std::clamp<int64_t>(-first, 0, rows - 1); }
};
RelativeRange RelativeRangeOf(const MaskSpec& mask, int64_t lq, int64_t lk) {
  const int64_t o =
      mask.alignment == CausalAlignment::kBottomRight ? lk - lq : 0;
  RelativeRange r;
  r.first = o - (lk - 1);
  if (mask.causal) r.first = std::max<int64_t>(r.first, 0);
  r.rows = std::max<int64_t>(1, lq - 1 + o - r.first + 1);
  return r;
}

}  // namespace

struct AttentionLayer::Impl {
  ModelConfig config;
  int64_t additive_dim = 0;
  std::vector<float> norm_weight, norm_bias, additive_v;
  // Linformer's [k, max_len] projections of keys and values.
  std::vector<float> linformer_e, linformer_f;
  // Local-p's v_p [A_p] (W_p is local_proj).
  std::vector<float> local_v_p;
  std::unique_ptr<PackedMatmul> q_proj, k_proj, v_proj, o_proj;
  // Local-p's W_p·x, in f32 whatever the layer's dtype.
  std::unique_ptr<PackedMatmul> local_proj;
  // Per query head: q·W_h (general); q·W1_hᵀ and k·W2_hᵀ (additive).
  std::vector<std::unique_ptr<PackedMatmul>> general, additive_q, additive_k;
  // Positional "relative": W_R·R in f32 whatever the layer's dtype, the
  // content bias u and the relative keys' query bias v − u, [Hq·hd] each.
  std::unique_ptr<PackedMatmul> relative_proj;
  std::vector<float> relative_u, relative_query_bias;

  bool bf16() const { return config.dtype == ModelDType::kBFloat16; }
  int64_t q_width() const { return config.num_heads * config.head_dim; }
  int64_t kv_width() const { return config.num_kv_heads * config.head_dim; }
};

AttentionLayer::AttentionLayer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
AttentionLayer::~AttentionLayer() = default;

const ModelConfig& AttentionLayer::config() const { return impl_->config; }

absl::StatusOr<std::unique_ptr<AttentionLayer>> AttentionLayer::Create(
    const ModelConfig& config, const LayerWeights& w) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->norm_weight = w.norm_weight;
  impl->norm_bias = w.norm_bias;
  impl->additive_v = w.additive_v;
  impl->additive_dim = w.additive_dim;
  impl->linformer_e = w.linformer_e;
  impl->linformer_f = w.linformer_f;
  impl->local_v_p = w.local_v_p;
  // The config as loaded may leave A to the tensors; the layer's config says
  // it (GetServerInfo reports it, and clients count FLOPs with it).
  if (config.scoring == Scoring::kAdditive) {
    impl->config.additive_dim = w.additive_dim;
  }
  const int64_t d = config.d_model, hd = config.head_dim;
  const int64_t hq = config.num_heads;
  const bool bf16 = impl->bf16();
  auto linear = [&](int64_t out, int64_t in, const std::vector<float>& weight,
                    const std::vector<float>& bias)
      -> absl::StatusOr<std::unique_ptr<PackedMatmul>> {
    PackedMatmulSpec spec;
    spec.k = in;
    spec.n = out;
    spec.bf16 = bf16;
    return PackedMatmul::Create(spec, weight.data(),
                                config.bias ? bias.data() : nullptr);
  };
  ASSIGN_OR_RETURN(impl->q_proj,
                   linear(impl->q_width(), d, w.q_proj_weight, w.q_proj_bias));
  if (config.attention != AttentionKind::kLsh) {
    ASSIGN_OR_RETURN(impl->k_proj, linear(impl->kv_width(), d, w.k_proj_weight,
                                          w.k_proj_bias));
  }
  ASSIGN_OR_RETURN(impl->v_proj,
                   linear(impl->kv_width(), d, w.v_proj_weight, w.v_proj_bias));
  ASSIGN_OR_RETURN(impl->o_proj,
                   linear(d, impl->q_width(), w.o_proj_weight, w.o_proj_bias));
  if (config.local == LocalAttention::kPredictive) {
    PackedMatmulSpec spec;
    spec.k = d;
    spec.n = config.local_dim;
    ASSIGN_OR_RETURN(impl->local_proj,
                     PackedMatmul::Create(spec, w.local_w_p.data(), nullptr));
  }
  if (config.positional == Positional::kRelative) {
    PackedMatmulSpec spec;
    spec.k = d;
    spec.n = impl->q_width();
    ASSIGN_OR_RETURN(
        impl->relative_proj,
        PackedMatmul::Create(spec, w.relative_w_r.data(), nullptr));
    impl->relative_u = w.relative_u;
    impl->relative_query_bias.resize(w.relative_v.size());
    for (size_t e = 0; e < w.relative_v.size(); ++e) {
      impl->relative_query_bias[e] = w.relative_v[e] - w.relative_u[e];
    }
  }
  if (config.scoring == Scoring::kGeneral) {
    for (int64_t h = 0; h < hq; ++h) {
      // q'·k with q' = q·W_h: W_h [hd, hd] is [k, n] as stored.
      PackedMatmulSpec spec;
      spec.k = spec.n = hd;
      spec.lda = spec.ldc = impl->q_width();
      spec.weights_kn = true;
      spec.bf16 = bf16;
      ASSIGN_OR_RETURN(
          auto product,
          PackedMatmul::Create(spec, w.general_weight.data() + h * hd * hd,
                               nullptr));
      impl->general.push_back(std::move(product));
    }
  }
  if (config.scoring == Scoring::kAdditive) {
    const int64_t a = w.additive_dim;
    for (int64_t h = 0; h < hq; ++h) {
      // W1_h, W2_h [A, hd]: Linear's [n, k].
      PackedMatmulSpec q_spec;
      q_spec.k = hd;
      q_spec.n = a;
      q_spec.lda = impl->q_width();
      q_spec.ldc = hq * a;
      q_spec.bf16 = bf16;
      ASSIGN_OR_RETURN(
          auto q_product,
          PackedMatmul::Create(q_spec, w.additive_w_query.data() + h * a * hd,
                               nullptr));
      PackedMatmulSpec k_spec = q_spec;
      k_spec.lda = impl->kv_width();
      ASSIGN_OR_RETURN(
          auto k_product,
          PackedMatmul::Create(k_spec, w.additive_w_key.data() + h * a * hd,
                               nullptr));
      impl->additive_q.push_back(std::move(q_product));
      impl->additive_k.push_back(std::move(k_product));
    }
  }
  std::unique_ptr<AttentionLayer> layer(new AttentionLayer(std::move(impl)));
  RETURN_IF_ERROR(layer->WarmUpAtLoad());
  return layer;
}

absl::Status AttentionLayer::WarmUpAtLoad() const {
  const ModelConfig& c = impl_->config;
  EngineOptions options;
  options.num_threads = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                   AttentionEngine::Create(options));
  // The attention's tiles, for every Lq and Lk (the engines share them).
  static const char kPlaceholder = 0;
  const DType dtype = impl_->bf16() ? DType::kBFloat16 : DType::kFloat32;
  AttentionInputs like;
  like.layout = Layout::kBLHD;
  like.query =
      MakeTensorView(&kPlaceholder, dtype, {1, 1, c.num_heads, c.head_dim});
  like.key =
      MakeTensorView(&kPlaceholder, dtype, {1, 1, c.num_kv_heads, c.head_dim});
  like.value = like.key;
  ApplyMethod(c, &like);
  RETURN_IF_ERROR(engine->Prepare(like));
  return WarmUpCall(*engine);
}

absl::Status AttentionLayer::WarmUp(AttentionEngine& engine) const {
  base::TouchHeap(std::min(
      kMaxWarmHeapBytes,
      2 * WorkingBytes(LayerShape{1, kWarmHeapLength, kWarmHeapLength})));
  return WarmUpCall(engine);
}

absl::Status AttentionLayer::WarmUpCall(AttentionEngine& engine) const {
  const ModelConfig& c = impl_->config;
  // One call through every step (the projections' first execution, the
  // score functions, the thread's first parallel region), on zeros.
  const int64_t len =
      std::min<int64_t>(kWarmUpLength, c.attention == AttentionKind::kLinformer
                                           ? c.linformer_max_len
                                           : kWarmUpLength);
  std::vector<float> zeros(static_cast<size_t>(len * c.d_model));
  std::vector<float> out(zeros.size());
  LayerInputs in;
  in.hidden =
      MakeTensorView(zeros.data(), DType::kFloat32, {1, len, c.d_model});
  LayerOutputs o;
  o.output =
      MakeMutableTensorView(out.data(), DType::kFloat32, {1, len, c.d_model});
  return Run(in, o, engine);
}

absl::StatusOr<LayerShape> AttentionLayer::Validate(
    const LayerInputs& in, const AttentionEngine& engine) const {
  const int64_t d = impl_->config.d_model;
  auto check_states = [d](absl::string_view name,
                          const TensorView& t) -> absl::Status {
    if (!IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " must be f32, bf16 or f16, got ", DTypeName(t.dtype)));
    }
    // The one home of this rule: the server's model codec leaves it here.
    if (t.rank != 3 || t.shape[2] != d) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ".shape: expected [B, ", name == "hidden" ? "Lq" : "Lk",
          ", d_model = ", d, "], got ", ShapeString(t.dims())));
    }
    if (!t.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be dense (row-major)"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_states("hidden", in.hidden));
  LayerShape shape;
  shape.batch = in.hidden.shape[0];
  shape.q_len = in.hidden.shape[1];
  shape.k_len = shape.q_len;
  if (in.memory) {
    RETURN_IF_ERROR(check_states("memory", *in.memory));
    if (in.memory->dtype != in.hidden.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory dtype ", DTypeName(in.memory->dtype),
          " differs from hidden dtype ", DTypeName(in.hidden.dtype)));
    }
    if (in.memory->shape[0] != shape.batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory batch ", in.memory->shape[0],
                       " differs from hidden batch ", shape.batch));
    }
    shape.k_len = in.memory->shape[1];
  }
  if (!in.positions.empty() &&
      impl_->config.positional == Positional::kRelative) {
    return absl::InvalidArgumentError(
        "positions: a layer with positional \"relative\" takes each "
        "distance from the mask's diagonal (d(i) − j); send no positions");
  }
  if (!in.positions.empty()) {
    if (static_cast<int64_t>(in.positions.size()) !=
        shape.batch * shape.q_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("positions must be [B, Lq] = [", shape.batch, ", ",
                       shape.q_len, "] (", shape.batch * shape.q_len,
                       " values), got ", in.positions.size(), " values"));
    }
    for (size_t i = 0; i < in.positions.size(); ++i) {
      if (in.positions[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "positions[", i, "] = ", in.positions[i], " is negative"));
      }
    }
  }
  // The attention Run would compute, over placeholder operands: validation
  // reads shapes, dtypes and strides only.
  static const char kPlaceholder = 0;
  const ModelConfig& c = impl_->config;
  int64_t attended = shape.k_len;
  if (in.mask.relative_keys) {
    // Its table is a product of the layer's own weights (W_R), which the
    // caller cannot form.
    return absl::InvalidArgumentError(
        "mask.relative_keys: relative position keys are products of a "
        "layer's own weights; a hosted layer does not take them");
  }
  if (c.attention == AttentionKind::kLsh && in.memory) {
    return absl::InvalidArgumentError(
        "memory: attention \"lsh\" is self-attention (queries and keys are "
        "shared); send no memory");
  }
  if (c.attention == AttentionKind::kLinformer) {
    if (shape.k_len > c.linformer_max_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(in.memory ? "memory" : "hidden", ": Lk = ", shape.k_len,
                       " keys exceed the model's linformer_max_len = ",
                       c.linformer_max_len));
    }
    RETURN_IF_ERROR(CheckLinformerCall(in.mask, shape.batch, shape.k_len,
                                       in.return_weights));
    attended = c.linformer_k;
  }
  const DType dtype = impl_->bf16() ? DType::kBFloat16 : DType::kFloat32;
  AttentionInputs attention;
  attention.layout = Layout::kBLHD;
  if (c.attention != AttentionKind::kLinformer) attention.mask = in.mask;
  attention.query =
      MakeTensorView(&kPlaceholder, dtype,
                     {shape.batch, shape.q_len, c.num_heads, c.head_dim});
  attention.key =
      MakeTensorView(&kPlaceholder, dtype,
                     {shape.batch, attended, c.num_kv_heads, c.head_dim});
  attention.value = attention.key;
  ApplyMethod(c, &attention);
  if (c.positional == Positional::kRelative) {
    const RelativeRange range =
        RelativeRangeOf(in.mask, shape.q_len, shape.k_len);
    RelativeKeysSpec keys;
    keys.table = MakeTensorView(&kPlaceholder, DType::kFloat32,
                                {c.num_heads, range.rows, c.head_dim});
    keys.zero_row = range.zero_row();
    keys.query_bias = impl_->relative_query_bias;
    attention.mask.relative_keys = keys;
  }
  // Local attention hands the engine its window: local-m over the default
  // positions as the engine's own window, any other as a float mask (the
  // request's explicit mask folded in); local-p asks for the weights.
  const LocalCall local{shape.batch,
                        shape.q_len,
                        shape.k_len,
                        in.positions.empty() ? nullptr : in.positions.data(),
                        in.memory.has_value(),
                        in.mask.key_lengths};
  if (c.local != LocalAttention::kNone &&
      !ApplyLocalBand(c, local, &attention.mask) &&
      !attention.mask.explicit_mask) {
    attention.mask.explicit_mask =
        MakeTensorView(&kPlaceholder, DType::kFloat32,
                       {shape.batch, 1, shape.q_len, shape.k_len});
  }
  ASSIGN_OR_RETURN(
      const AttentionPlan plan,
      engine.Validate(attention, in.return_weights ||
                                     c.local == LocalAttention::kPredictive));
  shape.attention_flops = plan.shape.flops;
  return shape;
}

double AttentionLayer::Flops(const LayerShape& s) const {
  const ModelConfig& c = impl_->config;
  const double q_rows = double(s.batch) * s.q_len;
  const double k_rows = double(s.batch) * s.k_len;
  const double hq_hd = double(c.num_heads) * c.head_dim;
  const double hkv_hd = double(c.num_kv_heads) * c.head_dim;
  const double kv_projections = c.attention == AttentionKind::kLsh ? 1 : 2;
  double flops = 2 * q_rows * c.d_model * hq_hd                      // q
                 + 2 * kv_projections * k_rows * c.d_model * hkv_hd  // k, v
                 + 2 * q_rows * hq_hd * c.d_model;                   // o
  if (c.attention == AttentionKind::kLinformer) {
    flops += 4 * double(c.linformer_k) * k_rows * hkv_hd;  // E·K, F·V
  }
  const double pairs = double(s.batch) * c.num_heads * s.q_len * s.k_len;
  flops += s.attention_flops;  // scores and P·V
  if (c.scoring == Scoring::kGeneral) flops += 2 * q_rows * hq_hd * c.head_dim;
  if (c.scoring == Scoring::kAdditive) {
    const double a = double(impl_->additive_dim);
    flops += 2 * (q_rows + k_rows) * c.num_heads * c.head_dim * a;
    flops += 2 * pairs * a;
  }
  if (c.positional == Positional::kRelative) {
    // W_R·R of each distance (the scores' second product is the engine's).
    flops += 2 * double(s.q_len + s.k_len) * c.d_model * hq_hd;
  }
  if (c.local == LocalAttention::kPredictive) {
    flops += 2 * q_rows * c.d_model * double(c.local_dim);  // W_p·x
    flops += 2 * pairs * c.head_dim;  // P·v again, after the Gaussian
  }
  return flops;
}

int64_t AttentionLayer::WorkingBytes(const LayerShape& s) const {
  const ModelConfig& c = impl_->config;
  const double d = double(c.d_model);
  const double q_rows = double(s.batch) * s.q_len;
  const double k_rows = double(s.batch) * s.k_len;
  // x (and its normed copy), y; q, the attention rows (and general scoring's
  // q); memory, k and v.
  double floats = q_rows * (3.0 * d + 3.0 * impl_->q_width()) +
                  k_rows * (d + 2.0 * impl_->kv_width());
  if (c.local != LocalAttention::kNone) {
    // The window mask and local-p's weights, [B, Hq, Lq, Lk] each at most.
    floats += 2.0 * double(s.batch) * c.num_heads * s.q_len * s.k_len;
  }
  if (c.positional == Positional::kRelative) {
    // The encoding, W_R·R and the table, a row per distance.
    floats += double(s.q_len + s.k_len) * (d + 2.0 * impl_->q_width());
  }
  const double bytes = 4.0 * floats;
  return bytes > 4e18 ? int64_t{4} << 60 : static_cast<int64_t>(bytes);
}

absl::Status AttentionLayer::Run(const LayerInputs& in, const LayerOutputs& out,
                                 AttentionEngine& engine) const {
  ASSIGN_OR_RETURN(const LayerShape shape, Validate(in, engine));
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  const int64_t b = shape.batch, lq = shape.q_len, lk = shape.k_len;
  const int64_t d = c.d_model, hd = c.head_dim;
  const int64_t hq = c.num_heads, hkv = c.num_kv_heads;
  const int64_t q_rows = b * lq, k_rows = b * lk;
  const std::array<int64_t, 3> out_shape = {b, lq, d};
  if (out.output.dims() != absl::MakeConstSpan(out_shape) ||
      !IsFloatDType(out.output.dtype) || !out.output.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output must be dense float ", ShapeString(out_shape), ", got ",
        DTypeName(out.output.dtype), " ", ShapeString(out.output.dims())));
  }
  const bool bf16 = m.bf16();
  // The projections are oneDNN products, which take the calling thread's
  // OpenMP thread count.
  const ScopedOmpThreads omp_threads(engine.num_threads());

  // The hidden states (and memory) in f32, with the sinusoidal encoding. f32
  // hidden states that nothing changes are used where they are (when aligned
  // for float access).
  const bool sinusoidal = c.positional == Positional::kSinusoidal;
  std::vector<float> x_copy;
  const float* x = static_cast<const float*>(in.hidden.data);
  if (in.hidden.dtype != DType::kFloat32 || sinusoidal ||
      reinterpret_cast<uintptr_t>(in.hidden.data) % alignof(float) != 0) {
    x_copy.resize(static_cast<size_t>(q_rows * d));
    ConvertToFloat(in.hidden.data, in.hidden.dtype, x_copy.data(),
                   x_copy.size());
    x = x_copy.data();
  }
  std::vector<float> memory;
  if (in.memory) {
    memory.resize(static_cast<size_t>(k_rows * d));
    ConvertToFloat(in.memory->data, in.memory->dtype, memory.data(),
                   memory.size());
  }
  const int32_t* positions =
      in.positions.empty() ? nullptr : in.positions.data();
  if (sinusoidal) {
    AddSinusoidal(x_copy.data(), q_rows, d, positions, lq);
    if (in.memory) AddSinusoidal(memory.data(), k_rows, d, nullptr, lk);
  }
  std::vector<float> normed;
  const float* queries_from = x;
  if (c.norm == NormPlacement::kPre) {
    normed.resize(static_cast<size_t>(q_rows * d));
    LayerNorm(x, q_rows, d, m.norm_weight.data(), m.norm_bias.data(),
              c.norm_eps, normed.data());
    queries_from = normed.data();
  }

  // Projections.
  std::vector<float> q(static_cast<size_t>(q_rows * m.q_width()));
  const bool lsh = c.attention == AttentionKind::kLsh;
  std::vector<float> k(lsh ? 0 : static_cast<size_t>(k_rows * m.kv_width()));
  std::vector<float> v(static_cast<size_t>(k_rows * m.kv_width()));
  std::vector<uint16_t> q_src_bits, kv_src_bits;
  const void* q_src = Operand(queries_from, q_rows * d, bf16, &q_src_bits);
  const void* kv_src =
      in.memory ? Operand(memory.data(), k_rows * d, bf16, &kv_src_bits)
                : q_src;
  RETURN_IF_ERROR(m.q_proj->Run(q_src, q_rows, q.data()));
  if (!lsh) RETURN_IF_ERROR(m.k_proj->Run(kv_src, k_rows, k.data()));
  RETURN_IF_ERROR(m.v_proj->Run(kv_src, k_rows, v.data()));
  if (c.positional == Positional::kRope) {
    ApplyRope(q.data(), q_rows, hq, hd, m.q_width(), positions, lq,
              c.rope_theta);
    if (!lsh) {
      ApplyRope(k.data(), k_rows, hkv, hd, m.kv_width(),
                in.memory ? nullptr : positions, in.memory ? lk : lq,
                c.rope_theta);
    }
  }
  // Linformer: the keys and values become k learned mixtures of themselves.
  int64_t attended = lk;
  if (c.attention == AttentionKind::kLinformer) {
    attended = c.linformer_k;
    const int32_t* lengths =
        in.mask.key_lengths.empty() ? nullptr : in.mask.key_lengths.data();
    std::vector<float> projected(
        static_cast<size_t>(b * attended * m.kv_width()));
    ProjectAlongSequence(k.data(), b, lk, m.kv_width(), m.linformer_e.data(),
                         attended, c.linformer_max_len, lengths,
                         projected.data());
    k.swap(projected);
    projected.resize(k.size());
    ProjectAlongSequence(v.data(), b, lk, m.kv_width(), m.linformer_f.data(),
                         attended, c.linformer_max_len, lengths,
                         projected.data());
    v.swap(projected);
  }
  const int64_t kv_rows = b * attended;
  // Transformer-XL: the queries take the content bias u; the relative keys
  // are W_R·R of each distance the scores have, [Hq, rows, hd].
  std::vector<float> relative_table;
  RelativeRange relative;
  if (c.positional == Positional::kRelative) {
    for (int64_t r = 0; r < q_rows; ++r) {
      float* row = q.data() + r * m.q_width();
      for (int64_t e = 0; e < m.q_width(); ++e) row[e] += m.relative_u[e];
    }
    relative = RelativeRangeOf(in.mask, lq, lk);
    std::vector<float> encoding(static_cast<size_t>(relative.rows * d));
    RelativeSinusoid(relative.first, relative.rows, d, encoding.data());
    std::vector<float> keys(static_cast<size_t>(relative.rows * m.q_width()));
    RETURN_IF_ERROR(
        m.relative_proj->Run(encoding.data(), relative.rows, keys.data()));
    relative_table.resize(keys.size());
    for (int64_t t = 0; t < relative.rows; ++t) {
      for (int64_t h = 0; h < hq; ++h) {
        std::copy_n(keys.data() + (t * hq + h) * hd, hd,
                    relative_table.data() + (h * relative.rows + t) * hd);
      }
    }
  }

  // The engine's operands: [B, L, H, hd] (BLHD), f32 or bf16.
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  const DType operand_dtype = bf16 ? DType::kBFloat16 : DType::kFloat32;
  std::vector<float> a(static_cast<size_t>(q_rows * m.q_width()));
  AttentionInputs attention;
  attention.layout = Layout::kBLHD;
  if (c.attention != AttentionKind::kLinformer) attention.mask = in.mask;
  attention.query =
      MakeTensorView(Operand(q.data(), q_rows * m.q_width(), bf16, &q_bits),
                     operand_dtype, {b, lq, hq, hd});
  attention.key =
      MakeTensorView(Operand(k.data(), kv_rows * m.kv_width(), bf16, &k_bits),
                     operand_dtype, {b, attended, hkv, hd});
  attention.value =
      MakeTensorView(Operand(v.data(), kv_rows * m.kv_width(), bf16, &v_bits),
                     operand_dtype, {b, attended, hkv, hd});
  if (c.positional == Positional::kRelative) {
    RelativeKeysSpec keys;
    keys.table = MakeTensorView(relative_table.data(), DType::kFloat32,
                                {hq, relative.rows, hd});
    keys.zero_row = relative.zero_row();
    keys.query_bias = m.relative_query_bias;
    attention.mask.relative_keys = keys;
  }
  ApplyMethod(c, &attention);

  std::vector<float> general_q;
  std::vector<float> scores;
  if (c.scoring == Scoring::kGeneral) {
    general_q.resize(q.size());
    for (int64_t h = 0; h < hq; ++h) {
      RETURN_IF_ERROR(m.general[static_cast<size_t>(h)]->Run(
          Advance(attention.query.data, h * hd, bf16), q_rows,
          Column(general_q.data(), h * hd)));
    }
    attention.query = MakeTensorView(
        Operand(general_q.data(), q_rows * m.q_width(), bf16, &q_bits),
        operand_dtype, {b, lq, hq, hd});
    attention.scale = 1.0f;
  } else if (c.scoring == Scoring::kDot) {
    attention.scale = 1.0f;
  } else if (c.scoring == Scoring::kAdditive) {
    const int64_t ad = m.additive_dim;
    std::vector<float> qa(static_cast<size_t>(q_rows * hq * ad));
    std::vector<float> ka(static_cast<size_t>(k_rows * hq * ad));
    const int64_t group = hq / hkv;
    for (int64_t h = 0; h < hq; ++h) {
      RETURN_IF_ERROR(m.additive_q[static_cast<size_t>(h)]->Run(
          Advance(attention.query.data, h * hd, bf16), q_rows,
          Column(qa.data(), h * ad)));
      RETURN_IF_ERROR(m.additive_k[static_cast<size_t>(h)]->Run(
          Advance(attention.key.data, (h / group) * hd, bf16), k_rows,
          Column(ka.data(), h * ad)));
    }
    scores.resize(static_cast<size_t>(b * hq * lq * lk));
    RETURN_IF_ERROR(AdditiveScores(qa.data(), ka.data(), m.additive_v.data(), b,
                                   hq, lq, lk, ad, engine.num_threads(),
                                   engine.isa(), scores.data()));
    if (in.mask.explicit_mask) {
      AddExplicitMask(*in.mask.explicit_mask, {b, hq, lq, lk}, scores.data());
    }
    // The engine adds the scores as a float mask to 0·(q·k) and applies the
    // other mask parts, the softmax and P·V.
    attention.mask.explicit_mask =
        MakeTensorView(scores.data(), DType::kFloat32, {b, hq, lq, lk});
    attention.scale = 0.0f;
  }
  // Luong's local attention: the window around each query's aligned
  // position joins the mask; local-p then weighs the softmax by a Gaussian
  // around it and recomputes P·v.
  const LocalCall local{
      b, lq, lk, positions, in.memory.has_value(), in.mask.key_lengths};
  std::vector<double> aligned;
  std::vector<float> window_mask;
  if (c.local != LocalAttention::kNone &&
      !ApplyLocalBand(c, local, &attention.mask)) {
    std::vector<float> projected;
    if (m.local_proj) {
      projected.resize(static_cast<size_t>(q_rows * c.local_dim));
      RETURN_IF_ERROR(
          m.local_proj->Run(queries_from, q_rows, projected.data()));
    }
    aligned = AlignedPositions(c, local, projected.data(), m.local_v_p);
    if (c.scoring == Scoring::kAdditive) {
      AddLocalWindow(c, local, aligned, hq, scores.data());
    } else {
      const int64_t heads = in.mask.explicit_mask ? hq : 1;
      window_mask.assign(static_cast<size_t>(b * heads * lq * lk), 0.0f);
      if (in.mask.explicit_mask) {
        AddExplicitMask(*in.mask.explicit_mask, {b, hq, lq, lk},
                        window_mask.data());
      }
      AddLocalWindow(c, local, aligned, heads, window_mask.data());
      attention.mask.explicit_mask = MakeTensorView(
          window_mask.data(), DType::kFloat32, {b, heads, lq, lk});
    }
  }
  AttentionOutputs attention_out;
  attention_out.output =
      MakeMutableTensorView(a.data(), DType::kFloat32, {b, lq, hq, hd});
  attention_out.weights = out.weights;
  const bool predictive = c.local == LocalAttention::kPredictive;
  std::vector<float> local_weights;
  if (predictive && !out.weights) {
    local_weights.resize(static_cast<size_t>(b * hq * lq * lk));
    attention_out.weights = MakeMutableTensorView(
        local_weights.data(), DType::kFloat32, {b, hq, lq, lk});
  }
  RETURN_IF_ERROR(engine.Run(attention, attention_out));
  if (predictive) {
    // P·v over the values the engine read (rounded to bf16 for a bf16
    // model).
    std::vector<float> rounded;
    const float* values = v.data();
    if (bf16) {
      rounded.resize(v.size());
      ConvertToFloat(v_bits.data(), DType::kBFloat16, rounded.data(),
                     rounded.size());
      values = rounded.data();
    }
    ApplyGaussian(c, local, aligned, values,
                  static_cast<float*>(attention_out.weights->data), a.data());
  }

  // Output projection, residual and norm.
  std::vector<float> y(static_cast<size_t>(q_rows * d));
  std::vector<uint16_t> a_bits;
  RETURN_IF_ERROR(
      m.o_proj->Run(Operand(a.data(), q_rows * m.q_width(), bf16, &a_bits),
                    q_rows, y.data()));
  if (c.norm != NormPlacement::kNone) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += x[i];
  }
  if (c.norm == NormPlacement::kPost) {
    LayerNorm(y.data(), q_rows, d, m.norm_weight.data(), m.norm_bias.data(),
              c.norm_eps, y.data());
  }
  ConvertFromFloat(y.data(), out.output.data, out.output.dtype, y.size());
  return absl::OkStatus();
}

}  // namespace attnserve::model
