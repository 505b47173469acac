// Hosted attention layers through a real attnserve process started with the
// example repository (examples/make_model_repository): AttendModel and
// AttendModelStream against the plain reference layer, GetServerInfo, the
// per-model metrics, the validation errors, and what a bad repository does to
// start-up.

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_repository.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/example_models.h"
#include "tests/util/reference_layer.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::ServerTest;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

// Writes the example models into `dir`; true on success.
bool MakeExampleRepository(const std::string& dir) {
  const ::attnserve::testing::ScriptRun run =
      ::attnserve::testing::MakeExampleModels(dir);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.exit_code == 0;
}

void ToWire(const TestTensor& t, v1::DataType dtype, v1::Tensor* out) {
  out->set_dtype(dtype);
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(static_cast<const char*>(t.data()),
                t.size() * DTypeSize(t.dtype()));
}

std::vector<float> Floats(const v1::Tensor& t) {
  std::vector<float> values(t.data().size() / 4);
  std::memcpy(values.data(), t.data().data(), values.size() * 4);
  return values;
}

class ModelE2eTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    ASSERT_TRUE(dir_->ok());
    const std::string repo = dir_->Path("models");
    ASSERT_TRUE(MakeExampleRepository(repo));
    auto contents = model::LoadModelRepository(repo, false);
    ASSERT_TRUE(contents.ok()) << contents.status();
    contents_ = new model::RepositoryContents(*std::move(contents));
    StartSuiteServer({"--workers=1", "--threads_per_worker=2",
                      "--model_repository=" + repo});
  }
  static void TearDownTestSuite() {
    StopSuiteServer();
    delete contents_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ServerTest::SetUp());
    stub_ = v1::AttentionService::NewStub(channel());
  }

  static const model::LoadedModel& Model(const std::string& name) {
    for (const model::LoadedModel& m : contents_->models) {
      if (m.name == name) return m;
    }
    ADD_FAILURE() << "no example model " << name;
    return contents_->models.front();
  }

  // Calls `request` and compares with the reference layer on the same inputs.
  void ExpectMatchesReference(const v1::ModelRequest& request,
                              const model::LayerInputs& inputs) {
    grpc::ClientContext context;
    v1::AttendResponse response;
    const grpc::Status status =
        stub_->AttendModel(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.request_id(), request.request_id());
    const model::LoadedModel& m = Model(request.model());
    std::vector<float> expected, expected_weights;
    ASSERT_TRUE(model::testing::ReferenceLayer(
                    m.config, m.weights, inputs, &expected,
                    request.return_weights() ? &expected_weights : nullptr)
                    .ok());
    ASSERT_EQ(response.output().dtype(), v1::FLOAT32);
    const std::vector<float> got = Floats(response.output());
    ASSERT_EQ(got.size(), expected.size());
    const bool bf16 = m.config.dtype == model::ModelDType::kBFloat16;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], expected[i],
                  (bf16 ? 4e-2 : 2e-4) * (1 + std::fabs(expected[i])))
          << request.model() << " output " << i;
    }
    if (request.return_weights()) {
      const std::vector<float> w = Floats(response.weights());
      ASSERT_EQ(w.size(), expected_weights.size());
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(w[i], expected_weights[i], bf16 ? 2e-2 : 2e-5)
            << request.model() << " weights " << i;
      }
    }
    EXPECT_GT(response.timing().compute_us(), 0);
  }

  static TempDir* dir_;
  static model::RepositoryContents* contents_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

TempDir* ModelE2eTest::dir_ = nullptr;
model::RepositoryContents* ModelE2eTest::contents_ = nullptr;

