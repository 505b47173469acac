// The hosted layer against the plain reference (tests/util/reference_layer):
// every config option, self- and cross-attention, the mask parts, GQA/MQA,
// bf16; and the layer's own validation errors.

#include "model/attention_layer.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/matmul.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/reference_layer.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

std::vector<float> Uniform(size_t n, uint64_t seed, float scale,
                           float offset = 0) {
  std::vector<float> v(n);
  base::SplitMix64 rng(seed);
  for (float& x : v) x = offset + scale * rng.Uniform(-1.0f, 1.0f);
  return v;
}

LayerWeights MakeWeights(const ModelConfig& c, int64_t additive_dim) {
  const size_t d = c.d_model, q = c.num_heads * c.head_dim,
               kv = c.num_kv_heads * c.head_dim, hd = c.head_dim,
               hq = c.num_heads, a = additive_dim;
  const float in_scale = 1.0f / std::sqrt(float(d));
  LayerWeights w;
  w.q_proj_weight = Uniform(q * d, 1, in_scale);
  if (c.attention != AttentionKind::kLsh) {
    w.k_proj_weight = Uniform(kv * d, 2, in_scale);
  }
  w.v_proj_weight = Uniform(kv * d, 3, in_scale);
  w.o_proj_weight = Uniform(d * q, 4, 1.0f / std::sqrt(float(q)));
  if (c.bias) {
    w.q_proj_bias = Uniform(q, 5, 0.1f);
    if (c.attention != AttentionKind::kLsh)
      w.k_proj_bias = Uniform(kv, 6, 0.1f);
    w.v_proj_bias = Uniform(kv, 7, 0.1f);
    w.o_proj_bias = Uniform(d, 8, 0.1f);
  }
  if (c.norm != NormPlacement::kNone) {
    w.norm_weight = Uniform(d, 9, 0.2f, 1.0f);
    w.norm_bias = Uniform(d, 10, 0.1f);
  }
  if (c.scoring == Scoring::kGeneral) {
    w.general_weight = Uniform(hq * hd * hd, 11, 1.0f / std::sqrt(float(hd)));
  }
  if (c.scoring == Scoring::kAdditive) {
    w.additive_w_query = Uniform(hq * a * hd, 12, 1.0f / std::sqrt(float(hd)));
    w.additive_w_key = Uniform(hq * a * hd, 13, 1.0f / std::sqrt(float(hd)));
    w.additive_v = Uniform(hq * a, 14, 1.0f / std::sqrt(float(a)));
    w.additive_dim = additive_dim;
  }
  if (c.attention == AttentionKind::kLinformer) {
    const size_t n = c.linformer_k * c.linformer_max_len;
    const float scale = 1.0f / std::sqrt(float(c.linformer_max_len));
    w.linformer_e = Uniform(n, 15, scale);
    w.linformer_f = Uniform(n, 16, scale);
  }
  if (c.local == LocalAttention::kPredictive) {
    w.local_w_p = Uniform(c.local_dim * d, 17, in_scale);
    w.local_v_p = Uniform(c.local_dim, 18, 2.0f);
  }
  if (c.positional == Positional::kRelative) {
    w.relative_w_r = Uniform(q * d, 19, 2.0f * in_scale);
    w.relative_u = Uniform(hq * hd, 20, 0.5f);
    w.relative_v = Uniform(hq * hd, 21, 0.5f);
  }
  return w;
}

