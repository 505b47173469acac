#include "model/model_config.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// A config that sets every key of docs/models.md "config.json".
constexpr char kFullConfig[] = R"({
  "kind": "multi_head_attention", "d_model": 512, "num_heads": 8,
  "num_kv_heads": 2, "head_dim": 32, "bias": false, "norm": "pre",
  "norm_eps": 1e-6, "positional": "rope", "rope_theta": 500000.0,
  "scoring": "general", "additive_dim": 0, "dtype": "bfloat16" })";

absl::Status ParseError(const std::string& json) {
  return ParseModelConfig(json).status();
}

TEST(ModelConfigTest, MinimalConfigTakesTheDefaults) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfig(R"({"d_model": 64, "num_heads": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->kind, "multi_head_attention");
  EXPECT_EQ(config->d_model, 64);
  EXPECT_EQ(config->num_heads, 4);
  EXPECT_EQ(config->num_kv_heads, 4);
  EXPECT_EQ(config->head_dim, 16);
  EXPECT_TRUE(config->bias);
  EXPECT_EQ(config->norm, NormPlacement::kPost);
  EXPECT_EQ(config->norm_eps, 1e-5);
  EXPECT_EQ(config->positional, Positional::kNone);
  EXPECT_EQ(config->rope_theta, 10000.0);
  EXPECT_EQ(config->scoring, Scoring::kScaledDot);
  EXPECT_EQ(config->additive_dim, 0);
  EXPECT_EQ(config->dtype, ModelDType::kFloat32);
}

TEST(ModelConfigTest, EveryKeyIsRead) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kFullConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->d_model, 512);
  EXPECT_EQ(config->num_heads, 8);
  EXPECT_EQ(config->num_kv_heads, 2);
  EXPECT_EQ(config->head_dim, 32);
  EXPECT_FALSE(config->bias);
  EXPECT_EQ(config->norm, NormPlacement::kPre);
  EXPECT_EQ(config->norm_eps, 1e-6);
  EXPECT_EQ(config->positional, Positional::kRope);
  EXPECT_EQ(config->rope_theta, 500000.0);
  EXPECT_EQ(config->scoring, Scoring::kGeneral);
  EXPECT_EQ(config->dtype, ModelDType::kBFloat16);
}

TEST(ModelConfigTest, EveryEnumValueParses) {
  for (const auto& [json, norm] :
       {std::pair<const char*, NormPlacement>{"post", NormPlacement::kPost},
        {"pre", NormPlacement::kPre},
        {"none", NormPlacement::kNone}}) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(absl::StrCat(
        R"({"d_model": 8, "num_heads": 2, "norm": ")", json, R"("})"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->norm, norm);
    EXPECT_EQ(NormPlacementName(norm), json);
  }
  for (const auto& [json, positional] :
       {std::pair<const char*, Positional>{"none", Positional::kNone},
        {"sinusoidal", Positional::kSinusoidal},
        {"rope", Positional::kRope}}) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(absl::StrCat(
        R"({"d_model": 8, "num_heads": 2, "positional": ")", json, R"("})"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->positional, positional);
    EXPECT_EQ(PositionalName(positional), json);
  }
  for (const auto& [json, scoring] :
       {std::pair<const char*, Scoring>{"scaled_dot", Scoring::kScaledDot},
        {"dot", Scoring::kDot},
        {"general", Scoring::kGeneral},
        {"additive", Scoring::kAdditive}}) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(absl::StrCat(
        R"({"d_model": 8, "num_heads": 2, "scoring": ")", json, R"("})"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->scoring, scoring);
    EXPECT_EQ(ScoringName(scoring), json);
  }
  for (const auto& [json, dtype] :
       {std::pair<const char*, ModelDType>{"float32", ModelDType::kFloat32},
        {"bfloat16", ModelDType::kBFloat16}}) {
    absl::StatusOr<ModelConfig> config = ParseModelConfig(absl::StrCat(
        R"({"d_model": 8, "num_heads": 2, "dtype": ")", json, R"("})"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->dtype, dtype);
    EXPECT_EQ(ModelDTypeName(dtype), json);
  }
}

TEST(ModelConfigTest, HeadDimNeedNotDivideDModel) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfig(R"({"d_model": 30, "num_heads": 4, "head_dim": 12})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 12);
}

TEST(ModelConfigTest, ToJsonHasEveryKeyInOrder) {
  absl::StatusOr<ModelConfig> config =
      ParseModelConfig(R"({"d_model": 64, "num_heads": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ModelConfigToJson(*config),
            R"({"kind":"multi_head_attention","d_model":64,"num_heads":4,)"
            R"("num_kv_heads":4,"head_dim":16,"bias":true,"norm":"post",)"
            R"("norm_eps":1e-05,"positional":"none","rope_theta":10000.0,)"
            R"("scoring":"scaled_dot","additive_dim":0,"dtype":"float32",)"
            R"("local":"none","local_window":0,"local_dim":0,)"
            R"("attention":"softmax","linformer_k":0,"linformer_max_len":0,)"
            R"("feature_map":"elu","num_features":256,"num_hashes":4,)"
            R"("num_buckets":64,"chunk_size":64,"seed":0})");
}

TEST(ModelConfigTest, ToJsonParsesBackToTheSameConfig) {
  absl::StatusOr<ModelConfig> config = ParseModelConfig(kFullConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<ModelConfig> again =
      ParseModelConfig(ModelConfigToJson(*config));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ModelConfigToJson(*again), ModelConfigToJson(*config));
  EXPECT_EQ(again->norm_eps, config->norm_eps);
  EXPECT_EQ(again->rope_theta, config->rope_theta);
}

TEST(ModelConfigTest, MalformedJson) {
  EXPECT_THAT(ParseError(R"({"d_model": 64,)"),
              StatusIs(kInvalid, AllOf(HasSubstr("malformed JSON"),
                                       HasSubstr("line 1, column 16"))));
  EXPECT_THAT(ParseError(""), StatusIs(kInvalid, HasSubstr("malformed JSON")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4} {})"),
              StatusIs(kInvalid, HasSubstr("expected end of input")));
}

