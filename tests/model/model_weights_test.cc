#include "model/model_weights.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/model_test_util.h"
#include "tests/util/test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::Config;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TensorSet;
using ::attnserve::testing::TensorsFor;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr char kFile[] = "enc/model.safetensors";

std::vector<std::string> Names(const std::vector<ExpectedTensor>& tensors) {
  std::vector<std::string> names;
  for (const ExpectedTensor& t : tensors) names.push_back(t.name);
  return names;
}

const ExpectedTensor& Find(const std::vector<ExpectedTensor>& tensors,
                           const std::string& name) {
  for (const ExpectedTensor& t : tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no " << name;
  static const ExpectedTensor kNone;
  return kNone;
}

absl::StatusOr<LayerWeights> Load(const ModelConfig& config,
                                  const TensorSet& set) {
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Parse(set.Serialize(), kFile);
  if (!file.ok()) return file.status();
  return LoadLayerWeights(config, *file, kFile);
}

std::vector<float> Floats(absl::string_view bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::string Halves(const std::vector<uint16_t>& bits) {
  return std::string(reinterpret_cast<const char*>(bits.data()),
                     bits.size() * sizeof(uint16_t));
}

TEST(ModelWeightsTest, ExpectedTensorsOfAMhaLayerWithBiasAndNorm) {
  const ModelConfig config = Config(R"({"d_model": 64, "num_heads": 4})");
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(config, 0);
  EXPECT_THAT(
      Names(tensors),
      ElementsAre("q_proj.weight", "q_proj.bias", "k_proj.weight",
                  "k_proj.bias", "v_proj.weight", "v_proj.bias",
                  "o_proj.weight", "o_proj.bias", "norm.weight", "norm.bias"));
  EXPECT_THAT(Find(tensors, "q_proj.weight").shape, ElementsAre(64, 64));
  EXPECT_THAT(Find(tensors, "o_proj.bias").shape, ElementsAre(64));
  EXPECT_THAT(Find(tensors, "norm.weight").shape, ElementsAre(64));
}

TEST(ModelWeightsTest, ExpectedTensorsOfGqaWithHeadDim) {
  const ModelConfig config = Config(
      R"({"d_model": 32, "num_heads": 8, "num_kv_heads": 2, "head_dim": 6,)"
      R"( "bias": false, "norm": "none"})");
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(config, 0);
  EXPECT_THAT(Names(tensors), ElementsAre("q_proj.weight", "k_proj.weight",
                                          "v_proj.weight", "o_proj.weight"));
  EXPECT_THAT(Find(tensors, "q_proj.weight").shape, ElementsAre(48, 32));
  EXPECT_THAT(Find(tensors, "k_proj.weight").shape, ElementsAre(12, 32));
  EXPECT_THAT(Find(tensors, "v_proj.weight").shape, ElementsAre(12, 32));
  EXPECT_THAT(Find(tensors, "o_proj.weight").shape, ElementsAre(32, 48));
}

TEST(ModelWeightsTest, ExpectedTensorsOfTheScoringFunctions) {
  const std::vector<ExpectedTensor> general = ExpectedTensors(
      Config(R"({"d_model": 32, "num_heads": 4, "scoring": "general",)"
             R"( "bias": false, "norm": "none"})"),
      0);
  EXPECT_EQ(general.back().name, "general.weight");
  EXPECT_THAT(general.back().shape, ElementsAre(4, 8, 8));

  const std::vector<ExpectedTensor> additive = ExpectedTensors(
      Config(R"({"d_model": 32, "num_heads": 4, "num_kv_heads": 2,)"
             R"( "scoring": "additive", "bias": false, "norm": "none"})"),
      16);
  ASSERT_EQ(additive.size(), 7u);
  EXPECT_THAT(Find(additive, "additive.w_query").shape, ElementsAre(4, 16, 8));
  EXPECT_THAT(Find(additive, "additive.w_key").shape, ElementsAre(4, 16, 8));
  EXPECT_THAT(Find(additive, "additive.v").shape, ElementsAre(4, 16));
}

TEST(ModelWeightsTest, F32ValuesAreCopiedAndUnusedSlotsStayEmpty) {
  const ModelConfig config =
      Config(R"({"d_model": 8, "num_heads": 2, "bias": false})");
  const TensorSet set = TensorsFor(config, 0);
  absl::StatusOr<LayerWeights> weights = Load(config, set);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->q_proj_weight,
            Floats(set.tensors().at("q_proj.weight").data));
  EXPECT_EQ(weights->k_proj_weight,
            Floats(set.tensors().at("k_proj.weight").data));
  EXPECT_EQ(weights->v_proj_weight,
            Floats(set.tensors().at("v_proj.weight").data));
  EXPECT_EQ(weights->o_proj_weight,
            Floats(set.tensors().at("o_proj.weight").data));
  EXPECT_EQ(weights->norm_weight, Floats(set.tensors().at("norm.weight").data));
  EXPECT_EQ(weights->norm_bias, Floats(set.tensors().at("norm.bias").data));
  EXPECT_THAT(weights->q_proj_bias, IsEmpty());
  EXPECT_THAT(weights->o_proj_bias, IsEmpty());
  EXPECT_THAT(weights->general_weight, IsEmpty());
  EXPECT_THAT(weights->additive_v, IsEmpty());
  EXPECT_EQ(weights->additive_dim, 0);
}

// 16-bit tensors widen to f32 exactly: every bit pattern below is checked
// against its value, including subnormals and the extremes of each format.
TEST(ModelWeightsTest, BFloat16AndFloat16AreConvertedExactly) {
  const ModelConfig config = Config(
      R"({"d_model": 4, "num_heads": 1, "bias": false, "norm": "none"})");
  TensorSet set = TensorsFor(config, 0);
  // bf16: 1, -2, 0.5, 3.140625 (0x4049), smallest subnormal 2^-133, largest
  // finite 0x7f7f, -0, 1 + 2^-7.
  const std::vector<uint16_t> bf16 = {
      0x3f80, 0xc000, 0x3f00, 0x4049, 0x0001, 0x7f7f, 0x8000, 0x3f81,
      0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80};
  const std::vector<float> bf16_values = {1.0f,
                                          -2.0f,
                                          0.5f,
                                          3.140625f,
                                          std::ldexp(1.0f, -133),
                                          0x1.fep127f,
                                          -0.0f,
                                          1.0078125f,
                                          1,
                                          1,
                                          1,
                                          1,
                                          1,
                                          1,
                                          1,
                                          1};
  set.AddRaw("q_proj.weight", SafetensorsDType::kBF16, {4, 4}, Halves(bf16));
  // f16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest
  // normal), 0.333251953125 (0x3555), -0, 1 + 2^-10.
  const std::vector<uint16_t> f16 = {
      0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x3555, 0x8000, 0x3c01,
      0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00};
  const std::vector<float> f16_values = {1.0f,
                                         -2.0f,
                                         65504.0f,
                                         std::ldexp(1.0f, -24),
                                         std::ldexp(1.0f, -14),
                                         0.333251953125f,
                                         -0.0f,
                                         1.0009765625f,
                                         1,
                                         1,
                                         1,
                                         1,
                                         1,
                                         1,
                                         1,
                                         1};
  set.AddRaw("k_proj.weight", SafetensorsDType::kF16, {4, 4}, Halves(f16));

  absl::StatusOr<LayerWeights> weights = Load(config, set);
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->q_proj_weight.size(), 16u);
  ASSERT_EQ(weights->k_proj_weight.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(weights->q_proj_weight[i], bf16_values[i]) << i;
    EXPECT_EQ(std::signbit(weights->q_proj_weight[i]),
              std::signbit(bf16_values[i]))
        << i;
    EXPECT_EQ(weights->q_proj_weight[i], BFloat16ToFloat(bf16[i])) << i;
    EXPECT_EQ(weights->k_proj_weight[i], f16_values[i]) << i;
    EXPECT_EQ(std::signbit(weights->k_proj_weight[i]),
              std::signbit(f16_values[i]))
        << i;
    EXPECT_EQ(weights->k_proj_weight[i], Float16ToFloat(f16[i])) << i;
  }
}