ModelConfig Config(int64_t d, int64_t heads, int64_t kv_heads,
                   int64_t head_dim) {
  ModelConfig c;
  c.d_model = d;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

struct LayerCase {
  std::string name;
  ModelConfig config;
  int64_t additive_dim = 0;
};

std::vector<LayerCase> LayerCases() {
  std::vector<LayerCase> cases;
  auto add = [&](std::string name, ModelConfig c, int64_t a = 0) {
    cases.push_back({std::move(name), c, a});
  };
  ModelConfig c = Config(32, 4, 4, 8);
  add("ScaledDotPost", c);
  c.norm = NormPlacement::kPre;
  c.positional = Positional::kRope;
  c.bias = false;
  c.num_kv_heads = 2;
  add("GqaRopePreNoBias", c);
  c = Config(32, 2, 2, 16);
  c.scoring = Scoring::kGeneral;
  c.norm = NormPlacement::kNone;
  c.positional = Positional::kSinusoidal;
  add("GeneralSinusoidalNoNorm", c);
  c = Config(24, 4, 1, 6);
  c.scoring = Scoring::kAdditive;
  add("AdditiveMqaPost", c, 12);
  c = Config(32, 4, 2, 16);  // head_dim != d_model / heads
  c.positional = Positional::kRope;
  c.rope_theta = 500.0;
  c.scoring = Scoring::kGeneral;
  add("GeneralRopeWideHeads", c);
  c = Config(32, 4, 2, 8);
  c.scoring = Scoring::kDot;
  c.local = LocalAttention::kMonotonic;
  c.local_window = 1;
  add("DotLocalMonotonic", c);
  c = Config(32, 4, 2, 8);
  c.local = LocalAttention::kPredictive;
  c.local_window = 2;
  c.local_dim = 8;
  c.norm = NormPlacement::kPre;
  add("LocalPredictivePre", c);
  c = Config(24, 4, 1, 6);
  c.scoring = Scoring::kAdditive;
  c.local = LocalAttention::kPredictive;
  c.local_window = 1;
  c.local_dim = 4;
  add("AdditiveLocalPredictive", c, 12);
  for (LayerCase base : std::vector<LayerCase>(cases)) {
    base.name += "Bf16";
    base.config.dtype = ModelDType::kBFloat16;
    cases.push_back(base);
  }
  return cases;
}

// gtest prints parameters in test names and failures; the name says it all.
void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

class LayerTest : public ::testing::TestWithParam<LayerCase> {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.num_threads = 2;
    options.max_isa = CapIsa(Isa::kAuto);
    auto engine = AttentionEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    const LayerCase& p = GetParam();
    weights_ = MakeWeights(p.config, p.additive_dim);
    auto layer = AttentionLayer::Create(p.config, weights_);
    ASSERT_TRUE(layer.ok()) << layer.status();
    layer_ = *std::move(layer);
  }

  // Runs the layer and the reference on the same inputs and compares.
  void Compare(const LayerInputs& in, bool with_weights) {
    const ModelConfig& c = GetParam().config;
    const int64_t b = in.hidden.shape[0], lq = in.hidden.shape[1];
    const int64_t lk = in.memory ? in.memory->shape[1] : lq;
    std::vector<float> out(static_cast<size_t>(b * lq * c.d_model));
    std::vector<float> weights(static_cast<size_t>(b * c.num_heads * lq * lk));
    LayerOutputs outputs;
    outputs.output =
        MakeMutableTensorView(out.data(), DType::kFloat32, {b, lq, c.d_model});
    if (with_weights) {
      outputs.weights = MakeMutableTensorView(weights.data(), DType::kFloat32,
                                              {b, c.num_heads, lq, lk});
    }
    ASSERT_TRUE(layer_->Run(in, outputs, *engine_).ok());
    std::vector<float> expected, expected_weights;
    ASSERT_TRUE(
        testing::ReferenceLayer(c, weights_, in, &expected, &expected_weights)
            .ok());
    const bool bf16 = c.dtype == ModelDType::kBFloat16;
    const double tolerance = bf16 ? 4e-2 : 2e-4;
    ASSERT_EQ(out.size(), expected.size());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[i], tolerance * (1 + std::fabs(expected[i])))
          << "output element " << i;
    }
    if (with_weights) {
      for (size_t i = 0; i < weights.size(); ++i) {
        ASSERT_NEAR(weights[i], expected_weights[i], bf16 ? 2e-2 : 2e-5)
            << "weights element " << i;
      }
    }
  }

  std::unique_ptr<AttentionEngine> engine_;
  LayerWeights weights_;
  std::unique_ptr<AttentionLayer> layer_;
};

TEST_P(LayerTest, SelfAttentionMatchesTheReference) {
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 6, d}, 21);
  LayerInputs in;
  in.hidden = hidden.view();
  Compare(in, /*with_weights=*/true);
}

