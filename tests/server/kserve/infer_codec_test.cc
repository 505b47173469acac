// The Open Inference Protocol codec alone (server/kserve/infer_codec.h): what
// ToNative builds, that raw contents are moved rather than copied, and that
// randomly spoiled requests get a status, never a crash, from both the codec
// and the native decoder behind it.

#include "server/kserve/infer_codec.h"

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/request_codec.h"
#include "server/shm/shared_memory_registry.h"
#include "tests/util/shm_object.h"
#include "tests/util/status_matchers.h"

namespace attnserve::server::kserve {
namespace {

using ::attnserve::testing::ShmObject;
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
  r.set_model_name("attention");
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
                                 "alibi_slopes", "sinks"));
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
  p["sink_tokens"].set_int64_param(4);
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
  EXPECT_EQ(a.mask().sink_tokens(), 4);
  EXPECT_THAT(a.mask().key_lengths(), ElementsAre(2));
  EXPECT_THAT(a.mask().alibi_slopes(), ElementsAre(0.0f, 0.0f));
  EXPECT_FLOAT_EQ(a.scale(), 0.25f);
  EXPECT_EQ(a.layout(), v1::BLHD);
  EXPECT_EQ(a.output_dtype(), v1::BFLOAT16);
  EXPECT_TRUE(a.return_weights());
  EXPECT_THAT(call.outputs, ElementsAre(1, 0));
}

TEST(InferCodecTest, WeightStatsByParameterOrByName) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SmallAttention();
  (*r.mutable_parameters())["return_weight_stats"].set_bool_param(true);
  NativeCall call;
  ASSERT_TRUE(ToNative(models[0], r, &call).ok());
  EXPECT_TRUE(call.attend.return_weight_stats());
  EXPECT_FALSE(call.attend.return_weights());
  EXPECT_THAT(call.outputs, ElementsAre(0, 2, 3));

  ModelInferRequest named = SmallAttention();
  named.add_outputs()->set_name("entropy");
  ASSERT_TRUE(ToNative(models[0], named, &call).ok());
  EXPECT_TRUE(call.attend.return_weight_stats());
  EXPECT_THAT(call.outputs, ElementsAre(2));
  v1::AttendResponse native;
  native.mutable_entropy()->set_dtype(v1::FLOAT32);
  native.mutable_entropy()->add_shape(1);
  native.mutable_entropy()->set_data("ent!");
  inference::ModelInferResponse response;
  ToInferResponse(call, named, native, &response);
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "entropy");
  EXPECT_EQ(response.raw_output_contents(0), "ent!");

  // Statistics are the attention model's: in shared memory, or of a hosted
  // model, they are refused by name.
  ModelInferRequest placed = SmallAttention();
  auto* out = placed.add_outputs();
  out->set_name("max_weight");
  (*out->mutable_parameters())["shared_memory_region"].set_string_param("r");
  (*out->mutable_parameters())["shared_memory_byte_size"].set_int64_param(4);
  EXPECT_THAT(ToNative(models[0], placed, &call),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs[0] (max_weight).parameters: "
                                 "shared_memory_region is set, but only")));
}

TEST(InferCodecTest, TypedBoolAndIntContentsBecomeBytes) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r;
  r.set_model_name("attention");
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

// Bytes of one {1, 2, 3, 4} f32 tensor of SmallAttention.
constexpr int64_t kSmallBytes = 1 * 2 * 3 * 4 * 4;

// Triton's parameters on `tensor` (an input or a requested output).
template <typename Tensor>
void SetRegion(Tensor* tensor, const std::string& region, int64_t offset,
               int64_t byte_size) {
  auto& p = *tensor->mutable_parameters();
  p["shared_memory_region"].set_string_param(region);
  p["shared_memory_offset"].set_int64_param(offset);
  p["shared_memory_byte_size"].set_int64_param(byte_size);
}