TEST_F(ModelE2eTest, ServerInfoListsTheModels) {
  grpc::ClientContext context;
  v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  ASSERT_EQ(info.models_size(), static_cast<int>(contents_->models.size()));
  for (int i = 0; i < info.models_size(); ++i) {
    const model::LoadedModel& m = contents_->models[i];
    EXPECT_EQ(info.models(i).name(), m.name);
    EXPECT_EQ(info.models(i).d_model(), m.config.d_model);
    EXPECT_EQ(info.models(i).num_heads(), m.config.num_heads);
    EXPECT_EQ(info.models(i).num_kv_heads(), m.config.num_kv_heads);
    EXPECT_EQ(info.models(i).head_dim(), m.config.head_dim);
    EXPECT_THAT(info.models(i).config_json(),
                HasSubstr(absl::StrCat("\"d_model\":", m.config.d_model)));
  }
}

TEST_F(ModelE2eTest, SelfAttentionWithWeights) {
  const int64_t d = Model("mha_post").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 6, d}, 1);
  v1::ModelRequest request;
  request.set_request_id("self");
  request.set_model("mha_post");
  request.set_return_weights(true);
  ToWire(hidden, v1::FLOAT32, request.mutable_hidden());
  model::LayerInputs inputs;
  inputs.hidden = hidden.view();
  ExpectMatchesReference(request, inputs);
}

TEST_F(ModelE2eTest, CrossAttentionWithPaddingAndCausal) {
  const int64_t d = Model("additive").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 4, d}, 2);
  const TestTensor memory = TestTensor::Random(DType::kFloat32, {2, 9, d}, 3);
  v1::ModelRequest request;
  request.set_model("additive");
  request.set_return_weights(true);
  ToWire(hidden, v1::FLOAT32, request.mutable_hidden());
  ToWire(memory, v1::FLOAT32, request.mutable_memory());
  request.mutable_mask()->add_key_lengths(9);
  request.mutable_mask()->add_key_lengths(5);
  request.mutable_mask()->set_causal(true);
  request.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
  const std::vector<int32_t> lengths = {9, 5};
  model::LayerInputs inputs;
  inputs.hidden = hidden.view();
  inputs.memory = memory.view();
  inputs.mask.key_lengths = lengths;
  inputs.mask.causal = true;
  inputs.mask.alignment = CausalAlignment::kBottomRight;
  ExpectMatchesReference(request, inputs);
}

TEST_F(ModelE2eTest, LuongLocalAttentionWithPaddingAndWeights) {
  const int64_t d = Model("luong_local").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {2, 5, d}, 5);
  const TestTensor memory = TestTensor::Random(DType::kFloat32, {2, 20, d}, 6);
  v1::ModelRequest request;
  request.set_model("luong_local");
  request.set_return_weights(true);
  ToWire(hidden, v1::FLOAT32, request.mutable_hidden());
  ToWire(memory, v1::FLOAT32, request.mutable_memory());
  request.mutable_mask()->add_key_lengths(20);
  request.mutable_mask()->add_key_lengths(11);
  const std::vector<int32_t> lengths = {20, 11};
  model::LayerInputs inputs;
  inputs.hidden = hidden.view();
  inputs.memory = memory.view();
  inputs.mask.key_lengths = lengths;
  ExpectMatchesReference(request, inputs);
}

TEST_F(ModelE2eTest, RopeWithPositionsInBf16) {
  const int64_t d = Model("gqa_rope_pre").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kBFloat16, {1, 5, d}, 4);
  const std::vector<int32_t> positions = {10, 11, 12, 13, 14};
  v1::ModelRequest request;
  request.set_model("gqa_rope_pre");
  request.set_output_dtype(v1::FLOAT32);
  ToWire(hidden, v1::BFLOAT16, request.mutable_hidden());
  v1::Tensor* p = request.mutable_positions();
  p->set_dtype(v1::INT32);
  p->add_shape(1);
  p->add_shape(5);
  p->set_data(reinterpret_cast<const char*>(positions.data()), 5 * 4);
  model::LayerInputs inputs;
  inputs.hidden = hidden.view();
  inputs.positions = positions;
  ExpectMatchesReference(request, inputs);
}