TEST_P(LayerTest, CausalWithPositionsMatchesTheReference) {
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kBFloat16, {2, 5, d}, 22);
  const std::vector<int32_t> positions = {3, 4, 5, 6, 7, 0, 1, 2, 3, 9};
  LayerInputs in;
  in.hidden = hidden.view();
  in.positions = positions;
  in.mask.causal = true;
  Compare(in, /*with_weights=*/true);
}

TEST_P(LayerTest, CrossAttentionWithPaddingAndWindowMatchesTheReference) {
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 4, d}, 23);
  const TestTensor memory = TestTensor::Random(DType::kFloat32, {2, 7, d}, 24);
  const std::vector<int32_t> key_lengths = {7, 3};
  LayerInputs in;
  in.hidden = hidden.view();
  in.memory = memory.view();
  in.mask.key_lengths = key_lengths;
  in.mask.window_left = 2;
  in.mask.causal = true;
  in.mask.alignment = CausalAlignment::kBottomRight;
  Compare(in, /*with_weights=*/true);
}

TEST_P(LayerTest, ExplicitMasksAndAlibiMatchTheReference) {
  const ModelConfig& c = GetParam().config;
  const TestTensor hidden =
      TestTensor::Random(DType::kFloat16, {1, 5, c.d_model}, 25);
  const TestTensor memory =
      TestTensor::Random(DType::kFloat16, {1, 6, c.d_model}, 26);
  TestTensor bool_mask(DType::kBool, {5, 6});
  for (int64_t i = 0; i < 30; ++i) bool_mask.Set(i, (i * 7) % 3 != 0);
  const TestTensor float_mask =
      TestTensor::Random(DType::kFloat32, {c.num_heads, 1, 6}, 27);
  const std::vector<float> slopes = Uniform(c.num_heads, 28, 0.25f, 0.25f);
  for (const TestTensor* mask :
       std::vector<const TestTensor*>{&bool_mask, &float_mask}) {
    SCOPED_TRACE(DTypeName(mask->dtype()));
    LayerInputs in;
    in.hidden = hidden.view();
    in.memory = memory.view();
    in.mask.explicit_mask = mask->view();
    in.mask.alibi_slopes = slopes;
    Compare(in, /*with_weights=*/true);
  }
}

TEST_P(LayerTest, OutputInBf16WithoutWeights) {
  const ModelConfig& c = GetParam().config;
  const TestTensor hidden =
      TestTensor::Random(DType::kFloat32, {1, 3, c.d_model}, 29);
  LayerInputs in;
  in.hidden = hidden.view();
  TestTensor out(DType::kBFloat16, {1, 3, c.d_model});
  LayerOutputs outputs;
  outputs.output = out.mutable_view();
  ASSERT_TRUE(layer_->Run(in, outputs, *engine_).ok());
  std::vector<float> expected, expected_weights;
  ASSERT_TRUE(
      testing::ReferenceLayer(c, weights_, in, &expected, nullptr).ok());
  for (int64_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out.at(i), expected[i], 4e-2 * (1 + std::fabs(expected[i])));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, LayerTest, ::testing::ValuesIn(LayerCases()),
                         [](const auto& info) { return info.param.name; });

// Transformer-XL's relative encoding ("positional": "relative"), which takes
// its distances from the mask's diagonal (no positions).
class LayerRelativeTest : public LayerTest {};

std::vector<LayerCase> RelativeCases() {
  std::vector<LayerCase> cases;
  ModelConfig c = Config(32, 4, 2, 8);
  c.positional = Positional::kRelative;
  cases.push_back({"RelativeScaledDotPost", c});
  c.scoring = Scoring::kDot;
  c.norm = NormPlacement::kPre;
  c.num_kv_heads = 1;
  cases.push_back({"RelativeDotPreMqa", c});
  c.dtype = ModelDType::kBFloat16;
  cases.push_back({"RelativeDotPreMqaBf16", c});
  return cases;
}