// SmallAttention with query and key in region "r" (so one raw entry, the
// value's) and the output requested into it.
ModelInferRequest SharedAttention() {
  ModelInferRequest r = SmallAttention();
  SetRegion(r.mutable_inputs(0), "r", 0, kSmallBytes);
  // No offset parameter, as tritonclient sends none for offset 0. Inputs
  // may overlap: they are only read.
  auto& key = *r.mutable_inputs(1)->mutable_parameters();
  key["shared_memory_region"].set_string_param("r");
  key["shared_memory_byte_size"].set_int64_param(kSmallBytes);
  r.mutable_raw_input_contents()->DeleteSubrange(0, 2);
  auto* out = r.add_outputs();
  out->set_name("output");
  SetRegion(out, "r", 3 * kSmallBytes, kSmallBytes);
  return r;
}

TEST(InferCodecTest, SharedMemoryParametersBecomeTheNativeReferences) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SharedAttention();
  auto* weights = r.add_outputs();
  weights->set_name("weights");
  SetRegion(weights, "r", 4 * kSmallBytes, 1 * 2 * 3 * 3 * 4);
  const char* value_bytes = r.raw_input_contents(0).data();
  NativeCall call;
  const absl::Status built = ToNative(models[0], r, &call);
  ASSERT_TRUE(built.ok()) << built;
  const v1::AttendRequest& a = call.attend;
  EXPECT_TRUE(a.query().data().empty());
  EXPECT_EQ(a.query().dtype(), v1::FLOAT32);
  EXPECT_THAT(a.query().shape(), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(a.query().shared_memory().region(), "r");
  EXPECT_EQ(a.query().shared_memory().offset(), 0);
  EXPECT_EQ(a.query().shared_memory().byte_size(), kSmallBytes);
  // No offset parameter: 0, as Triton's clients leave it out then.
  EXPECT_EQ(a.key().shared_memory().offset(), 0);
  EXPECT_EQ(a.key().shared_memory().byte_size(), kSmallBytes);
  // The one raw entry is the value's (none for inputs in shared memory).
  EXPECT_FALSE(a.value().has_shared_memory());
  EXPECT_EQ(a.value().data().data(), value_bytes);
  EXPECT_EQ(a.output_shared_memory().offset(), 3 * kSmallBytes);
  EXPECT_EQ(a.weights_shared_memory().offset(), 4 * kSmallBytes);
  EXPECT_TRUE(a.return_weights());
  EXPECT_THAT(call.outputs, ElementsAre(0, 1));
}

TEST(InferCodecTest, AnOutputInARegionIsAnsweredWithItsParameters) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  ModelInferRequest r = SharedAttention();
  r.add_outputs()->set_name("weights");
  NativeCall call;
  ASSERT_TRUE(ToNative(models[0], r, &call).ok());
  v1::AttendResponse native;
  native.mutable_output()->set_dtype(v1::FLOAT32);
  native.mutable_output()->add_shape(1);
  *native.mutable_output()->mutable_shared_memory() =
      call.attend.output_shared_memory();
  native.mutable_weights()->set_dtype(v1::FLOAT32);
  native.mutable_weights()->set_data("weights!");
  inference::ModelInferResponse response;
  ToInferResponse(call, r, native, &response);
  ASSERT_EQ(response.outputs_size(), 2);
  const auto& p = response.outputs(0).parameters();
  EXPECT_EQ(p.at("shared_memory_region").string_param(), "r");
  EXPECT_EQ(p.at("shared_memory_offset").int64_param(), 3 * kSmallBytes);
  EXPECT_EQ(p.at("shared_memory_byte_size").int64_param(), kSmallBytes);
  EXPECT_TRUE(response.outputs(1).parameters().empty());
  // Entries stay one per output: empty for the one in the region.
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_TRUE(response.raw_output_contents(0).empty());
  EXPECT_EQ(response.raw_output_contents(1), "weights!");
}