TEST(ModelWeightsTest, WholeFileInBFloat16) {
  const ModelConfig config =
      Config(R"({"d_model": 16, "num_heads": 2, "dtype": "bfloat16"})");
  const TensorSet set = TensorsFor(config, 0, SafetensorsDType::kBF16);
  absl::StatusOr<LayerWeights> weights = Load(config, set);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const absl::string_view bytes = set.tensors().at("o_proj.weight").data;
  ASSERT_EQ(weights->o_proj_weight.size(), bytes.size() / 2);
  for (size_t i = 0; i < weights->o_proj_weight.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    ASSERT_EQ(weights->o_proj_weight[i], BFloat16ToFloat(bits)) << i;
  }
}

TEST(ModelWeightsTest, MissingTensor) {
  const ModelConfig config = Config(R"({"d_model": 64, "num_heads": 4})");
  TensorSet set = TensorsFor(config, 0);
  set.Remove("k_proj.bias");
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid,
                       HasSubstr("enc/model.safetensors: tensor k_proj.bias is "
                                 "missing (expected shape [64])")));
  set.Remove("norm.weight");
  set.Remove("q_proj.weight");
  // The first missing one in the documented order.
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor q_proj.weight is missing "
                                           "(expected shape [64, 64])")));
}

TEST(ModelWeightsTest, WrongShape) {
  const ModelConfig config = Config(R"({"d_model": 64, "num_heads": 4})");
  TensorSet set = TensorsFor(config, 0);
  set.Add("q_proj.weight", SafetensorsDType::kF32, {64, 32},
          std::vector<float>(64 * 32, 0.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid,
                       HasSubstr("enc/model.safetensors: tensor q_proj.weight: "
                                 "shape [64, 32], expected [64, 64]")));
  set = TensorsFor(config, 0);
  set.Add("norm.bias", SafetensorsDType::kF32, {1, 64},
          std::vector<float>(64, 0.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor norm.bias: shape [1, 64], "
                                           "expected [64]")));
}

