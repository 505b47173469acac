// The Open Inference Protocol codec alone (server/kserve/infer_codec.h): what
// ToNative builds, that raw contents are moved rather than copied, and that
// randomly spoiled requests get a status, never a crash, from both the codec
// and the native decoder behind it.

#include "server/kserve/infer_codec.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/request_codec.h"
#include "tests/util/status_matchers.h"

namespace attnserve::server::kserve {
namespace {

using ::attnserve::testing::StatusIs;
using ::inference::ModelInferRequest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void AddRaw(const std::string& name, const std::string& datatype,
            std::vector<int64_t> shape, std::string bytes,
            ModelInferRequest* r) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  for (int64_t d : shape) in->add_shape(d);
  r->add_raw_input_contents(std::move(bytes));
}

ModelInferRequest SmallAttention() {
  ModelInferRequest r;
  r.set_model_name(kAttentionModel);
  r.set_id("id-1");
  for (const char* name : {"query", "key", "value"}) {
    AddRaw(name, "FP32", {1, 2, 3, 4}, std::string(1 * 2 * 3 * 4 * 4, '\0'),
           &r);
  }
  return r;
}

TEST(InferCodecTest, AttentionInterfaceListsTheNativeInputs) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].name, "attention");
  EXPECT_EQ(models[0].hosted, nullptr);
  std::vector<std::string> names;
  for (const TensorSpec& s : models[0].inputs) names.push_back(s.name);
  EXPECT_THAT(names, ElementsAre("query", "key", "value", "mask", "key_lengths",
                                 "alibi_slopes"));
}

TEST(InferCodecTest, RawContentsAreMovedNotCopied) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SmallAttention();
  const char* query_bytes = r.raw_input_contents(0).data();
  NativeCall call;
  ASSERT_TRUE(ToNative(models[0], r, &call).ok());
  EXPECT_EQ(call.attend.query().data().data(), query_bytes);
  EXPECT_TRUE(r.raw_input_contents(0).empty());
  EXPECT_EQ(call.attend.request_id(), "id-1");
  EXPECT_THAT(call.attend.query().shape(), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(call.outputs, ElementsAre(0));
}

TEST(InferCodecTest, ParametersAndSmallInputsReachTheNativeFields) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SmallAttention();
  const std::vector<int32_t> lengths = {2};
  AddRaw("key_lengths", "INT32", {1},
         std::string(reinterpret_cast<const char*>(lengths.data()), 4), &r);
  auto* slopes = r.add_inputs();
  slopes->set_name("alibi_slopes");
  slopes->set_datatype("FP32");
  slopes->add_shape(2);
  r.add_raw_input_contents(std::string(8, '\0'));
  auto& p = *r.mutable_parameters();
  p["causal"].set_bool_param(true);
  p["alignment"].set_string_param("bottom_right");
  p["window_left"].set_int64_param(0);
  p["scale"].set_string_param("0.25");
  p["layout"].set_string_param("BLHD");
  p["output_datatype"].set_string_param("BF16");
  r.add_outputs()->set_name("weights");
  r.add_outputs()->set_name("output");
  NativeCall call;
  ASSERT_TRUE(ToNative(models[0], r, &call).ok());
  const v1::AttendRequest& a = call.attend;
  EXPECT_TRUE(a.mask().causal());
  EXPECT_EQ(a.mask().alignment(), v1::BOTTOM_RIGHT);
  EXPECT_TRUE(a.mask().has_window_left());
  EXPECT_EQ(a.mask().window_left(), 0);
  EXPECT_FALSE(a.mask().has_window_right());
  EXPECT_THAT(a.mask().key_lengths(), ElementsAre(2));
  EXPECT_THAT(a.mask().alibi_slopes(), ElementsAre(0.0f, 0.0f));
  EXPECT_FLOAT_EQ(a.scale(), 0.25f);
  EXPECT_EQ(a.layout(), v1::BLHD);
  EXPECT_EQ(a.output_dtype(), v1::BFLOAT16);
  EXPECT_TRUE(a.return_weights());
  EXPECT_THAT(call.outputs, ElementsAre(1, 0));
}