TEST(InferCodecTest, RefusesEveryMalformedSharedMemoryParameter) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  using Spoil = std::function<void(ModelInferRequest*)>;
  auto input = [](ModelInferRequest* r, int i, const char* key) {
    return &(*r->mutable_inputs(i)->mutable_parameters())[key];
  };
  auto output = [](ModelInferRequest* r, const char* key) {
    return &(*r->mutable_outputs(0)->mutable_parameters())[key];
  };
  const struct {
    const char* what;
    Spoil spoil;
    const char* message;
  } cases[] = {
      {"region of the wrong kind",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_region")->set_int64_param(1);
       },
       "inputs[0] (query).parameters[\"shared_memory_region\"]: expected a "
       "string_param, got int64_param"},
      {"empty region",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_region")->set_string_param("");
       },
       "inputs[0] (query).parameters[\"shared_memory_region\"]: empty"},
      {"offset of the wrong kind",
       [&](ModelInferRequest* r) {
         input(r, 1, "shared_memory_offset")->set_string_param("0");
       },
       "inputs[1] (key).parameters[\"shared_memory_offset\"]: expected an "
       "int64_param, got string_param"},
      {"negative offset",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_offset")->set_int64_param(-8);
       },
       "inputs[0] (query).parameters[\"shared_memory_offset\"]: -8 must not "
       "be negative"},
      {"byte size of the wrong kind",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_byte_size")->set_uint64_param(96);
       },
       "inputs[0] (query).parameters[\"shared_memory_byte_size\"]: expected "
       "an int64_param, got uint64_param"},
      {"negative byte size",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_byte_size")->set_int64_param(-1);
       },
       "inputs[0] (query).parameters[\"shared_memory_byte_size\"]: -1 must "
       "not be negative"},
      {"region missing",
       [&](ModelInferRequest* r) {
         input(r, 2, "shared_memory_byte_size")->set_int64_param(kSmallBytes);
       },
       "inputs[2] (value).parameters: shared_memory_byte_size is set without "
       "shared_memory_region"},
      {"byte size missing",
       [&](ModelInferRequest* r) {
         r->mutable_inputs(0)->mutable_parameters()->erase(
             "shared_memory_byte_size");
       },
       "inputs[0] (query).parameters: shared_memory_region is set without "
       "shared_memory_byte_size"},
      {"unknown input parameter",
       [&](ModelInferRequest* r) {
         input(r, 0, "shared_memory_key")->set_string_param("x");
       },
       "inputs[0] (query).parameters: unknown parameter \"shared_memory_key\" "
       "(expected shared_memory_region, shared_memory_offset, "
       "shared_memory_byte_size)"},
      {"contents and a region",
       [&](ModelInferRequest* r) {
         r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       "inputs[0] (query).contents: set together with "
       "parameters[\"shared_memory_region\"]"},
      {"raw bytes and a region",
       [&](ModelInferRequest* r) { r->add_raw_input_contents("q"); },
       "raw_input_contents: 2 entries for 1 inputs not in shared memory"},
      {"mask in a region",
       [&](ModelInferRequest* r) {
         auto* mask = r->add_inputs();
         mask->set_name("mask");
         mask->set_datatype("BOOL");
         mask->add_shape(1);
         SetRegion(mask, "r", 0, 1);
       },
       "inputs[3] (mask).parameters: shared_memory_region is set, but only "
       "the inputs query, key and value and the outputs output and weights "
       "of model attention may be in shared memory; send mask's data"},
      {"key_lengths in a region",
       [&](ModelInferRequest* r) {
         auto* lengths = r->add_inputs();
         lengths->set_name("key_lengths");
         lengths->set_datatype("INT32");
         lengths->add_shape(1);
         SetRegion(lengths, "r", 0, 4);
       },
       "inputs[3] (key_lengths).parameters: shared_memory_region is set, but "
       "only"},
      {"output region of the wrong kind",
       [&](ModelInferRequest* r) {
         output(r, "shared_memory_region")->set_bool_param(true);
       },
       "outputs[0] (output).parameters[\"shared_memory_region\"]: expected a "
       "string_param, got bool_param"},
      {"negative output offset",
       [&](ModelInferRequest* r) {
         output(r, "shared_memory_offset")->set_int64_param(-4);
       },
       "outputs[0] (output).parameters[\"shared_memory_offset\"]: -4 must "
       "not be negative"},
      {"output without a byte size",
       [&](ModelInferRequest* r) {
         r->mutable_outputs(0)->mutable_parameters()->erase(
             "shared_memory_byte_size");
       },
       "outputs[0] (output).parameters: shared_memory_region is set without "
       "shared_memory_byte_size"},
      {"unknown output parameter",
       [&](ModelInferRequest* r) {
         output(r, "classification")->set_int64_param(3);
       },
       "outputs[0] (output).parameters: unknown parameter \"classification\""},
  };
  for (const auto& c : cases) {
    ModelInferRequest r = SharedAttention();
    c.spoil(&r);
    NativeCall call;
    EXPECT_THAT(
        ToNative(models[0], r, &call),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.what;
  }
}