TEST_P(LayerRelativeTest, SelfAttentionBothAlignmentsMatchTheReference) {
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 6, d}, 31);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    LayerInputs in;
    in.hidden = hidden.view();
    in.mask.causal = causal;
    Compare(in, /*with_weights=*/true);
  }
}

TEST_P(LayerRelativeTest, MemoryThenSegmentAsTransformerXlMatchesTheReference) {
  // Transformer-XL's keys: the cached memory, then the segment itself, with
  // the segment's queries at the bottom right.
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 4, d}, 32);
  const TestTensor keys = TestTensor::Random(DType::kFloat32, {2, 11, d}, 33);
  const std::vector<int32_t> key_lengths = {11, 9};
  LayerInputs in;
  in.hidden = hidden.view();
  in.memory = keys.view();
  in.mask.causal = true;
  in.mask.alignment = CausalAlignment::kBottomRight;
  in.mask.key_lengths = key_lengths;
  Compare(in, /*with_weights=*/true);
  in.mask.window_left = 3;
  Compare(in, /*with_weights=*/false);
}

TEST_P(LayerRelativeTest, PositionsAreRefused) {
  const int64_t d = GetParam().config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 3, d}, 34);
  const std::vector<int32_t> positions = {0, 1, 2};
  LayerInputs in;
  in.hidden = hidden.view();
  in.positions = positions;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions: a layer with positional "
                                 "\"relative\" takes each distance from the "
                                 "mask's diagonal")));
}

INSTANTIATE_TEST_SUITE_P(Configs, LayerRelativeTest,
                         ::testing::ValuesIn(RelativeCases()),
                         [](const auto& info) { return info.param.name; });

class LayerValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = Config(16, 2, 2, 8);
    weights_ = MakeWeights(config_, 0);
    auto layer = AttentionLayer::Create(config_, weights_);
    ASSERT_TRUE(layer.ok()) << layer.status();
    layer_ = *std::move(layer);
    EngineOptions options;
    options.num_threads = 1;
    options.max_isa = CapIsa(Isa::kAuto);
    engine_ = AttentionEngine::Create(options).value();
  }
  ModelConfig config_;
  LayerWeights weights_;
  std::unique_ptr<AttentionLayer> layer_;
  std::unique_ptr<AttentionEngine> engine_;
};

// A layer warms up when it is created: calls of any length, self-attention
// (causal or not) or cross-attention, on any engine, create no product
// primitive (regression: each new length created a few, 0.2-2 ms each).
TEST(LayerWarmUpTest, NewLengthsCreateNoPrimitive) {
  for (const ModelDType dtype : {ModelDType::kFloat32, ModelDType::kBFloat16}) {
    ModelConfig config = Config(64, 4, 2, 16);
    config.dtype = dtype;
    const LayerWeights weights = MakeWeights(config, 0);
    auto layer = AttentionLayer::Create(config, weights);
    ASSERT_TRUE(layer.ok()) << layer.status();
    EngineOptions options;
    options.num_threads = 2;
    options.max_isa = CapIsa(Isa::kAuto);
    auto engine = AttentionEngine::Create(options);
    ASSERT_TRUE(engine.ok());
    absl::StatusOr<MatmulCache*> cache = MatmulCache::Shared();
    ASSERT_TRUE(cache.ok());
    const int64_t created = (*cache)->created();
    for (int64_t l = 1; l <= 300; l += l < 80 ? 1 : 13) {
      const TestTensor hidden =
          TestTensor::Random(DType::kFloat32, {2, l, 64}, l);
      const TestTensor memory =
          TestTensor::Random(DType::kFloat32, {2, l + 7, 64}, l + 1);
      TestTensor out(DType::kFloat32, {2, l, 64});
      LayerInputs in;
      in.hidden = hidden.view();
      in.mask.causal = l % 2 == 0;
      if (l % 3 == 0) in.memory = memory.view();
      LayerOutputs o;
      o.output = out.mutable_view();
      ASSERT_TRUE(layer->get()->Run(in, o, **engine).ok());
      ASSERT_EQ((*cache)->created(), created) << "L = " << l;
    }
  }
}

