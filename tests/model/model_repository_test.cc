#include "model/model_repository.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_config.h"
#include "tests/model/model_test_util.h"
#include "tests/util/test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::Config;
using ::attnserve::testing::RawSafetensors;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::TensorSet;
using ::attnserve::testing::TensorsFor;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

constexpr char kEncConfig[] = R"({"d_model": 64, "num_heads": 4})";
constexpr char kSmallConfig[] =
    R"({"d_model": 8, "num_heads": 2, "norm": "none", "bias": false,
        "scoring": "general"})";

class ModelRepositoryTest : public ::testing::Test {
 protected:
  // A good model `name` with `config_json`.
  void WriteModel(const std::string& name, const std::string& config_json) {
    dir_.Write(name + "/config.json", config_json);
    dir_.Write(name + "/model.safetensors",
               TensorsFor(Config(config_json), 0).Serialize());
  }
  std::string ModelPath(const std::string& name, const std::string& file) {
    return dir_.Path(absl::StrCat(name, "/", file));
  }
  absl::Status LoadError() {
    return LoadModelRepository(dir_.path(), /*skip_bad_models=*/false).status();
  }

  TempDir dir_;
};

TEST_F(ModelRepositoryTest, LoadsEveryModelSortedByName) {
  WriteModel("enc", kEncConfig);
  WriteModel("a-small.v2", kSmallConfig);
  dir_.Write("README.md", "files at the top level are ignored");
  dir_.Write(".git/config", "hidden folders too");
  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir_.path(), false);
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->models.size(), 2u);
  EXPECT_THAT(contents->skipped, IsEmpty());
  const LoadedModel& small = contents->models[0];
  const LoadedModel& enc = contents->models[1];
  EXPECT_EQ(small.name, "a-small.v2");
  EXPECT_EQ(small.config.scoring, Scoring::kGeneral);
  EXPECT_EQ(small.weights.general_weight.size(), 2u * 4 * 4);
  EXPECT_EQ(enc.name, "enc");
  EXPECT_EQ(ModelConfigToJson(enc.config),
            ModelConfigToJson(Config(kEncConfig)));
  EXPECT_EQ(enc.weights.q_proj_weight.size(), 64u * 64);
  EXPECT_EQ(enc.weights.norm_bias.size(), 64u);
}

TEST_F(ModelRepositoryTest, EmptyRepositoryIsNotAnError) {
  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir_.path(), false);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_THAT(contents->models, IsEmpty());
  EXPECT_THAT(contents->skipped, IsEmpty());
}

TEST_F(ModelRepositoryTest, RepositoryMissingOrNotADirectory) {
  const std::string missing = dir_.Path("nope");
  EXPECT_THAT(LoadModelRepository(missing, false).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat("model repository ", missing,
                                              " does not exist"))));
  dir_.Write("file", "x");
  EXPECT_THAT(LoadModelRepository(dir_.Path("file"), true).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("file is not a directory")));
}

TEST_F(ModelRepositoryTest, MissingConfig) {
  dir_.MakeDir("enc");
  dir_.Write("enc/model.safetensors", SerializeSafetensors({}));
  EXPECT_THAT(
      LoadError(),
      StatusIs(kInvalid, AllOf(StartsWith(ModelPath("enc", "config.json") +
                                          ": cannot open"),
                               HasSubstr("No such file or directory"))));
}

TEST_F(ModelRepositoryTest, MissingWeightsFile) {
  dir_.Write("enc/config.json", kEncConfig);
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid,
                       AllOf(StartsWith(ModelPath("enc", "model.safetensors") +
                                        ": cannot open"),
                             HasSubstr("No such file or directory"))));
}

TEST_F(ModelRepositoryTest, BadJsonConfig) {
  WriteModel("enc", kEncConfig);
  dir_.Write("enc/config.json", "{\"d_model\": 64, \"num_heads\": 4,}");
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid, StartsWith(ModelPath("enc", "config.json") +
                                            ": malformed JSON: ")));
}

TEST_F(ModelRepositoryTest, UnknownConfigKey) {
  WriteModel("enc", kEncConfig);
  dir_.Write("enc/config.json",
             R"({"d_model": 64, "num_heads": 4, "heads": 4})");
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid, StartsWith(ModelPath("enc", "config.json") +
                                            ": unknown key \"heads\"")));
}

TEST_F(ModelRepositoryTest, ConfigTooLarge) {
  WriteModel("enc", kEncConfig);
  dir_.Write("enc/config.json", std::string((1 << 20) + 1, ' '));
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid, StartsWith(ModelPath("enc", "config.json") +
                                            ": file is 1048577 bytes, above "
                                            "the limit of 1048576")));
}

TEST_F(ModelRepositoryTest, MissingTensor) {
  WriteModel("enc", kEncConfig);
  TensorSet set = TensorsFor(Config(kEncConfig), 0);
  set.Remove("v_proj.weight");
  dir_.Write("enc/model.safetensors", set.Serialize());
  EXPECT_THAT(
      LoadError(),
      StatusIs(kInvalid, StartsWith(ModelPath("enc", "model.safetensors") +
                                    ": tensor v_proj.weight is missing "
                                    "(expected shape [64, 64])")));
}