TEST(ModelConfigTest, NulBytesAreNotJson) {
  // nlohmann alone would stop at the NUL and accept the config.
  EXPECT_THAT(
      ParseError(std::string("{\"d_model\": 64, \"num_heads\": 4}\0x", 33)),
      StatusIs(kInvalid, HasSubstr("malformed JSON: NUL byte at offset 31")));
}

TEST(ModelConfigTest, CommentsAreNotJson) {
  EXPECT_THAT(ParseError("{\"d_model\": 64, // the width\n \"num_heads\": 4}"),
              StatusIs(kInvalid, HasSubstr("malformed JSON")));
  EXPECT_THAT(ParseError("{\"d_model\": 64, /* x */ \"num_heads\": 4}"),
              StatusIs(kInvalid, HasSubstr("malformed JSON")));
}

TEST(ModelConfigTest, NotAnObject) {
  EXPECT_THAT(
      ParseError("[1, 2]"),
      StatusIs(kInvalid,
               HasSubstr("config must be a JSON object, got an array")));
  EXPECT_THAT(ParseError("\"config\""),
              StatusIs(kInvalid, HasSubstr("got a string (\"config\")")));
}

TEST(ModelConfigTest, DuplicateKey) {
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "d_model": 32})"),
              StatusIs(kInvalid, HasSubstr("duplicate key \"d_model\"")));
}

TEST(ModelConfigTest, UnknownKey) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "num_layers": 6})"),
      StatusIs(kInvalid,
               AllOf(HasSubstr("unknown key \"num_layers\""),
                     HasSubstr("expected additive_dim, attention, bias"))));
  // Keys are case-sensitive.
  EXPECT_THAT(ParseError(R"({"D_model": 64, "num_heads": 4})"),
              StatusIs(kInvalid, HasSubstr("unknown key \"D_model\"")));
}

TEST(ModelConfigTest, MissingRequiredKey) {
  EXPECT_THAT(
      ParseError(R"({"num_heads": 4})"),
      StatusIs(kInvalid, HasSubstr("missing required key \"d_model\"")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64})"),
      StatusIs(kInvalid, HasSubstr("missing required key \"num_heads\"")));
}

