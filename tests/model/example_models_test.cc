// examples/make_model_repository, run as `make run` runs it, and its models
// loaded as the server loads them.

#include "tests/util/example_models.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/attention.h"
#include "core/matmul.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/attention_layer.h"
#include "model/model_config.h"
#include "model/model_repository.h"
#include "model/safetensors.h"
#include "tests/model/model_test_util.h"

namespace attnserve::model {
namespace {

using ::attnserve::testing::MakeExampleModels;
using ::attnserve::testing::ScriptRun;
using ::attnserve::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The configs the script writes, with the documented defaults filled in.
std::vector<std::pair<std::string, ModelConfig>> ExpectedModels() {
  std::vector<std::pair<std::string, ModelConfig>> models;
  ModelConfig c;
  c.d_model = 64, c.num_heads = 4, c.num_kv_heads = 4, c.head_dim = 16;
  models.push_back({"mha_post", c});

  c = ModelConfig();
  c.d_model = 64, c.num_heads = 8, c.num_kv_heads = 2, c.head_dim = 8;
  c.bias = false, c.norm = NormPlacement::kPre, c.norm_eps = 1e-6;
  c.positional = Positional::kRope, c.rope_theta = 50000.0;
  c.dtype = ModelDType::kBFloat16;
  models.push_back({"gqa_rope_pre", c});

  c = ModelConfig();
  c.d_model = 32, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 8;
  c.norm = NormPlacement::kNone, c.positional = Positional::kSinusoidal;
  c.scoring = Scoring::kGeneral;
  models.push_back({"general_sinusoidal", c});

  c = ModelConfig();
  c.d_model = 32, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 12;
  c.scoring = Scoring::kAdditive;
  models.push_back({"additive", c});

  c = ModelConfig();
  c.d_model = 64, c.num_heads = 4, c.num_kv_heads = 1, c.head_dim = 16;
  models.push_back({"mqa_bf16_tensors", c});

  c = ModelConfig();
  c.d_model = 64, c.num_heads = 4, c.num_kv_heads = 4, c.head_dim = 16;
  c.attention = AttentionKind::kLinformer;
  c.linformer_k = 64, c.linformer_max_len = 8192;
  models.push_back({"linformer_long", c});

  c = ModelConfig();
  c.d_model = 32, c.num_heads = 2, c.num_kv_heads = 2, c.head_dim = 16;
  c.norm = NormPlacement::kNone, c.scoring = Scoring::kDot;
  c.local = LocalAttention::kPredictive;
  c.local_window = 4, c.local_dim = 16;
  models.push_back({"luong_local", c});

  c = ModelConfig();
  c.d_model = 32, c.num_heads = 4, c.num_kv_heads = 4, c.head_dim = 8;
  c.bias = false, c.positional = Positional::kRelative;
  models.push_back({"transformer_xl", c});

  c = ModelConfig();
  c.d_model = 512, c.num_heads = 8, c.num_kv_heads = 8, c.head_dim = 64;
  models.push_back({"encoder_512", c});
  return models;
}

TEST(ExampleModelsTest, ScriptWritesModelsThatLoad) {
  TempDir dir;
  const ScriptRun run = MakeExampleModels(dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> lines =
      absl::StrSplit(run.output, '\n', absl::SkipEmpty());
  const auto expected = ExpectedModels();
  ASSERT_THAT(lines, SizeIs(expected.size())) << run.output;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_THAT(lines[i], StartsWith(expected[i].first + ": ")) << run.output;
  }

  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir.path(), /*skip_bad_models=*/false);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_THAT(contents->skipped, IsEmpty());
  std::map<std::string, const LoadedModel*> loaded;
  for (const LoadedModel& model : contents->models) {
    loaded[model.name] = &model;
  }
  ASSERT_EQ(loaded.size(), expected.size());
  for (const auto& [name, config] : expected) {
    ASSERT_EQ(loaded.count(name), 1u) << name;
    EXPECT_EQ(ModelConfigToJson(loaded[name]->config),
              ModelConfigToJson(config))
        << name;
  }
  EXPECT_EQ(loaded["additive"]->weights.additive_dim, 16);
  EXPECT_THAT(loaded["additive"]->weights.additive_v, SizeIs(4 * 16));
}

// Every example model warms up when its layer is created (as the server
// creates them at start-up); calls at new lengths then create no product
// primitive and give finite outputs.
TEST(ExampleModelsTest, EveryModelWarmsUpAndServesNewLengths) {
  TempDir dir;
  const ScriptRun run = MakeExampleModels(dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir.path(), false);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EngineOptions options;
  options.num_threads = 1;
  absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
      AttentionEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<MatmulCache*> cache = MatmulCache::Shared();
  ASSERT_TRUE(cache.ok());
  for (const LoadedModel& model : contents->models) {
    absl::StatusOr<std::unique_ptr<AttentionLayer>> layer =
        AttentionLayer::Create(model.config, model.weights);
    ASSERT_TRUE(layer.ok()) << model.name << ": " << layer.status();
    const int64_t created = (*cache)->created();
    const int64_t d = model.config.d_model;
    for (const int64_t l : {1, 37, 130, 201}) {
      std::vector<float> hidden(static_cast<size_t>(l * d));
      for (size_t i = 0; i < hidden.size(); ++i) {
        hidden[i] = std::sin(0.37f * static_cast<float>(i));
      }
      std::vector<float> out(hidden.size());
      LayerInputs in;
      in.hidden = MakeTensorView(hidden.data(), DType::kFloat32, {1, l, d});
      LayerOutputs o;
      o.output = MakeMutableTensorView(out.data(), DType::kFloat32, {1, l, d});
      const absl::Status st = (*layer)->Run(in, o, **engine);
      ASSERT_TRUE(st.ok()) << model.name << " L = " << l << ": " << st;
      for (float v : out) ASSERT_TRUE(std::isfinite(v)) << model.name;
    }
    if (model.config.attention == AttentionKind::kSoftmax) {
      EXPECT_EQ((*cache)->created(), created) << model.name;
    }
  }
}

TEST(ExampleModelsTest, WeightsLookInitialised) {
  TempDir dir;
  const ScriptRun run = MakeExampleModels(dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  absl::StatusOr<RepositoryContents> contents =
      LoadModelRepository(dir.path(), false);
  ASSERT_TRUE(contents.ok()) << contents.status();
  for (const LoadedModel& model : contents->models) {
    const LayerWeights& w = model.weights;
    const float bound =
        1.0f / std::sqrt(static_cast<float>(model.config.d_model));
    float max_abs = 0;
    for (float v : w.q_proj_weight) max_abs = std::max(max_abs, std::abs(v));
    EXPECT_LE(max_abs, bound * 1.01f) << model.name;
    EXPECT_GT(max_abs, bound * 0.9f) << model.name;
    // 1 ± 0.1 and ± 0.02, plus rounding to bf16 in gqa_rope_pre.
    for (float v : w.norm_weight) {
      ASSERT_NEAR(v, 1.0f, 0.11f) << model.name;
    }
    for (float v : w.norm_bias) {
      ASSERT_NEAR(v, 0.0f, 0.021f) << model.name;
    }
  }
}

TEST(ExampleModelsTest, FilesHoldTheDocumentedDTypes) {
  TempDir dir;
  const ScriptRun run = MakeExampleModels(dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto dtypes = [&](const std::string& name) {
    std::set<std::string> out;
    absl::StatusOr<SafetensorsFile> file =
        SafetensorsFile::Read(dir.Path(name + "/model.safetensors"));
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return out;
    for (const auto& [tensor_name, tensor] : file->tensors()) {
      out.insert(std::string(SafetensorsDTypeName(tensor.dtype)));
    }
    return out;
  };
  EXPECT_THAT(dtypes("mqa_bf16_tensors"), ElementsAre("BF16", "F16", "F32"));
  EXPECT_THAT(dtypes("gqa_rope_pre"), ElementsAre("BF16"));
  EXPECT_THAT(dtypes("encoder_512"), ElementsAre("F32"));
}

TEST(ExampleModelsTest, OutputIsByteForByteDeterministic) {
  TempDir first;
  TempDir second;
  const ScriptRun run1 = MakeExampleModels(first.path());
  const ScriptRun run2 = MakeExampleModels(second.path());
  ASSERT_EQ(run1.exit_code, 0) << run1.output;
  ASSERT_EQ(run2.exit_code, 0) << run2.output;
  EXPECT_EQ(run1.output, run2.output);
  int files = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(first.path())) {
    if (!entry.is_regular_file()) continue;
    const auto relative = std::filesystem::relative(entry.path(), first.path());
    EXPECT_TRUE(ReadAll(entry.path()) ==
                ReadAll(std::filesystem::path(second.path()) / relative))
        << relative << " differs between runs";
    ++files;
  }
  EXPECT_EQ(files, 2 * static_cast<int>(ExpectedModels().size()));
}

}  // namespace
}  // namespace attnserve::model