TEST_F(ModelE2eTest, StreamAnswersInOrderAndSurvivesABadMessage) {
  const int64_t d = Model("general_sinusoidal").config.d_model;
  grpc::ClientContext context;
  auto stream = stub_->AttendModelStream(&context);
  std::vector<TestTensor> hiddens;
  for (int i = 0; i < 3; ++i) {
    hiddens.push_back(
        TestTensor::Random(DType::kFloat32, {1, 3 + i, d}, 10 + i));
    v1::ModelRequest request;
    request.set_request_id(absl::StrCat("m", i));
    request.set_model(i == 1 ? "no_such_model" : "general_sinusoidal");
    ToWire(hiddens.back(), v1::FLOAT32, request.mutable_hidden());
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  for (int i = 0; i < 3; ++i) {
    v1::AttendResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.request_id(), absl::StrCat("m", i));
    if (i == 1) {
      EXPECT_EQ(response.error_code(), grpc::StatusCode::NOT_FOUND);
      EXPECT_THAT(response.error_message(),
                  HasSubstr("\"no_such_model\" is not hosted here"));
    } else {
      EXPECT_EQ(response.error_code(), 0) << response.error_message();
      EXPECT_EQ(response.output().shape_size(), 3);
      EXPECT_EQ(response.output().shape(1), 3 + i);
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ModelE2eTest, BadRequestsGetClearErrors) {
  const int64_t d = Model("mha_post").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 3, d}, 5);
  const TestTensor narrow =
      TestTensor::Random(DType::kFloat32, {1, 3, d - 1}, 5);
  const TestTensor memory16 = TestTensor::Random(DType::kFloat16, {1, 3, d}, 6);
  struct Case {
    std::string name;
    grpc::StatusCode code;
    std::string message;
    std::function<void(v1::ModelRequest*)> edit;
  };
  const std::vector<Case> cases = {
      {"no model", grpc::StatusCode::INVALID_ARGUMENT,
       "model: missing (this server hosts: additive, encoder_512",
       [](v1::ModelRequest* r) { r->clear_model(); }},
      {"unknown model", grpc::StatusCode::NOT_FOUND,
       "model: \"nope\" is not hosted here",
       [](v1::ModelRequest* r) { r->set_model("nope"); }},
      {"no hidden", grpc::StatusCode::INVALID_ARGUMENT, "hidden: missing",
       [](v1::ModelRequest* r) { r->clear_hidden(); }},
      {"wrong d_model", grpc::StatusCode::INVALID_ARGUMENT,
       absl::StrCat("hidden.shape: expected [B, Lq, d_model = ", d,
                    "], got [1, 3, ", d - 1, "]"),
       [&](v1::ModelRequest* r) {
         r->clear_hidden();
         ToWire(narrow, v1::FLOAT32, r->mutable_hidden());
       }},
      {"memory dtype", grpc::StatusCode::INVALID_ARGUMENT,
       "memory.dtype: FLOAT16 differs from hidden.dtype FLOAT32",
       [&](v1::ModelRequest* r) {
         ToWire(memory16, v1::FLOAT16, r->mutable_memory());
       }},
      {"positions dtype", grpc::StatusCode::INVALID_ARGUMENT,
       "positions.dtype: FLOAT32 is not supported (expected INT32)",
       [](v1::ModelRequest* r) {
         r->mutable_positions()->set_dtype(v1::FLOAT32);
       }},
      {"positions shape", grpc::StatusCode::INVALID_ARGUMENT,
       "positions.shape: expected [B, Lq] = [1, 3], got [3]",
       [](v1::ModelRequest* r) {
         r->mutable_positions()->set_dtype(v1::INT32);
         r->mutable_positions()->add_shape(3);
       }},
      {"key_lengths", grpc::StatusCode::INVALID_ARGUMENT, "key_lengths",
       [](v1::ModelRequest* r) {
         r->mutable_mask()->add_key_lengths(1);
         r->mutable_mask()->add_key_lengths(1);
       }},
      {"output dtype", grpc::StatusCode::INVALID_ARGUMENT,
       "output_dtype: INT32 is only for ModelRequest.positions",
       [](v1::ModelRequest* r) { r->set_output_dtype(v1::INT32); }},
  };
  for (const Case& c : cases) {
    v1::ModelRequest request;
    request.set_model("mha_post");
    ToWire(hidden, v1::FLOAT32, request.mutable_hidden());
    c.edit(&request);
    grpc::ClientContext context;
    v1::AttendResponse response;
    const grpc::Status status =
        stub_->AttendModel(&context, request, &response);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
}

TEST_F(ModelE2eTest, MetricsCountRequestsPerModel) {
  const std::string ok_series =
      R"(attnserve_model_requests_total{code="OK",model="mqa_bf16_tensors"})";
  const std::string method_series =
      R"(attnserve_requests_total{code="OK",method="AttendModel"})";
  auto scrape = [&](const std::string& series) {
    return ::attnserve::testing::MetricSample(server(), series);
  };
  const double before = scrape(ok_series);
  const double method_before = scrape(method_series);
  ASSERT_GE(before, 0);
  const int64_t d = Model("mqa_bf16_tensors").config.d_model;
  const TestTensor hidden = TestTensor::Random(DType::kFloat32, {1, 4, d}, 7);
  for (int i = 0; i < 3; ++i) {
    v1::ModelRequest request;
    request.set_model("mqa_bf16_tensors");
    ToWire(hidden, v1::FLOAT32, request.mutable_hidden());
    grpc::ClientContext context;
    v1::AttendResponse response;
    ASSERT_TRUE(stub_->AttendModel(&context, request, &response).ok());
  }
  // Recorded just after each answer is sent.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (scrape(ok_series) < before + 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(scrape(ok_series), before + 3);
  EXPECT_GE(scrape(method_series), method_before + 3);
  EXPECT_GE(
      scrape(
          R"(attnserve_model_compute_duration_seconds_count{model="mqa_bf16_tensors"})"),
      3);
}

TEST(ModelRepositoryStartTest, ABadModelStopsStartUpNamingTheFileAndTensor) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string repo = dir.Path("models");
  ASSERT_TRUE(MakeExampleRepository(repo));
  // A truncated safetensors file in one model.
  const std::string file = repo + "/mha_post/model.safetensors";
  ASSERT_EQ(truncate(file.c_str(), 100), 0);
  auto server = ServerProcess::Start({"--model_repository=" + repo});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("mha_post/model.safetensors"));

  auto skipping =
      ServerProcess::Start({"--model_repository=" + repo, "--skip_bad_models"});
  ASSERT_TRUE(skipping.ok()) << skipping.status();
  EXPECT_THAT((*skipping)->Log(), HasSubstr("model skipped"));
  EXPECT_THAT((*skipping)->Log(), HasSubstr("mha_post"));
  auto stub = v1::AttentionService::NewStub((*skipping)->Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  ASSERT_TRUE(
      stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  for (const v1::ModelInfo& m : info.models()) EXPECT_NE(m.name(), "mha_post");
  // Every example model but the broken one.
  EXPECT_EQ(info.models_size(), 8);
}

TEST(ModelRepositoryStartTest, AMissingRepositoryStopsStartUp) {
  auto server =
      ServerProcess::Start({"--model_repository=/nonexistent/models"});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("--model_repository: "));
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("/nonexistent/models"));
}

TEST(ModelRepositoryStartTest, WithoutARepositoryModelsAreNotFound) {
  auto server = ServerProcess::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::AttentionService::NewStub((*server)->Channel());
  v1::ModelRequest request;
  request.set_model("mha_post");
  grpc::ClientContext context;
  v1::AttendResponse response;
  const grpc::Status status = stub->AttendModel(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("--model_repository"));
}

}  // namespace
}  // namespace attnserve