TEST(ModelConfigTest, WrongTypesNameKeyExpectedAndActual) {
  EXPECT_THAT(ParseError(R"({"d_model": "64", "num_heads": 4})"),
              StatusIs(kInvalid, HasSubstr("key \"d_model\": expected an "
                                           "integer, got a string (\"64\")")));
  EXPECT_THAT(ParseError(R"({"d_model": 64.0, "num_heads": 4})"),
              StatusIs(kInvalid, HasSubstr("key \"d_model\": expected an "
                                           "integer, got a number (64.0)")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": null})"),
              StatusIs(kInvalid, HasSubstr("key \"num_heads\": expected an "
                                           "integer, got null")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "bias": "yes"})"),
              StatusIs(kInvalid, HasSubstr("key \"bias\": expected a boolean, "
                                           "got a string (\"yes\")")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "bias": 1})"),
              StatusIs(kInvalid, HasSubstr("key \"bias\": expected a boolean, "
                                           "got a number (1)")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "norm": 1})"),
              StatusIs(kInvalid, HasSubstr("key \"norm\": expected a string, "
                                           "got a number (1)")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "norm_eps": "1e-5"})"),
      StatusIs(kInvalid, HasSubstr("key \"norm_eps\": expected a number, got "
                                   "a string (\"1e-5\")")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "rope_theta": [1]})"),
      StatusIs(kInvalid, HasSubstr("key \"rope_theta\": expected a number, "
                                   "got an array")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "kind": {}})"),
              StatusIs(kInvalid, HasSubstr("key \"kind\": expected a string, "
                                           "got an object")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "dtype": true})"),
      StatusIs(kInvalid, HasSubstr("key \"dtype\": expected a string, got a "
                                   "boolean (true)")));
}

TEST(ModelConfigTest, LongValuesAreCutInMessages) {
  const std::string long_value(1000, 'x');
  absl::Status status = ParseError(
      absl::StrCat(R"({"d_model": ")", long_value, R"(", "num_heads": 4})"));
  EXPECT_THAT(status, StatusIs(kInvalid, HasSubstr("xxx...")));
  EXPECT_LT(status.message().size(), 200u);
}

TEST(ModelConfigTest, UnknownEnumValues) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "norm": "layer"})"),
      StatusIs(kInvalid, HasSubstr("key \"norm\": unknown value \"layer\" "
                                   "(expected \"post\", \"pre\", \"none\")")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "positional": "alibi"})"),
      StatusIs(kInvalid, HasSubstr("key \"positional\": unknown value "
                                   "\"alibi\"")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "scoring": "cosine"})"),
      StatusIs(kInvalid,
               HasSubstr("key \"scoring\": unknown value \"cosine\" (expected "
                         "\"scaled_dot\", \"dot\", \"general\", "
                         "\"additive\")")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "dtype": "float16"})"),
      StatusIs(kInvalid, HasSubstr("key \"dtype\": unknown value \"float16\" "
                                   "(expected \"float32\", \"bfloat16\")")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "kind": "transformer"})"),
      StatusIs(kInvalid, HasSubstr("key \"kind\": unknown value "
                                   "\"transformer\" (expected "
                                   "\"multi_head_attention\")")));
}

TEST(ModelConfigTest, DimensionsOutOfRange) {
  EXPECT_THAT(ParseError(R"({"d_model": 0, "num_heads": 4})"),
              StatusIs(kInvalid, HasSubstr("key \"d_model\": 0 is out of "
                                           "range (expected 1 to 65536)")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": -4})"),
              StatusIs(kInvalid, HasSubstr("key \"num_heads\": -4 is out of "
                                           "range")));
  EXPECT_THAT(ParseError(R"({"d_model": 65537, "num_heads": 1})"),
              StatusIs(kInvalid, HasSubstr("key \"d_model\": 65537 is out of "
                                           "range")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 4, "head_dim": 0})"),
              StatusIs(kInvalid, HasSubstr("key \"head_dim\": 0 is out of "
                                           "range")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "num_kv_heads": 0})"),
      StatusIs(kInvalid, HasSubstr("key \"num_kv_heads\": 0 is out of range")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "additive_dim": -1})"),
      StatusIs(kInvalid, HasSubstr("key \"additive_dim\": -1 is out of range "
                                   "(expected 0 to 65536)")));
  // Beyond int64 and beyond uint64.
  EXPECT_THAT(
      ParseError(R"({"d_model": 18446744073709551615, "num_heads": 4})"),
      StatusIs(kInvalid, HasSubstr("key \"d_model\": 18446744073709551615 is "
                                   "out of range")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 100000000000000000000, "num_heads": 4})"),
      StatusIs(kInvalid, HasSubstr("key \"d_model\": expected an integer, got "
                                   "a number")));
  EXPECT_TRUE(ParseModelConfig(R"({"d_model": 65536, "num_heads": 256})").ok());
}

TEST(ModelConfigTest, KvHeadsMustDivideHeads) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 8, "num_kv_heads": 3})"),
      StatusIs(kInvalid, HasSubstr("key \"num_kv_heads\": 3 must divide "
                                   "num_heads 8")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "num_kv_heads": 8})"),
      StatusIs(kInvalid, HasSubstr("key \"num_kv_heads\": 8 must divide "
                                   "num_heads 4")));
}

