// attnctl info, infer --model and bench --model against a real attnserve
// process hosting the example models (examples/make_model_repository, run as
// `make run` runs it): the listing, shapes, masks, weights and positions
// through the server, the client's FLOP count against the server's, and the
// exit codes and messages of what goes wrong.

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "client/tensors/npy.h"
#include "core/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/client/attnctl_runner.h"
#include "tests/util/example_models.h"
#include "tests/util/server_process.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::AwaitMetric;
using ::attnserve::testing::CommandResult;
using ::attnserve::testing::Describe;
using ::attnserve::testing::MetricSample;
using ::attnserve::testing::ParseJson;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr char kHostedModels[] =
    "additive, encoder_512, general_sinusoidal, gqa_rope_pre, linformer_long, "
    "luong_local, mha_post, mqa_bf16_tensors, transformer_xl";
constexpr char kFlops[] = "attnserve_attention_flops_total";

std::string ModelRequests(const std::string& model) {
  return absl::StrCat(R"(attnserve_model_requests_total{code="OK",model=")",
                      model, R"("})");
}

int64_t ErrorCount(const Json& j) {
  int64_t errors = 0;
  for (const auto& [code, count] : j["errors"].items()) {
    errors += count.get<int64_t>();
  }
  return errors;
}

class AttnctlModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repository_ = new TempDir;
    ASSERT_TRUE(repository_->ok());
    const ::attnserve::testing::ScriptRun run =
        ::attnserve::testing::MakeExampleModels(repository_->Path("models"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto server = ServerProcess::Start(
        {"--workers=1", "--threads_per_worker=1",
         "--model_repository=" + repository_->Path("models")});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete repository_;
    repository_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(dir_.ok());
  }

  // `attnctl args... --target=<the server>`.
  static CommandResult Run(std::vector<std::string> args) {
    args.push_back("--target=" + server_->target());
    return RunAttnctl(args);
  }

  // `attnctl bench --model=NAME --warmup=0s args... --output_format=json`.
  static CommandResult Bench(const std::string& model,
                             std::vector<std::string> args) {
    std::vector<std::string> all = {"bench", "--model=" + model, "--warmup=0s",
                                    "--output_format=json"};
    all.insert(all.end(), args.begin(), args.end());
    return Run(all);
  }

  static TempDir* repository_;
  static ServerProcess* server_;
  TempDir dir_;
};

TempDir* AttnctlModelTest::repository_ = nullptr;
ServerProcess* AttnctlModelTest::server_ = nullptr;