// What ToNative leaves to the native checks (SharedMemoryUse behind
// DecodeRequest), with a real region: sizes against the tensor's, bounds,
// alignment, a region not registered.
TEST(InferCodecTest, TheNativeChecksResolveTheReferences) {
  const std::vector<ModelInterface> models = ModelInterfaces(nullptr);
  absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
      AttentionEngine::Create(EngineOptions{.num_threads = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ShmObject object(4096);
  SharedMemoryOptions options;
  options.enabled = true;
  auto registry = SharedMemoryRegistry::Create(options);
  ASSERT_TRUE(registry.ok());
  ASSERT_TRUE((*registry)->Register("r", object.key(), 4096).ok());
  const RequestLimits limits;
  auto decode = [&](ModelInferRequest r) -> absl::Status {
    NativeCall call;
    absl::Status built = ToNative(models[0], r, &call);
    if (!built.ok()) return built;
    return DecodeRequest(call.attend, **engine, limits, registry->get())
        .status();
  };
  EXPECT_TRUE(decode(SharedAttention()).ok());
  const struct {
    const char* what;
    std::function<void(ModelInferRequest*)> spoil;
    absl::StatusCode code;
    const char* message;
  } cases[] = {
      {"input byte size not the tensor's",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_inputs(0), "r", 0, kSmallBytes - 4);
       },
       absl::StatusCode::kInvalidArgument,
       "query: 92 bytes do not match shape [1, 2, 3, 4] of f32"},
      {"output byte size not the output's",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_outputs(0), "r", 3 * kSmallBytes, 64);
       },
       absl::StatusCode::kInvalidArgument,
       "output_shared_memory.byte_size: 64 differs from the 96 bytes of the "
       "output"},
      {"past the region's end",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_inputs(0), "r", 4032, kSmallBytes);
       },
       absl::StatusCode::kInvalidArgument, "lie past the end of region \"r\""},
      {"misaligned",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_inputs(0), "r", 2, kSmallBytes);
       },
       absl::StatusCode::kInvalidArgument,
       "query.shared_memory.offset: 2 is not a multiple of the element size"},
      {"output over an input",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_outputs(0), "r", 0, kSmallBytes);
       },
       absl::StatusCode::kInvalidArgument, "overlap those of query"},
      {"region not registered",
       [](ModelInferRequest* r) {
         SetRegion(r->mutable_inputs(1), "gone", 0, kSmallBytes);
       },
       absl::StatusCode::kNotFound,
       "key.shared_memory.region: no shared memory region \"gone\""},
  };
  for (const auto& c : cases) {
    ModelInferRequest r = SharedAttention();
    c.spoil(&r);
    EXPECT_THAT(decode(r), StatusIs(c.code, HasSubstr(c.message))) << c.what;
  }
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