TEST(ModelConfigTest, DModelMustBeAMultipleOfHeadsWithoutHeadDim) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 65, "num_heads": 4})"),
      StatusIs(kInvalid, HasSubstr("key \"num_heads\": d_model 65 is not a "
                                   "multiple of num_heads 4 (set head_dim")));
}

// Regression: head_dim 512 loaded, then every call failed in the kernel with
// a message about a "query" the caller never sent.
TEST(ModelConfigTest, HeadDimAboveTheKernelsLimitIsRefused) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 2048, "num_heads": 2})"),
      StatusIs(kInvalid, HasSubstr("key \"head_dim\": head_dim 1024 "
                                   "(d_model / num_heads unless set) is above "
                                   "512")));
  EXPECT_THAT(ParseError(R"({"d_model": 64, "num_heads": 2, "head_dim": 513})"),
              StatusIs(kInvalid, HasSubstr("head_dim 513")));
  EXPECT_TRUE(ParseModelConfig(R"({"d_model": 1024, "num_heads": 2})").ok());
}

TEST(ModelConfigTest, RopeNeedsAnEvenHeadDim) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 12, "num_heads": 4, "positional": "rope"})"),
      StatusIs(kInvalid, HasSubstr("key \"head_dim\": positional \"rope\" "
                                   "needs an even head_dim, got 3")));
  EXPECT_TRUE(
      ParseModelConfig(R"({"d_model": 12, "num_heads": 4, "head_dim": 4,)"
                       R"( "positional": "rope"})")
          .ok());
}

TEST(ModelConfigTest, EpsAndThetaMustBePositiveAndFinite) {
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "norm_eps": 0})"),
      StatusIs(kInvalid, HasSubstr("key \"norm_eps\": 0 must be positive and "
                                   "finite")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "norm_eps": -1e-5})"),
      StatusIs(kInvalid, HasSubstr("key \"norm_eps\": -1e-05 must be "
                                   "positive")));
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "rope_theta": 0.0})"),
      StatusIs(kInvalid, HasSubstr("key \"rope_theta\": 0.0 must be "
                                   "positive")));
  // JSON has no infinity; a literal too large for a double is malformed.
  EXPECT_THAT(
      ParseError(R"({"d_model": 64, "num_heads": 4, "rope_theta": 1e400})"),
      StatusIs(kInvalid, HasSubstr("malformed JSON: number overflow")));
  // Integers are numbers too.
  absl::StatusOr<ModelConfig> config = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "rope_theta": 10000})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope_theta, 10000.0);
}

TEST(ModelConfigTest, NamesOfEveryEnumerator) {
  EXPECT_EQ(NormPlacementName(NormPlacement::kNone), "none");
  EXPECT_EQ(PositionalName(Positional::kSinusoidal), "sinusoidal");
  EXPECT_EQ(ScoringName(Scoring::kAdditive), "additive");
  EXPECT_EQ(ModelDTypeName(ModelDType::kBFloat16), "bfloat16");
}

}  // namespace
}  // namespace attnserve::model

namespace attnserve::model {
namespace {

TEST(ModelConfigVariantsTest, ParsesEveryAttentionKind) {
  auto linformer = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "attention": "linformer",)"
      R"( "linformer_k": 16, "linformer_max_len": 512})");
  ASSERT_TRUE(linformer.ok()) << linformer.status();
  EXPECT_EQ(linformer->attention, AttentionKind::kLinformer);
  EXPECT_EQ(linformer->linformer_k, 16);
  EXPECT_EQ(linformer->linformer_max_len, 512);
  auto linear = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "attention": "linear",)"
      R"( "feature_map": "favor", "num_features": 32, "seed": 18446744073709551615})");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->feature_map, FeatureMap::kFavorPlus);
  EXPECT_EQ(linear->num_features, 32);
  EXPECT_EQ(linear->seed, 18446744073709551615ull);
  auto lsh = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "attention": "lsh", "num_hashes": 2,)"
      R"( "num_buckets": 8, "chunk_size": 16})");
  ASSERT_TRUE(lsh.ok()) << lsh.status();
  EXPECT_EQ(lsh->attention, AttentionKind::kLsh);
  EXPECT_EQ(lsh->num_hashes, 2);
  EXPECT_EQ(lsh->num_buckets, 8);
  EXPECT_EQ(lsh->chunk_size, 16);
  auto local_m = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "local": "monotonic",)"
      R"( "local_window": 0})");
  ASSERT_TRUE(local_m.ok()) << local_m.status();
  EXPECT_EQ(local_m->local, LocalAttention::kMonotonic);
  EXPECT_EQ(local_m->local_window, 0);
  auto local_p = ParseModelConfig(
      R"({"d_model": 64, "num_heads": 4, "scoring": "dot",)"
      R"( "local": "predictive", "local_window": 8, "local_dim": 32})");
  ASSERT_TRUE(local_p.ok()) << local_p.status();
  EXPECT_EQ(local_p->local, LocalAttention::kPredictive);
  EXPECT_EQ(local_p->local_window, 8);
  EXPECT_EQ(local_p->local_dim, 32);
  EXPECT_EQ(LocalAttentionName(LocalAttention::kPredictive), "predictive");
  auto local_again = ParseModelConfig(ModelConfigToJson(*local_p));
  ASSERT_TRUE(local_again.ok()) << local_again.status();
  EXPECT_EQ(ModelConfigToJson(*local_again), ModelConfigToJson(*local_p));
  // The JSON GetServerInfo reports parses back to the same config.
  auto again = ParseModelConfig(ModelConfigToJson(*linear));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ModelConfigToJson(*again), ModelConfigToJson(*linear));
}