TEST_F(ModelRepositoryTest, WrongShape) {
  WriteModel("enc", kEncConfig);
  TensorSet set = TensorsFor(Config(kEncConfig), 0);
  set.Add("q_proj.weight", SafetensorsDType::kF32, {64, 32},
          std::vector<float>(64 * 32, 0.0f));
  dir_.Write("enc/model.safetensors", set.Serialize());
  EXPECT_THAT(
      LoadError(),
      StatusIs(kInvalid, StartsWith(ModelPath("enc", "model.safetensors") +
                                    ": tensor q_proj.weight: shape [64, 32], "
                                    "expected [64, 64]")));
}

TEST_F(ModelRepositoryTest, WrongDType) {
  WriteModel("enc", kEncConfig);
  dir_.Write(
      "enc/model.safetensors",
      RawSafetensors(R"({"q_proj.weight": {"dtype": "F64", "shape": [64, 64],)"
                     R"( "data_offsets": [0, 32768]}})",
                     std::string(32768, '\0')));
  EXPECT_THAT(
      LoadError(),
      StatusIs(kInvalid, StartsWith(ModelPath("enc", "model.safetensors") +
                                    ": tensor q_proj.weight: dtype F64 is not "
                                    "supported (expected F32, F16 or BF16)")));
}

TEST_F(ModelRepositoryTest, TruncatedFile) {
  WriteModel("enc", kEncConfig);
  const std::string bytes = TensorsFor(Config(kEncConfig), 0).Serialize();
  dir_.Write("enc/model.safetensors", bytes.substr(0, bytes.size() - 100));
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid,
                       AllOf(StartsWith(ModelPath("enc", "model.safetensors") +
                                        ": tensor "),
                             HasSubstr("end is beyond the data"))));
  dir_.Write("enc/model.safetensors", bytes.substr(0, 100));
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid,
                       AllOf(StartsWith(ModelPath("enc", "model.safetensors") +
                                        ": header size "),
                             HasSubstr("is beyond the file"))));
}

TEST_F(ModelRepositoryTest, BadHeaderOffsets) {
  WriteModel("enc", kEncConfig);
  dir_.Write("enc/model.safetensors",
             RawSafetensors(R"({"norm.bias": {"dtype": "F32", "shape": [64],)"
                            R"( "data_offsets": [256, 0]}})",
                            std::string(256, '\0')));
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid,
                       StartsWith(ModelPath("enc", "model.safetensors") +
                                  ": tensor norm.bias: data_offsets [256, 0]: "
                                  "begin is after end")));
}

TEST_F(ModelRepositoryTest, BadModelName) {
  WriteModel("bad name", kSmallConfig);
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid,
                       HasSubstr("bad name: bad model name (expected "
                                 "[A-Za-z0-9_.-]+, at most 128 characters)")));
  TempDir other;
  const std::string long_name(129, 'm');
  other.Write(long_name + "/config.json", kSmallConfig);
  EXPECT_THAT(LoadModelRepository(other.path(), false).status(),
              StatusIs(kInvalid, HasSubstr("bad model name")));
  TempDir ok;
  ok.Write(std::string(128, 'm') + "/config.json", kSmallConfig);
  ok.Write(std::string(128, 'm') + "/model.safetensors",
           TensorsFor(Config(kSmallConfig), 0).Serialize());
  EXPECT_TRUE(LoadModelRepository(ok.path(), false).ok());
}

TEST_F(ModelRepositoryTest, OneBadModelFailsTheLoad) {
  WriteModel("a_good", kSmallConfig);
  WriteModel("b_bad", kSmallConfig);
  dir_.Write("b_bad/config.json", R"({"d_model": 8})");
  WriteModel("c_good", kEncConfig);
  EXPECT_THAT(LoadError(),
              StatusIs(kInvalid, StartsWith(ModelPath("b_bad", "config.json") +
                                            ": missing required key "
                                            "\"num_heads\"")));
}

TEST_F(ModelRepositoryTest, SkipBadModelsListsThemAndLoadsTheGoodOnes) {
  WriteModel("a_good", kSmallConfig);
  WriteModel("b_bad", kSmallConfig);
  dir_.Write("b_bad/config.json", R"({"d_model": 8})");
  WriteModel("c_good", kEncConfig);
  dir_.MakeDir("d_empty");
  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir_.path(), /*skip_bad_models=*/true);
  ASSERT_TRUE(contents.ok()) << contents.status();
  ASSERT_EQ(contents->models.size(), 2u);
  EXPECT_EQ(contents->models[0].name, "a_good");
  EXPECT_EQ(contents->models[1].name, "c_good");
  EXPECT_THAT(
      contents->skipped,
      ElementsAre(
          StartsWith(absl::StrCat("b_bad: ", ModelPath("b_bad", "config.json"),
                                  ": missing required key")),
          AllOf(StartsWith(absl::StrCat(
                    "d_empty: ", ModelPath("d_empty", "config.json"),
                    ": cannot open")),
                HasSubstr("No such file"))));
}

}  // namespace
}  // namespace attnserve::model