TEST_F(LayerValidationTest, HiddenMustBeBLD) {
  const TestTensor wrong_d = TestTensor::Random(DType::kFloat32, {1, 3, 15}, 1);
  LayerInputs in;
  in.hidden = wrong_d.view();
  EXPECT_THAT(
      layer_->Validate(in, *engine_).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("hidden.shape: expected [B, Lq, d_model = 16], got "
                         "[1, 3, 15]")));
  const TestTensor rank2 = TestTensor::Random(DType::kFloat32, {3, 16}, 1);
  in.hidden = rank2.view();
  EXPECT_THAT(
      layer_->Validate(in, *engine_).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got [3, 16]")));
  const TestTensor bools(DType::kBool, {1, 3, 16});
  in.hidden = bools.view();
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden must be f32, bf16 or f16, got bool")));
}

TEST_F(LayerValidationTest, MemoryMustMatchTheHidden) {
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 3, 16}, 1);
  const TestTensor batch1 = TestTensor::Random(DType::kFloat32, {1, 4, 16}, 2);
  const TestTensor bf16 = TestTensor::Random(DType::kBFloat16, {2, 4, 16}, 2);
  LayerInputs in;
  in.hidden = hidden.view();
  in.memory = batch1.view();
  EXPECT_THAT(
      layer_->Validate(in, *engine_).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("memory batch 1 differs from hidden batch 2")));
  in.memory = bf16.view();
  EXPECT_THAT(
      layer_->Validate(in, *engine_).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("memory dtype bf16 differs from hidden dtype f32")));
}

TEST_F(LayerValidationTest, PositionsMustBeOnePerTokenAndNotNegative) {
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 3, 16}, 1);
  const std::vector<int32_t> five = {0, 1, 2, 3, 4};
  const std::vector<int32_t> negative = {0, 1, 2, 0, -1, 2};
  LayerInputs in;
  in.hidden = hidden.view();
  in.positions = five;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions must be [B, Lq] = [2, 3] (6 "
                                 "values), got 5 values")));
  in.positions = negative;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions[4] = -1 is negative")));
}

TEST_F(LayerValidationTest, MaskErrorsComeFromTheEngine) {
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 3, 16}, 1);
  const std::vector<int32_t> lengths = {3};
  LayerInputs in;
  in.hidden = hidden.view();
  in.mask.key_lengths = lengths;
  std::vector<float> out(2 * 3 * 16);
  LayerOutputs outputs;
  outputs.output =
      MakeMutableTensorView(out.data(), DType::kFloat32, {2, 3, 16});
  EXPECT_THAT(
      layer_->Run(in, outputs, *engine_),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key_lengths")));
}

TEST_F(LayerValidationTest, OutputMustHaveTheHiddenShape) {
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 3, 16}, 1);
  LayerInputs in;
  in.hidden = hidden.view();
  std::vector<float> out(3 * 8);
  LayerOutputs outputs;
  outputs.output =
      MakeMutableTensorView(out.data(), DType::kFloat32, {1, 3, 8});
  EXPECT_THAT(layer_->Run(in, outputs, *engine_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output must be dense float [1, 3, 16]")));
}

TEST_F(LayerValidationTest, EmptyBatchGivesAnEmptyOutput) {
  const TestTensor hidden(DType::kFloat32, {0, 3, 16});
  LayerInputs in;
  in.hidden = hidden.view();
  LayerOutputs outputs;
  outputs.output = MakeMutableTensorView(nullptr, DType::kFloat32, {0, 3, 16});
  EXPECT_TRUE(layer_->Run(in, outputs, *engine_).ok());
}

// Found by the libFuzzer target under UBSan (tests/fuzz/regressions/): with
// general or additive scoring, an empty batch (or no keys) offset the null
// data of an empty operand per head, which is undefined behaviour.
TEST(LayerEmptyTest, GeneralAndAdditiveScoringOverNoRows) {
  EngineOptions options;
  options.num_threads = 1;
  options.max_isa = CapIsa(Isa::kAuto);
  const auto engine = AttentionEngine::Create(options).value();
  for (const Scoring scoring : {Scoring::kGeneral, Scoring::kAdditive}) {
    ModelConfig c = Config(12, 4, 2, 4);
    c.scoring = scoring;
    c.positional = Positional::kRope;
    const auto layer = AttentionLayer::Create(c, MakeWeights(c, 5)).value();
    SCOPED_TRACE(ScoringName(scoring));
    const TestTensor no_batch(DType::kFloat32, {0, 3, 12});
    LayerInputs in;
    in.hidden = no_batch.view();
    LayerOutputs outputs;
    outputs.output =
        MakeMutableTensorView(nullptr, DType::kFloat32, {0, 3, 12});
    EXPECT_TRUE(layer->Run(in, outputs, *engine).ok());

    const TestTensor hidden(DType::kFloat32, {1, 2, 12});
    const TestTensor no_keys(DType::kFloat32, {1, 0, 12});
    in.hidden = hidden.view();
    in.memory = no_keys.view();
    std::vector<float> out(2 * 12, 1.0f);
    outputs.output =
        MakeMutableTensorView(out.data(), DType::kFloat32, {1, 2, 12});
    const absl::StatusOr<LayerShape> shape = layer->Validate(in, *engine);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->k_len, 0);
    EXPECT_TRUE(layer->Run(in, outputs, *engine).ok());
  }
}