TEST(ModelWeightsTest, TensorsTheConfigDoesNotUse) {
  const ModelConfig config = Config(
      R"({"d_model": 8, "num_heads": 2, "bias": false, "norm": "none"})");
  TensorSet set = TensorsFor(config, 0);
  set.Add("q_proj.bias", SafetensorsDType::kF32, {8},
          std::vector<float>(8, 0.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid,
                       HasSubstr("enc/model.safetensors: tensor q_proj.bias is "
                                 "not used by this config (bias is false)")));
  set.Remove("q_proj.bias");
  set.Add("norm.weight", SafetensorsDType::kF32, {8},
          std::vector<float>(8, 1.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor norm.weight is not used by "
                                           "this config (norm is \"none\")")));
  set.Remove("norm.weight");
  set.Add("general.weight", SafetensorsDType::kF32, {2, 4, 4},
          std::vector<float>(32, 1.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor general.weight is not used "
                                           "by this config (scoring is "
                                           "\"scaled_dot\")")));
  set.Remove("general.weight");
  set.Add("layers.0.ffn.weight", SafetensorsDType::kF32, {1}, {1.0f});
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor layers.0.ffn.weight is not "
                                           "used by this config (not a tensor "
                                           "of this layer)")));
}

TEST(ModelWeightsTest, LinformerAndLshTensors) {
  const ModelConfig linformer =
      Config(R"({"d_model": 8, "num_heads": 2, "attention": "linformer",)"
             R"( "linformer_k": 3, "linformer_max_len": 10})");
  const std::vector<ExpectedTensor> expected = ExpectedTensors(linformer, 0);
  EXPECT_EQ(Find(expected, "linformer.e").shape, (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(Find(expected, "linformer.f").shape, (std::vector<int64_t>{3, 10}));
  TensorSet set = TensorsFor(linformer, 0);
  absl::StatusOr<LayerWeights> w = Load(linformer, set);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->linformer_e.size(), 30u);
  set.Remove("linformer.f");
  EXPECT_THAT(Load(linformer, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor linformer.f is missing "
                                           "(expected shape [3, 10])")));

  const ModelConfig lsh =
      Config(R"({"d_model": 8, "num_heads": 2, "attention": "lsh"})");
  for (const ExpectedTensor& t : ExpectedTensors(lsh, 0)) {
    EXPECT_NE(t.name.rfind("k_proj", 0), 0u) << t.name;
  }
  TensorSet lsh_set = TensorsFor(lsh, 0);
  ASSERT_TRUE(Load(lsh, lsh_set).ok());
  lsh_set.Add("k_proj.bias", SafetensorsDType::kF32, {8},
              std::vector<float>(8, 0.0f));
  EXPECT_THAT(Load(lsh, lsh_set).status(),
              StatusIs(kInvalid, HasSubstr("tensor k_proj.bias is not used by "
                                           "this config (attention \"lsh\" "
                                           "shares queries and keys)")));
  TensorSet plain = TensorsFor(Config(R"({"d_model": 8, "num_heads": 2})"), 0);
  plain.Add("linformer.e", SafetensorsDType::kF32, {1, 1}, {1.0f});
  EXPECT_THAT(
      Load(Config(R"({"d_model": 8, "num_heads": 2})"), plain).status(),
      StatusIs(kInvalid, HasSubstr("tensor linformer.e is not used by this "
                                   "config (attention is \"softmax\")")));
}