TEST_F(AttnctlModelTest, InfoListsEveryModel) {
  const CommandResult r = Run({"info"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nmax_response_bytes: "));
  EXPECT_THAT(r.out, HasSubstr("\nmodels: 9\n"));
  // Sorted by name, with the sizes of docs/models.md's table.
  const char* const kLines[] = {
      "  additive: d_model 32, heads 4/2, head_dim 12\n",
      "  encoder_512: d_model 512, heads 8/8, head_dim 64\n",
      "  general_sinusoidal: d_model 32, heads 4/2, head_dim 8\n",
      "  gqa_rope_pre: d_model 64, heads 8/2, head_dim 8\n",
      "  linformer_long: d_model 64, heads 4/4, head_dim 16\n",
      "  luong_local: d_model 32, heads 2/2, head_dim 16\n",
      "  mha_post: d_model 64, heads 4/4, head_dim 16\n",
      "  mqa_bf16_tensors: d_model 64, heads 4/1, head_dim 16\n",
      "  transformer_xl: d_model 32, heads 4/4, head_dim 8\n"};
  size_t previous = 0;
  for (const char* line : kLines) {
    const size_t at = r.out.find(line);
    ASSERT_NE(at, std::string::npos) << line << " in\n" << r.out;
    EXPECT_GT(at, previous) << line;
    previous = at;
  }
  // The config, every key with defaults filled in, on one line.
  EXPECT_THAT(
      r.out,
      HasSubstr("  gqa_rope_pre: d_model 64, heads 8/2, head_dim 8\n"
                "    config: {\"kind\":\"multi_head_attention\","
                "\"d_model\":64,\"num_heads\":8,\"num_kv_heads\":2,"
                "\"head_dim\":8,\"bias\":false,\"norm\":\"pre\","
                "\"norm_eps\":1e-06,\"positional\":\"rope\","
                "\"rope_theta\":50000.0,\"scoring\":\"scaled_dot\","
                "\"additive_dim\":0,\"dtype\":\"bfloat16\","
                "\"local\":\"none\",\"local_window\":0,"
                "\"local_dim\":0,\"attention\":\"softmax\",\"linformer_k\":0,"
                "\"linformer_max_len\":0,\"feature_map\":\"elu\","
                "\"num_features\":256,\"num_hashes\":4,"
                "\"num_buckets\":64,\"chunk_size\":64,\"seed\":0}\n"));
}

TEST(AttnctlModelInfoTest, AServerWithoutModelsListsNone) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  CommandResult r = RunAttnctl({"info", "--target=" + (*server)->target()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nmodels: 0\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("config:")));

  r = RunAttnctl(
      {"infer", "--model=mha_post", "--target=" + (*server)->target()});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  // The server's NOT_FOUND, saying how to host models.
  EXPECT_THAT(r.err, StartsWith("error: NOT_FOUND: model: \"mha_post\" is not "
                                "hosted here (this server hosts "));
  EXPECT_THAT(r.err, HasSubstr("--model_repository"));
  EXPECT_EQ(r.out, "");
}

TEST_F(AttnctlModelTest, InferSelfAttention) {
  const CommandResult r =
      Run({"infer", "--model=mha_post", "--batch=2", "--lq=5"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("model    mha_post: d_model 64, heads 4/4, "
                                "head_dim 16, scaled_dot, positional none, "
                                "norm post, float32\n"
                                "hidden   f32 [2, 5, 64]\n"
                                "memory   none (self-attention)\n"
                                "position default (0..Lq-1)\n"
                                "mask     none\n"
                                "output   f32 [2, 5, 64]  mean "));
  EXPECT_THAT(r.out, HasSubstr("\ntiming   server queue "));
  EXPECT_THAT(r.out, HasSubstr("; client round trip "));
  EXPECT_THAT(r.out, Not(HasSubstr("weights")));
  EXPECT_EQ(r.err, "");
}

TEST_F(AttnctlModelTest, InferCrossAttentionReturnsWeightsOverTheMemory) {
  const CommandResult r = Run({"infer", "--model=mha_post", "--lq=3",
                               "--memory_len=7", "--return_weights"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nhidden   f32 [1, 3, 64]\n"
                               "memory   f32 [1, 7, 64]\n"));
  EXPECT_THAT(r.out, HasSubstr("\noutput   f32 [1, 3, 64]  mean "));
  // Each row of weights sums to 1: the mean over 7 keys is 1/7.
  EXPECT_THAT(r.out, HasSubstr("\nweights  f32 [1, 4, 3, 7]  mean 0.142857 "));
}

TEST_F(AttnctlModelTest, CausalKeyLengthsAndWeightsOut) {
  const std::string weights = dir_.Path("w.npy");
  const std::string output = dir_.Path("out.npy");
  const CommandResult r =
      Run({"infer", "--model=gqa_rope_pre", "--batch=2", "--lq=4", "--causal",
           "--key_lengths=2,4", "--weights_out=" + weights, "--out=" + output});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nmask     causal top_left; key_lengths "
                               "[2, 4]\n"));
  EXPECT_THAT(r.out, HasSubstr("\nwrote    " + output + "\nwrote    " +
                               weights + "\n"));
  absl::StatusOr<NpyArray> w = ReadNpyFile(weights);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->dtype, NpyDType::kFloat32);
  // [B, Hq, Lq, Lk]: the model's 8 query heads.
  ASSERT_EQ(w->shape, (std::vector<int64_t>{2, 8, 4, 4}));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 8; ++h) {
      for (int64_t i = 0; i < 4; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < 4; ++j) {
          const float value = LoadAsFloat(w->data.data(), DType::kFloat32,
                                          ((b * 8 + h) * 4 + i) * 4 + j);
          const bool allowed = j <= i && j < (b == 0 ? 2 : 4);
          if (!allowed) {
            EXPECT_EQ(value, 0.0f) << b << " " << h << " " << i << " " << j;
          }
          sum += value;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << b << " " << h << " " << i;
      }
    }
  }
  // f32 hidden states of a bfloat16 model: the output is f32 too.
  absl::StatusOr<NpyArray> out = ReadNpyFile(output);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype, NpyDType::kFloat32);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{2, 4, 64}));
}