TEST(ModelConfigVariantsTest, RefusesBadCombinations) {
  const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {R"({"d_model": 64, "num_heads": 4, "attention": "linformer"})",
       "missing required key \"linformer_k\""},
      {R"({"d_model": 64, "num_heads": 4, "attention": "linformer",)"
       R"( "linformer_k": 0, "linformer_max_len": 8})",
       "key \"linformer_k\": 0 is out of range (expected 1 to 65536)"},
      {R"({"d_model": 64, "num_heads": 4, "attention": "dense"})",
       "key \"attention\": unknown value \"dense\" (expected \"softmax\", "
       "\"linformer\", \"linear\", \"lsh\")"},
      {R"({"d_model": 64, "num_heads": 4, "attention": "linear",)"
       R"( "scoring": "additive"})",
       "key \"attention\": \"linear\" needs scoring \"scaled_dot\", got "
       "\"additive\""},
      {R"({"d_model": 64, "num_heads": 4, "num_kv_heads": 2,)"
       R"( "attention": "lsh"})",
       "key \"num_kv_heads\": attention \"lsh\" shares queries and keys, so "
       "num_kv_heads must equal num_heads 4, got 2"},
      {R"({"d_model": 64, "num_heads": 4, "feature_map": "tanh"})",
       "key \"feature_map\": unknown value \"tanh\""},
      {R"({"d_model": 64, "num_heads": 4, "local": "monotonic"})",
       "missing required key \"local_window\""},
      {R"({"d_model": 64, "num_heads": 4, "local": "predictive",)"
       R"( "local_window": 0, "local_dim": 4})",
       "key \"local_window\": 0 is out of range (expected 1 to 65536)"},
      {R"({"d_model": 64, "num_heads": 4, "local": "predictive",)"
       R"( "local_window": 4})",
       "missing required key \"local_dim\""},
      {R"({"d_model": 64, "num_heads": 4, "local": "p", "local_window": 4})",
       "key \"local\": unknown value \"p\" (expected \"none\", "
       "\"monotonic\", \"predictive\")"},
      {R"({"d_model": 64, "num_heads": 4, "local": "monotonic",)"
       R"( "local_window": 4, "attention": "linear"})",
       "key \"local\": \"monotonic\" needs attention \"softmax\", got "
       "\"linear\""},
      {R"({"d_model": 64, "num_heads": 4, "positional": "relative",)"
       R"( "attention": "linear"})",
       "key \"positional\": \"relative\" needs attention \"softmax\", got "
       "\"linear\""},
      {R"({"d_model": 64, "num_heads": 4, "positional": "relative",)"
       R"( "scoring": "general"})",
       "key \"positional\": \"relative\" needs scoring \"scaled_dot\" or "
       "\"dot\", got \"general\""},
      {R"({"d_model": 63, "num_heads": 3, "positional": "relative"})",
       "key \"d_model\": positional \"relative\" needs an even d_model, got "
       "63"},
      {R"({"d_model": 64, "num_heads": 4, "seed": -1})",
       "key \"seed\": expected a non-negative integer, got -1"},
      {R"({"d_model": 64, "num_heads": 4, "seed": 1.5})",
       "key \"seed\": expected a non-negative integer, got 1.5"},
  };
  for (const auto& c : cases) {
    auto config = ParseModelConfig(c.json);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()),
                ::testing::HasSubstr(c.message))
        << c.json;
  }
}

}  // namespace
}  // namespace attnserve::model