TEST(ModelWeightsTest, NonFiniteValues) {
  const ModelConfig config = Config(
      R"({"d_model": 4, "num_heads": 1, "bias": false, "norm": "none"})");
  TensorSet set = TensorsFor(config, 0);
  std::vector<float> values(16, 0.5f);
  values[5] = std::numeric_limits<float>::quiet_NaN();
  set.Add("v_proj.weight", SafetensorsDType::kF32, {4, 4}, values);
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("enc/model.safetensors: tensor "
                                           "v_proj.weight: element 5 is NaN "
                                           "(F32)")));
  std::vector<uint16_t> bits(16, 0x3f80);
  bits[15] = 0xff80;  // -inf
  set = TensorsFor(config, 0);
  set.AddRaw("o_proj.weight", SafetensorsDType::kBF16, {4, 4}, Halves(bits));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor o_proj.weight: element 15 "
                                           "is infinite (BF16)")));
  bits.assign(16, 0x3c00);
  bits[0] = 0x7c00;  // f16 +inf
  set = TensorsFor(config, 0);
  set.AddRaw("k_proj.weight", SafetensorsDType::kF16, {4, 4}, Halves(bits));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor k_proj.weight: element 0 "
                                           "is infinite (F16)")));
}

TEST(ModelWeightsTest, GeneralWeightIsLoaded) {
  const ModelConfig config =
      Config(R"({"d_model": 16, "num_heads": 4, "num_kv_heads": 2,)"
             R"( "scoring": "general"})");
  const TensorSet set = TensorsFor(config, 0);
  absl::StatusOr<LayerWeights> weights = Load(config, set);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->general_weight,
            Floats(set.tensors().at("general.weight").data));
  EXPECT_EQ(weights->general_weight.size(), 4u * 4 * 4);
}

constexpr char kAdditive[] =
    R"({"d_model": 24, "num_heads": 2, "head_dim": 12, "scoring": "additive"})";

TEST(ModelWeightsTest, AdditiveDimComesFromTheTensors) {
  const ModelConfig config = Config(kAdditive);
  const TensorSet set = TensorsFor(config, 16);
  absl::StatusOr<LayerWeights> weights = Load(config, set);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->additive_dim, 16);
  EXPECT_EQ(weights->additive_w_query,
            Floats(set.tensors().at("additive.w_query").data));
  EXPECT_EQ(weights->additive_w_key,
            Floats(set.tensors().at("additive.w_key").data));
  EXPECT_EQ(weights->additive_v, Floats(set.tensors().at("additive.v").data));
}

TEST(ModelWeightsTest, AdditiveDimFromTheConfigMustAgree) {
  ModelConfig config = Config(kAdditive);
  config.additive_dim = 16;
  absl::StatusOr<LayerWeights> weights = Load(config, TensorsFor(config, 16));
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->additive_dim, 16);

  config.additive_dim = 8;
  EXPECT_THAT(Load(config, TensorsFor(config, 16)).status(),
              StatusIs(kInvalid,
                       HasSubstr("tensor additive.w_query: shape [2, 16, 12], "
                                 "expected [2, 8, 12] (A = 8 from config "
                                 "additive_dim)")));
}

TEST(ModelWeightsTest, AdditiveTensorsMustAgreeOnA) {
  const ModelConfig config = Config(kAdditive);
  TensorSet set = TensorsFor(config, 16);
  set.Add("additive.w_key", SafetensorsDType::kF32, {2, 8, 12},
          std::vector<float>(2 * 8 * 12, 0.0f));
  EXPECT_THAT(
      Load(config, set).status(),
      StatusIs(kInvalid,
               HasSubstr("enc/model.safetensors: tensor "
                         "additive.w_key: shape [2, 8, 12], expected "
                         "[2, 16, 12] (A = 16 from additive.w_query)")));
  set = TensorsFor(config, 16);
  set.Add("additive.v", SafetensorsDType::kF32, {2, 15},
          std::vector<float>(30, 0.0f));
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor additive.v: shape [2, 15], "
                                           "expected [2, 16] (A = 16 from "
                                           "additive.w_query)")));
}