// The same call as a ModelInfer call of the model: the same random hidden
// states (same seed), so the same output and weights, bit for bit.
TEST_F(AttnctlModelTest, InferOverV2GivesTheNativeResultsBitForBit) {
  std::vector<std::string> results;
  for (const std::string protocol : {"native", "v2"}) {
    const std::string output = dir_.Path(protocol + "_out.npy");
    const std::string weights = dir_.Path(protocol + "_w.npy");
    const CommandResult r =
        Run({"infer", "--model=gqa_rope_pre", "--batch=2", "--lq=5", "--causal",
             "--protocol=" + protocol, "--out=" + output,
             "--weights_out=" + weights});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(absl::StrContains(
                  r.out, "protocol v2 ModelInfer of model \"gqa_rope_pre\""),
              protocol == "v2");
    absl::StatusOr<std::string> out_bytes = base::ReadFile(output);
    absl::StatusOr<std::string> weights_bytes = base::ReadFile(weights);
    ASSERT_TRUE(out_bytes.ok()) << out_bytes.status();
    ASSERT_TRUE(weights_bytes.ok()) << weights_bytes.status();
    results.push_back(*out_bytes + *weights_bytes);
  }
  EXPECT_GT(results[0].size(), 2u * 5 * 64 * 4);
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(AttnctlModelTest, Bf16HiddenStatesAndPositions) {
  // gqa_rope_pre computes in bfloat16 and rotates q and k by position: an
  // explicit 0..Lq-1 is the default, another offset changes the output.
  auto infer = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"infer", "--model=gqa_rope_pre",
                                     "--dtype=bf16", "--lq=4",
                                     "--out=" + dir_.Path(name)};
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  };
  CommandResult r = infer("default.npy", {});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nhidden   bf16 [1, 4, 64]\n"));
  EXPECT_THAT(r.out, HasSubstr("\noutput   bf16 [1, 4, 64]  mean "));
  r = infer("zero.npy", {"--position_offset=0"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nposition 0..3\n"));
  r = infer("ten.npy", {"--position_offset=10"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nposition 10..13\n"));

  absl::StatusOr<NpyArray> by_default =
      ReadNpyFile(dir_.Path("default.npy"), {.u2_as_bfloat16 = true});
  absl::StatusOr<NpyArray> zero =
      ReadNpyFile(dir_.Path("zero.npy"), {.u2_as_bfloat16 = true});
  absl::StatusOr<NpyArray> ten =
      ReadNpyFile(dir_.Path("ten.npy"), {.u2_as_bfloat16 = true});
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(ten.ok()) << ten.status();
  EXPECT_EQ(by_default->dtype, NpyDType::kBFloat16);
  EXPECT_EQ(by_default->shape, (std::vector<int64_t>{1, 4, 64}));
  EXPECT_EQ(zero->data, by_default->data);
  EXPECT_NE(ten->data, by_default->data);
}

TEST_F(AttnctlModelTest, OutputDTypeOfAFloat32Model) {
  const CommandResult r = Run(
      {"infer", "--model=mqa_bf16_tensors", "--lq=3", "--output_dtype=f16"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nhidden   f32 [1, 3, 64]\n"));
  EXPECT_THAT(r.out, HasSubstr("\noutput   f16 [1, 3, 64]  mean "));
}

TEST_F(AttnctlModelTest, AnUnknownModelIsTheServersNotFound) {
  const CommandResult r = Run({"infer", "--model=no_such_model"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_EQ(r.err, absl::StrCat("error: NOT_FOUND: model: \"no_such_model\" "
                                "is not hosted here (this server hosts: ",
                                kHostedModels, ")\n"));
  EXPECT_EQ(r.out, "");
}

TEST_F(AttnctlModelTest, RequestsTheServerRefusesExitWith1) {
  // Two batch elements and one key length: the server's own message.
  const CommandResult r = Run(
      {"infer", "--model=mha_post", "--batch=2", "--lq=4", "--key_lengths=3"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("key_lengths"));
}

TEST_F(AttnctlModelTest, CheckIsNotAvailableWithAModel) {
  const CommandResult r = Run({"infer", "--model=mha_post", "--check"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_EQ(r.err,
            "error: --check is not available with --model: the client does "
            "not have the model's weights to recompute the layer\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(AttnctlModelTest, FlagsThatDoNotApplyAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--heads=2",
       "--heads does not apply with --model: the model's config "
       "gives the heads and their size"},
      {"--kv_heads=1", "--kv_heads does not apply with --model"},
      {"--dim=8", "--dim does not apply with --model"},
      {"--dv=8", "--dv does not apply with --model"},
      {"--lk=9",
       "--lk does not apply with --model: use --memory_len for "
       "cross-attention (Lk = Lq without it)"},
      {"--layout=blhd",
       "--layout does not apply with --model: hidden states "
       "are [B, Lq, d_model]"},
      {"--scale=0.5",
       "--scale does not apply with --model: the model's "
       "scoring sets the scale"},
      {"--q=q.npy",
       "--q does not apply with --model: its inputs are random "
       "hidden states"},
      {"--position_offset=-2",
       "--position_offset must be >= 0, or -1 for none; got -2"},
      {"--memory_len=-1", "--memory_len must be >= 0, got -1"},
  };
  for (const auto& [flag, message] : cases) {
    for (const std::string subcommand : {"infer", "bench"}) {
      const CommandResult r = Run({subcommand, "--model=mha_post", flag});
      EXPECT_EQ(r.exit_code, 2) << subcommand << " " << flag << Describe(r);
      EXPECT_EQ(r.out, "") << subcommand << " " << flag;
      // bench has no input files at all.
      const bool unknown = subcommand == "bench" && flag == "--q=q.npy";
      EXPECT_THAT(r.err, HasSubstr(unknown ? "unknown flag" : message))
          << subcommand << " " << flag << Describe(r);
    }
  }
  // Without --model, the model flags are the ones that do not apply.
  for (const char* flag : {"--memory_len=4", "--position_offset=3"}) {
    const CommandResult r = Run({"infer", flag});
    EXPECT_EQ(r.exit_code, 2) << flag << Describe(r);
    EXPECT_THAT(r.err, HasSubstr("applies to --model calls only"));
  }
  const CommandResult r = Run({"infer", "--model="});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--model is empty"));
}

// The same load as ModelStreamInfer messages of the hosted model: each
// message is a call of the model (the server's per-model count agrees), none
// an error.
TEST_F(AttnctlModelTest, BenchOverAV2StreamCallsTheModel) {
  const std::string series = ModelRequests("mha_post");
  const double before = MetricSample(*server_, series);
  const CommandResult r =
      Bench("mha_post", {"--protocol=v2", "--stream", "--lq=8",
                         "--concurrency=2", "--duration=500ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  EXPECT_EQ(j["method"], "ModelStreamInfer");
  EXPECT_EQ(j["model"], "mha_post");
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 0);
  EXPECT_GT(j["server_us"]["compute_p50"].get<double>(), 0);
  EXPECT_EQ(AwaitMetric(*server_, series, before + ok), before + ok);
}

TEST_F(AttnctlModelTest, BenchCountsAgreeWithTheServersModelMetrics) {
  const std::string series = ModelRequests("mha_post");
  const double before = MetricSample(*server_, series);
  const double flops_before = MetricSample(*server_, kFlops);
  const CommandResult r =
      Bench("mha_post", {"--lq=8", "--concurrency=2", "--duration=1s"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  EXPECT_EQ(j["method"], "AttendModel");
  EXPECT_EQ(j["model"], "mha_post");
  EXPECT_EQ(j["request"]["description"],
            "mha_post f32 hidden [1, 8, 64]; "
            "mask none");
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 10);
  EXPECT_EQ(j["requests"].get<int64_t>(), ok + ErrorCount(j));
  EXPECT_GT(j["gflops"].get<double>(), 0);
  EXPECT_EQ(AwaitMetric(*server_, series, before + ok), before + ok);
  // The client's FLOPs per request are the server's.
  const double flops = j["request"]["flops"].get<double>();
  EXPECT_EQ(flops, 2.0 * 8 * 64 * 64 * 4 + 4.0 * 4 * 8 * 8 * 16);
  EXPECT_NEAR(MetricSample(*server_, kFlops) - flops_before, ok * flops,
              1e-9 * ok * flops);
}

TEST_F(AttnctlModelTest, BenchOverAModelStream) {
  const std::string series = ModelRequests("gqa_rope_pre");
  const double before = MetricSample(*server_, series);
  const CommandResult r =
      Bench("gqa_rope_pre", {"--stream", "--lq=4", "--memory_len=6", "--causal",
                             "--concurrency=2", "--duration=500ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json j = ParseJson(r);
  EXPECT_EQ(j["method"], "AttendModelStream");
  EXPECT_EQ(j["request"]["description"],
            "gqa_rope_pre f32 hidden [1, 4, 64] memory [1, 6, 64]; mask "
            "causal top_left");
  EXPECT_TRUE(j["errors"].empty()) << j.dump(2);
  const int64_t ok = j["ok"].get<int64_t>();
  EXPECT_GT(ok, 0);
  EXPECT_EQ(j["requests"].get<int64_t>(), ok + ErrorCount(j));
  EXPECT_EQ(AwaitMetric(*server_, series, before + ok), before + ok);
}

TEST_F(AttnctlModelTest, BenchFlopsOfGeneralAndAdditiveScoring) {
  // "general": the extra q·W product is counted, as the server counts it.
  double flops_before = MetricSample(*server_, kFlops);
  CommandResult r = Bench("general_sinusoidal",
                          {"--lq=6", "--memory_len=5", "--duration=300ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  Json j = ParseJson(r);
  int64_t ok = j["ok"].get<int64_t>();
  double flops = j["request"]["flops"].get<double>();
  ASSERT_GT(ok, 0);
  AwaitMetric(*server_, ModelRequests("general_sinusoidal"), ok);
  EXPECT_NEAR(MetricSample(*server_, kFlops) - flops_before, ok * flops,
              1e-9 * ok * flops);

  // "additive" with A from the tensors: the server reports the A it loaded
  // (config_json's additive_dim), so the client counts as the server does.
  flops_before = MetricSample(*server_, kFlops);
  r = Bench("additive", {"--lq=6", "--duration=300ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = ParseJson(r);
  ok = j["ok"].get<int64_t>();
  flops = j["request"]["flops"].get<double>();
  ASSERT_GT(ok, 0);
  AwaitMetric(*server_, ModelRequests("additive"), ok);
  EXPECT_NEAR(MetricSample(*server_, kFlops) - flops_before, ok * flops,
              1e-9 * ok * flops);
}

TEST_F(AttnctlModelTest, BenchTableNamesTheMethodAndModel) {
  const CommandResult r = Run({"bench", "--model=mha_post", "--lq=4",
                               "--warmup=0s", "--duration=300ms"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("load        closed loop, concurrency 1, "
                                "unary AttendModel, 0.3 s measured"));
  EXPECT_THAT(r.out, HasSubstr("\nrequest     mha_post f32 hidden [1, 4, "
                               "64]; mask none; "));
}

TEST_F(AttnctlModelTest, BenchOfAnUnknownModelFailsBeforeTheLoad) {
  const CommandResult r = Bench("no_such_model", {"--duration=300ms"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_EQ(r.err, absl::StrCat("error: ", server_->target(),
                                ": NOT_FOUND: model: \"no_such_model\" is not "
                                "hosted here (this server hosts: ",
                                kHostedModels, ")\n"));
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace attnserve::client