// ---- The long-sequence kinds: Linformer, linear and LSH layers.

class LayerVariantTest : public ::testing::Test {
 protected:
  void Make(const ModelConfig& c) {
    config_ = c;
    EngineOptions options;
    options.num_threads = 2;
    options.max_isa = CapIsa(Isa::kAuto);
    engine_ = AttentionEngine::Create(options).value();
    weights_ = MakeWeights(c, 0);
    auto layer = AttentionLayer::Create(c, weights_);
    ASSERT_TRUE(layer.ok()) << layer.status();
    layer_ = *std::move(layer);
  }

  void Compare(const LayerInputs& in) {
    const int64_t b = in.hidden.shape[0], lq = in.hidden.shape[1];
    std::vector<float> out(static_cast<size_t>(b * lq * config_.d_model));
    LayerOutputs outputs;
    outputs.output = MakeMutableTensorView(out.data(), DType::kFloat32,
                                           {b, lq, config_.d_model});
    const absl::Status st = layer_->Run(in, outputs, *engine_);
    ASSERT_TRUE(st.ok()) << st;
    std::vector<float> expected;
    const absl::Status ref =
        testing::ReferenceLayer(config_, weights_, in, &expected, nullptr);
    ASSERT_TRUE(ref.ok()) << ref;
    const double tolerance =
        config_.dtype == ModelDType::kBFloat16 ? 4e-2 : 2e-4;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[i], tolerance * (1 + std::fabs(expected[i])))
          << "output element " << i;
    }
  }

  ModelConfig config_;
  LayerWeights weights_;
  std::unique_ptr<AttentionLayer> layer_;
  std::unique_ptr<AttentionEngine> engine_;
};

ModelConfig LinformerConfig() {
  ModelConfig c = Config(32, 4, 2, 8);
  c.attention = AttentionKind::kLinformer;
  c.linformer_k = 5;
  c.linformer_max_len = 12;
  return c;
}

TEST_F(LayerVariantTest, LinformerSelfAndCrossWithPaddingMatchTheReference) {
  for (const ModelDType dtype : {ModelDType::kFloat32, ModelDType::kBFloat16}) {
    ModelConfig c = LinformerConfig();
    c.dtype = dtype;
    c.positional = Positional::kRope;
    Make(c);
    const TestTensor hidden =
        TestTensor::Random(DType::kFloat32, {2, 9, 32}, 3);
    LayerInputs in;
    in.hidden = hidden.view();
    Compare(in);
    const TestTensor memory =
        TestTensor::Random(DType::kFloat32, {2, 12, 32}, 4);
    const std::vector<int32_t> lengths = {12, 7};
    in.memory = memory.view();
    in.mask.key_lengths = lengths;
    Compare(in);
  }
}