TEST(ModelWeightsTest, AdditiveTensorsMissing) {
  const ModelConfig config = Config(kAdditive);
  TensorSet set = TensorsFor(config, 16);
  set.Remove("additive.w_query");
  set.Remove("additive.w_key");
  set.Remove("additive.v");
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor additive.w_query is missing "
                                           "(expected shape [2, A, 12])")));
  // A taken from the one that is there.
  set = TensorsFor(config, 16);
  set.Remove("additive.w_query");
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor additive.w_query is missing "
                                           "(expected shape [2, 16, 12])")));
}

TEST(ModelWeightsTest, AdditiveTensorsOfTheWrongRank) {
  const ModelConfig config = Config(kAdditive);
  TensorSet set = TensorsFor(config, 16);
  set.Add("additive.w_query", SafetensorsDType::kF32, {2, 16},
          std::vector<float>(32, 0.0f));
  set.Add("additive.w_key", SafetensorsDType::kF32, {2, 16},
          std::vector<float>(32, 0.0f));
  set.Add("additive.v", SafetensorsDType::kF32, {2}, {0.0f, 0.0f});
  // No tensor tells A.
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor additive.w_query: shape "
                                           "[2, 16], expected [2, A, 12]")));
}

TEST(ModelWeightsTest, AdditiveDimOutOfRange) {
  const ModelConfig config = Config(kAdditive);
  TensorSet set = TensorsFor(config, 16);
  set.Add("additive.w_query", SafetensorsDType::kF32, {2, 0, 12}, {});
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor additive.w_query: A = 0 "
                                           "(dimension 1) is out of range "
                                           "(expected 1 to 65536)")));
}

}  // namespace
}  // namespace attnserve::model

namespace attnserve::model {
namespace {

TEST(ModelWeightsLocalTest, PredictiveLocalAttentionTakesItsTwoTensors) {
  const ModelConfig config =
      Config(R"({"d_model": 8, "num_heads": 2, "local": "predictive",)"
             R"( "local_window": 2, "local_dim": 5})");
  const std::vector<ExpectedTensor> expected = ExpectedTensors(config, 0);
  EXPECT_EQ(Find(expected, "local.w_p").shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(Find(expected, "local.v_p").shape, (std::vector<int64_t>{5}));
  TensorSet set = TensorsFor(config, 0);
  absl::StatusOr<LayerWeights> w = Load(config, set);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->local_w_p.size(), 40u);
  EXPECT_EQ(w->local_v_p.size(), 5u);
  set.Remove("local.v_p");
  EXPECT_THAT(Load(config, set).status(),
              StatusIs(kInvalid, HasSubstr("tensor local.v_p is missing "
                                           "(expected shape [5])")));

  const ModelConfig monotonic =
      Config(R"({"d_model": 8, "num_heads": 2, "local": "monotonic",)"
             R"( "local_window": 2})");
  TensorSet plain = TensorsFor(monotonic, 0);
  plain.Add("local.w_p", SafetensorsDType::kF32, {1, 8},
            std::vector<float>(8, 0.0f));
  EXPECT_THAT(Load(monotonic, plain).status(),
              StatusIs(kInvalid, HasSubstr("tensor local.w_p is not used by "
                                           "this config (local is "
                                           "\"monotonic\")")));
}

TEST(ModelWeightsRelativeTest, RelativePositionalTakesItsThreeTensors) {
  const ModelConfig config = Config(
      R"({"d_model": 8, "num_heads": 2, "head_dim": 3, "positional": "relative"})");
  const std::vector<ExpectedTensor> expected = ExpectedTensors(config, 0);
  EXPECT_EQ(Find(expected, "relative.w_r").shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(Find(expected, "relative.u").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Find(expected, "relative.v").shape, (std::vector<int64_t>{2, 3}));
  TensorSet set = TensorsFor(config, 0);
  absl::StatusOr<LayerWeights> w = Load(config, set);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->relative_w_r.size(), 48u);
  EXPECT_EQ(w->relative_v.size(), 6u);

  const ModelConfig rope =
      Config(R"({"d_model": 8, "num_heads": 2, "positional": "rope"})");
  TensorSet plain = TensorsFor(rope, 0);
  plain.Add("relative.u", SafetensorsDType::kF32, {2, 4},
            std::vector<float>(8, 0.0f));
  EXPECT_THAT(Load(rope, plain).status(),
              StatusIs(kInvalid, HasSubstr("tensor relative.u is not used by "
                                           "this config (positional is "
                                           "\"rope\")")));
}

}  // namespace
}  // namespace attnserve::model