TEST(InferCodecTest, TypedBoolAndIntContentsBecomeBytes) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r;
  r.set_model_name(kAttentionModel);
  for (const char* name : {"query", "key", "value"}) {
    auto* in = r.add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    for (int64_t d : {1, 1, 2, 1}) in->add_shape(d);
    in->mutable_contents()->add_fp32_contents(1.5f);
    in->mutable_contents()->add_fp32_contents(-2.0f);
  }
  auto* mask = r.add_inputs();
  mask->set_name("mask");
  mask->set_datatype("BOOL");
  mask->add_shape(2);
  mask->mutable_contents()->add_bool_contents(true);
  mask->mutable_contents()->add_bool_contents(false);
  NativeCall call;
  ASSERT_TRUE(ToNative(models[0], r, &call).ok());
  float q[2];
  ASSERT_EQ(call.attend.query().data().size(), sizeof(q));
  std::memcpy(q, call.attend.query().data().data(), sizeof(q));
  EXPECT_EQ(q[0], 1.5f);
  EXPECT_EQ(q[1], -2.0f);
  EXPECT_EQ(call.attend.mask().explicit_mask().dtype(), v1::BOOL);
  EXPECT_EQ(call.attend.mask().explicit_mask().data(), std::string("\1\0", 2));
}

TEST(InferCodecTest, BoolParameterRejectsOtherKinds) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SmallAttention();
  (*r.mutable_parameters())["return_weights"].set_int64_param(1);
  NativeCall call;
  EXPECT_THAT(ToNative(models[0], r, &call),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameters[\"return_weights\"]: expected a "
                                 "bool_param, got int64_param")));
}

// Random spoiling of a valid request: every outcome is a status.
TEST(InferCodecTest, SpoiledRequestsGetAStatusNeverACrash) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
      AttentionEngine::Create(EngineOptions{.num_threads = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const RequestLimits limits;
  std::mt19937_64 rng(1234);
  const std::vector<std::string> datatypes = {"FP32",  "BF16",  "FP16", "BOOL",
                                              "INT32", "INT64", "fp32", ""};
  const std::vector<std::string> names = {
      "query", "key", "value", "mask", "key_lengths", "alibi_slopes", "x"};
  int ok = 0, refused = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    ModelInferRequest r = SmallAttention();
    const int spoils = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < spoils; ++s) {
      const int i = static_cast<int>(rng() % r.inputs_size());
      auto* in = r.mutable_inputs(i);
      switch (rng() % 9) {
        case 0:
          in->set_datatype(datatypes[rng() % datatypes.size()]);
          break;
        case 1:
          in->set_name(names[rng() % names.size()]);
          break;
        case 2:
          if (in->shape_size() > 0) {
            in->set_shape(static_cast<int>(rng() % in->shape_size()),
                          static_cast<int64_t>(rng() % 7) - 2);
          }
          break;
        case 3:
          in->add_shape(static_cast<int64_t>(rng() % 3));
          break;
        case 4:
          if (i < r.raw_input_contents_size()) {
            r.mutable_raw_input_contents(i)->resize(rng() % 200);
          }
          break;
        case 5:
          in->mutable_contents()->add_fp32_contents(1);
          break;
        case 6:
          AddRaw(names[rng() % names.size()],
                 datatypes[rng() % datatypes.size()],
                 {static_cast<int64_t>(rng() % 4)},
                 std::string(rng() % 16, '\1'), &r);
          break;
        case 7:
          (*r.mutable_parameters())[names[rng() % 3]].set_bool_param(true);
          break;
        case 8:
          (*r.mutable_parameters())["window_right"].set_int64_param(
              static_cast<int64_t>(rng() % 5) - 2);
          break;
      }
    }
    NativeCall call;
    const absl::Status built = ToNative(models[0], r, &call);
    if (!built.ok()) {
      EXPECT_EQ(built.code(), absl::StatusCode::kInvalidArgument) << built;
      ++refused;
      continue;
    }
    const absl::StatusOr<DecodedRequest> decoded =
        DecodeRequest(call.attend, **engine, limits);
    if (decoded.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument)
          << decoded.status();
      ++refused;
    }
  }
  // Both outcomes occur, so the spoiling reaches both layers.
  EXPECT_GT(ok, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace attnserve::server::kserve