// The projection mixes the keys: changing a padding key changes nothing,
// changing a real one changes the output.
TEST_F(LayerVariantTest, LinformerPaddingKeysTakeNoPart) {
  Make(LinformerConfig());
  TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 8, 32}, 5);
  const std::vector<int32_t> lengths = {6};
  LayerInputs in;
  in.hidden = hidden.view();
  in.mask.key_lengths = lengths;
  auto run = [&] {
    std::vector<float> out(8 * 32);
    LayerOutputs outputs;
    outputs.output =
        MakeMutableTensorView(out.data(), DType::kFloat32, {1, 8, 32});
    EXPECT_TRUE(layer_->Run(in, outputs, *engine_).ok());
    return out;
  };
  const std::vector<float> before = run();
  // Token 7 is padding as a key but still a query: only its own row moves.
  for (int64_t c = 0; c < 32; ++c) hidden.Set({0, 7, c}, 3.0f);
  const std::vector<float> padded = run();
  for (int64_t i = 0; i < 7 * 32; ++i) EXPECT_EQ(padded[i], before[i]) << i;
  for (int64_t c = 0; c < 32; ++c) hidden.Set({0, 2, c}, 3.0f);
  const std::vector<float> real = run();
  EXPECT_NE(real[0], before[0]);
}

TEST_F(LayerVariantTest, LinformerRefusesWhatItCannotDo) {
  Make(LinformerConfig());
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 13, 32}, 6);
  LayerInputs in;
  in.hidden = hidden.view();
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden: Lk = 13 keys exceed the model's "
                                 "linformer_max_len = 12")));
  const TestTensor fits = TestTensor::Random(DType::kFloat32, {1, 8, 32}, 6);
  in.hidden = fits.view();
  in.mask.causal = true;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.causal does not apply to a Linformer "
                                 "layer")));
  in.mask.causal = false;
  const std::vector<float> table(4 * 4, 0.5f);
  RelativeBiasSpec rel;
  rel.table = table;
  rel.num_buckets = 4;
  rel.max_distance = 8;
  in.mask.relative_bias = rel;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.relative_bias does not apply to a "
                                 "Linformer layer")));
  in.mask.relative_bias.reset();
  const TestTensor keys = TestTensor::Random(DType::kFloat32, {1, 3, 8}, 7);
  RelativeKeysSpec relk;
  relk.table = keys.view();
  in.mask.relative_keys = relk;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.relative_keys: relative position keys "
                                 "are products of a layer's own weights")));
  in.mask.relative_keys.reset();
  in.return_weights = true;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("return_weights: a Linformer layer")));
  in.return_weights = false;
  const std::vector<int32_t> lengths = {9};
  in.mask.key_lengths = lengths;
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.key_lengths[0] = 9 is out of range [0, "
                                 "Lk = 8]")));
}

TEST_F(LayerVariantTest, LinearLayerMatchesTheReference) {
  for (const FeatureMap map :
       {FeatureMap::kEluPlusOne, FeatureMap::kFavorPlus}) {
    ModelConfig c = Config(32, 4, 2, 8);
    c.attention = AttentionKind::kLinear;
    c.feature_map = map;
    c.num_features = 16;
    c.seed = 3;
    Make(c);
    const TestTensor hidden =
        TestTensor::Random(DType::kFloat32, {2, 9, 32}, 7);
    LayerInputs in;
    in.hidden = hidden.view();
    in.mask.causal = true;
    Compare(in);
  }
}

TEST_F(LayerVariantTest, LshLayerMatchesTheReferenceAndRefusesMemory) {
  ModelConfig c = Config(32, 4, 4, 8);
  c.attention = AttentionKind::kLsh;
  c.num_hashes = 2;
  c.num_buckets = 4;
  c.chunk_size = 4;
  c.positional = Positional::kRope;
  Make(c);
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 11, 32}, 8);
  LayerInputs in;
  in.hidden = hidden.view();
  in.mask.causal = true;
  Compare(in);
  const TestTensor memory = TestTensor::Random(DType::kFloat32, {2, 5, 32}, 9);
  in.memory = memory.view();
  EXPECT_THAT(layer_->Validate(in, *engine_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory: attention \"lsh\" is "
                                 "self-attention")));
}

}  // namespace
}  // namespace attnserve::model
