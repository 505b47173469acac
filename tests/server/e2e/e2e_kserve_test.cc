// The Open Inference Protocol (inference.GRPCInferenceService) against a real
// attnserve process, through a client generated from the protocol's proto:
// every RPC, ModelInfer against the native Attend and AttendModel of the same
// server (byte for byte: one code path below the codec), each malformed input
// with its code and the input it names, readiness while draining, the token.

#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/example_models.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::ServerTest;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::inference::GRPCInferenceService;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kPatience = absl::Seconds(60);

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

void Prepare(grpc::ClientContext* context, const std::string& token = "") {
  context->set_deadline(absl::ToChronoTime(absl::Now() + kPatience));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

// The protocol's datatype names, written out here rather than taken from the
// server's table.
std::string V2Name(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return "FP32";
    case v1::BFLOAT16:
      return "BF16";
    case v1::FLOAT16:
      return "FP16";
    case v1::BOOL:
      return "BOOL";
    case v1::INT32:
      return "INT32";
    default:
      return "?";
  }
}

// Appends one input; `typed` puts FP32, BOOL and INT32 data in contents.
void AddInput(const std::string& name, v1::DataType dtype,
              const std::vector<int64_t>& shape, const std::string& bytes,
              bool typed, ModelInferRequest* r) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(V2Name(dtype));
  for (int64_t d : shape) in->add_shape(d);
  if (!typed) {
    r->add_raw_input_contents(bytes);
    return;
  }
  auto* c = in->mutable_contents();
  if (dtype == v1::FLOAT32) {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    for (float x : v) c->add_fp32_contents(x);
  } else if (dtype == v1::INT32) {
    std::vector<int32_t> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    for (int32_t x : v) c->add_int_contents(x);
  } else {
    for (char b : bytes) c->add_bool_contents(b != 0);
  }
}

void AddTensor(const std::string& name, const v1::Tensor& t, bool typed,
               ModelInferRequest* r) {
  AddInput(name, t.dtype(), {t.shape().begin(), t.shape().end()}, t.data(),
           typed, r);
}

template <typename T>
std::string Bytes(const google::protobuf::RepeatedField<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

void AddMask(const v1::Mask& m, bool typed, ModelInferRequest* r) {
  auto& p = *r->mutable_parameters();
  p["causal"].set_bool_param(m.causal());
  p["alignment"].set_string_param(v1::Alignment_Name(m.alignment()));
  if (m.has_window_left()) p["window_left"].set_int64_param(m.window_left());
  if (m.has_window_right()) {
    p["window_right"].set_int64_param(m.window_right());
  }
  if (m.has_explicit_mask()) AddTensor("mask", m.explicit_mask(), typed, r);
  if (m.key_lengths_size() > 0) {
    AddInput("key_lengths", v1::INT32, {m.key_lengths_size()},
             Bytes(m.key_lengths()), typed, r);
  }
  if (m.alibi_slopes_size() > 0) {
    AddInput("alibi_slopes", v1::FLOAT32, {m.alibi_slopes_size()},
             Bytes(m.alibi_slopes()), typed, r);
  }
}

// The ModelInfer request of model "attention" that means `a`, as the mapping
// in docs/api.md gives it.
ModelInferRequest ToV2(const v1::AttendRequest& a, bool typed) {
  ModelInferRequest r;
  r.set_model_name("attention");
  r.set_id(a.request_id());
  AddTensor("query", a.query(), typed, &r);
  AddTensor("key", a.key(), typed, &r);
  AddTensor("value", a.value(), typed, &r);
  AddMask(a.mask(), typed, &r);
  auto& p = *r.mutable_parameters();
  p["layout"].set_string_param(a.layout() == v1::BLHD ? "BLHD" : "BHLD");
  if (a.has_scale()) p["scale"].set_double_param(a.scale());
  if (a.has_softcap()) p["softcap"].set_double_param(a.softcap());
  if (a.sinks_size() > 0) {
    AddInput("sinks", v1::FLOAT32, {a.sinks_size()}, Bytes(a.sinks()), typed,
             &r);
  }
  p["return_weights"].set_bool_param(a.return_weights());
  if (a.output_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    p["output_datatype"].set_string_param(V2Name(a.output_dtype()));
  }
  return r;
}

// One ModelInfer output against the native tensor: name, datatype, shape and
// bytes.
void ExpectSame(const ModelInferResponse& got, int index,
                const std::string& name, const v1::Tensor& native) {
  ASSERT_GT(got.outputs_size(), index);
  ASSERT_EQ(got.raw_output_contents_size(), got.outputs_size());
  const auto& out = got.outputs(index);
  EXPECT_EQ(out.name(), name);
  EXPECT_EQ(out.datatype(), V2Name(native.dtype()));
  EXPECT_EQ(std::vector<int64_t>(out.shape().begin(), out.shape().end()),
            std::vector<int64_t>(native.shape().begin(), native.shape().end()));
  EXPECT_EQ(got.raw_output_contents(index).size(), native.data().size());
  EXPECT_TRUE(got.raw_output_contents(index) == native.data())
      << name << " differs from the native answer";
}

class KserveE2eTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    ASSERT_TRUE(dir_->ok());
    const std::string repo = dir_->Path("models");
    const ::attnserve::testing::ScriptRun run =
        ::attnserve::testing::MakeExampleModels(repo);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    StartSuiteServer({"--workers=2", "--threads_per_worker=1",
                      absl::StrCat("--model_repository=", repo)});
  }
  static void TearDownTestSuite() {
    StopSuiteServer();
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ServerTest::SetUp());
    // Both stubs on one channel.
    const std::shared_ptr<grpc::Channel> shared = channel();
    v2_ = GRPCInferenceService::NewStub(shared);
    native_ = v1::AttentionService::NewStub(shared);
  }

  absl::Status Infer(const ModelInferRequest& request,
                     ModelInferResponse* response) {
    grpc::ClientContext context;
    Prepare(&context);
    return ToAbsl(v2_->ModelInfer(&context, request, response));
  }

  // ModelInfer of `request`'s equivalent, raw and (for FP32) typed, equals
  // the native Attend answer.
  void ExpectMatchesAttend(const v1::AttendRequest& request) {
    v1::AttendResponse native;
    {
      grpc::ClientContext context;
      Prepare(&context);
      ASSERT_THAT(ToAbsl(native_->Attend(&context, request, &native)),
                  StatusIs(absl::StatusCode::kOk, ::testing::_));
    }
    for (bool typed : {false, true}) {
      if (typed && request.query().dtype() != v1::FLOAT32) continue;
      SCOPED_TRACE(typed ? "typed contents" : "raw contents");
      ModelInferResponse got;
      ASSERT_THAT(Infer(ToV2(request, typed), &got),
                  StatusIs(absl::StatusCode::kOk, ::testing::_));
      EXPECT_EQ(got.model_name(), "attention");
      EXPECT_EQ(got.model_version(), "1");
      EXPECT_EQ(got.id(), request.request_id());
      ASSERT_EQ(got.outputs_size(), request.return_weights() ? 2 : 1);
      ExpectSame(got, 0, "output", native.output());
      if (request.return_weights()) {
        ExpectSame(got, 1, "weights", native.weights());
      }
      EXPECT_EQ(got.parameters().at("timing.flops").int64_param(),
                static_cast<int64_t>(native.timing().flops()));
    }
  }

  static TempDir* dir_;
  std::unique_ptr<GRPCInferenceService::Stub> v2_;
  std::unique_ptr<v1::AttentionService::Stub> native_;
};

TempDir* KserveE2eTest::dir_ = nullptr;

struct Case {
  int64_t b = 1, hq = 2, hkv = 1, lq = 5, lk = 7, d = 8, dv = 8;
  DType dtype = DType::kFloat32;
  v1::Layout layout = v1::BHLD;
  bool causal = false;
  v1::Alignment alignment = v1::TOP_LEFT;
  std::optional<int32_t> window_left, window_right;
  bool key_lengths = false, alibi = false, weights = false;
  // 0 none, 1 BOOL [Lq, Lk], 2 FP32 [B, 1, 1, Lk]
  int mask = 0;
  std::optional<float> scale, softcap;
  bool sinks = false;
  v1::DataType output = v1::DATA_TYPE_UNSPECIFIED;

  v1::AttendRequest Build(uint64_t seed) const {
    auto dims = [&](int64_t h, int64_t l, int64_t x) {
      return layout == v1::BLHD ? std::vector<int64_t>{b, l, h, x}
                                : std::vector<int64_t>{b, h, l, x};
    };
    v1::AttendRequest r;
    r.set_request_id(absl::StrCat("case-", seed));
    ToWire(TestTensor::Random(dtype, dims(hq, lq, d), seed), r.mutable_query());
    ToWire(TestTensor::Random(dtype, dims(hkv, lk, d), seed + 1),
           r.mutable_key());
    ToWire(TestTensor::Random(dtype, dims(hkv, lk, dv), seed + 2),
           r.mutable_value());
    r.set_layout(layout);
    r.set_return_weights(weights);
    if (scale) r.set_scale(*scale);
    r.set_output_dtype(output);
    v1::Mask* m = r.mutable_mask();
    m->set_causal(causal);
    m->set_alignment(alignment);
    if (window_left) m->set_window_left(*window_left);
    if (window_right) m->set_window_right(*window_right);
    if (key_lengths) {
      for (int64_t i = 0; i < b; ++i)
        m->add_key_lengths((i * 3 + 2) % (lk + 1));
    }
    if (alibi) {
      for (int64_t h = 0; h < hq; ++h) m->add_alibi_slopes(0.5f / (h + 1));
    }
    if (softcap) r.set_softcap(*softcap);
    if (sinks) {
      for (int64_t h = 0; h < hq; ++h) r.add_sinks(0.25f * h - 0.5f);
    }
    if (mask == 1) {
      TestTensor t(DType::kBool, {lq, lk});
      for (int64_t i = 0; i < t.size(); ++i) t.Set(i, (i * 7) % 5 != 0);
      ToWire(t, m->mutable_explicit_mask());
    } else if (mask == 2) {
      TestTensor t(DType::kFloat32, {b, 1, 1, lk});
      for (int64_t i = 0; i < t.size(); ++i) {
        t.Set(i, i % 4 == 3 ? -INFINITY : 0.1f * static_cast<float>(i % 3));
      }
      ToWire(t, m->mutable_explicit_mask());
    }
    return r;
  }
};

TEST_F(KserveE2eTest, ModelInferEqualsAttendOverShapesDtypesAndMasks) {
  std::vector<Case> cases;
  cases.push_back(Case{});
  {
    Case c;
    c.b = 2, c.hq = 4, c.hkv = 2, c.lq = 3, c.lk = 9, c.d = 16, c.dv = 8;
    c.dtype = DType::kBFloat16;
    c.causal = true, c.alignment = v1::BOTTOM_RIGHT, c.key_lengths = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.dtype = DType::kFloat16, c.layout = v1::BLHD;
    c.window_left = 2, c.window_right = 1, c.alibi = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.mask = 1, c.weights = true, c.scale = 0.3f, c.output = v1::BFLOAT16;
    cases.push_back(c);
  }
  {
    Case c;
    c.b = 2, c.mask = 2, c.weights = true, c.key_lengths = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.hq = 4, c.hkv = 2, c.causal = true, c.weights = true;
    c.softcap = 0.5f, c.sinks = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.hq = 8, c.hkv = 8, c.lq = 128, c.lk = 128, c.d = 64, c.dv = 64;
    c.causal = true;
    cases.push_back(c);
  }
  {
    Case c;
    c.hq = 4, c.lq = 1, c.lk = 33, c.d = 32, c.dv = 32;
    c.causal = true, c.alignment = v1::BOTTOM_RIGHT, c.output = v1::FLOAT16;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    ExpectMatchesAttend(cases[i].Build(100 + 10 * i));
  }
}

// ModelStreamInfer answers in order; a bad message gets its error_message and
// the stream goes on.
TEST_F(KserveE2eTest, StreamAnswersInOrderAndGoesOnAfterAnError) {
  const v1::AttendRequest first = Case{}.Build(31);
  Case big;
  big.hq = 8, big.hkv = 8, big.lq = 64, big.lk = 64, big.d = 64, big.dv = 64;
  const v1::AttendRequest third = big.Build(33);
  std::vector<v1::AttendResponse> native(2);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    Prepare(&context);
    ASSERT_TRUE(
        native_->Attend(&context, i == 0 ? first : third, &native[i]).ok());
  }
  ModelInferRequest bad = ToV2(Case{}.Build(32), false);
  bad.mutable_inputs(0)->set_datatype("FLOAT32");
  grpc::ClientContext context;
  Prepare(&context);
  auto stream = v2_->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(ToV2(first, false)));
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(ToV2(third, true)));
  ASSERT_TRUE(stream->WritesDone());
  inference::ModelStreamInferResponse answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");
  EXPECT_EQ(answer.infer_response().id(), first.request_id());
  ExpectSame(answer.infer_response(), 0, "output", native[0].output());
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_THAT(answer.error_message(),
              AllOf(HasSubstr("INVALID_ARGUMENT"),
                    HasSubstr("inputs[0] (query).datatype")));
  EXPECT_EQ(answer.infer_response().id(), "case-32");
  EXPECT_EQ(answer.infer_response().outputs_size(), 0);
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");
  EXPECT_EQ(answer.infer_response().id(), third.request_id());
  ExpectSame(answer.infer_response(), 0, "output", native[1].output());
  EXPECT_FALSE(stream->Read(&answer));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_GE(
      ::attnserve::testing::AwaitMetric(
          server(),
          R"(attnserve_requests_total{code="OK",method="ModelStreamInfer"})",
          2),
      2);
}

TEST_F(KserveE2eTest, RequestedOutputsChooseWhatIsReturned) {
  Case c;
  const v1::AttendRequest native_request = c.Build(7);
  ModelInferRequest r = ToV2(native_request, false);
  r.add_outputs()->set_name("weights");
  ModelInferResponse got;
  ASSERT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kOk, ::testing::_));
  ASSERT_EQ(got.outputs_size(), 1);
  EXPECT_EQ(got.outputs(0).name(), "weights");
  EXPECT_THAT(got.outputs(0).shape(), ElementsAre(1, 2, 5, 7));
  EXPECT_EQ(got.raw_output_contents(0).size(), 1u * 2 * 5 * 7 * 4);
}

TEST_F(KserveE2eTest, WeightStatsAreTheOutputsEntropyAndMaxWeight) {
  Case c;
  c.causal = true;
  v1::AttendRequest native_request = c.Build(11);
  native_request.set_return_weight_stats(true);
  v1::AttendResponse native;
  {
    grpc::ClientContext context;
    Prepare(&context);
    ASSERT_TRUE(native_->Attend(&context, native_request, &native).ok());
  }
  ASSERT_TRUE(native.has_entropy());
  ModelInferRequest r = ToV2(native_request, false);
  (*r.mutable_parameters())["return_weight_stats"].set_bool_param(true);
  ModelInferResponse got;
  ASSERT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kOk, ::testing::_));
  ASSERT_EQ(got.outputs_size(), 3);
  ExpectSame(got, 0, "output", native.output());
  ExpectSame(got, 1, "entropy", native.entropy());
  ExpectSame(got, 2, "max_weight", native.max_weight());
  EXPECT_THAT(got.outputs(1).shape(), ElementsAre(1, 2, 5));
  // Asked for by name, without the parameter: only that output.
  ModelInferRequest named = ToV2(native_request, false);
  named.add_outputs()->set_name("max_weight");
  ASSERT_THAT(Infer(named, &got),
              StatusIs(absl::StatusCode::kOk, ::testing::_));
  ASSERT_EQ(got.outputs_size(), 1);
  ExpectSame(got, 0, "max_weight", native.max_weight());
}

TEST_F(KserveE2eTest, HostedModelsEqualAttendModel) {
  grpc::ClientContext info_context;
  Prepare(&info_context);
  v1::ServerInfo info;
  ASSERT_TRUE(
      native_->GetServerInfo(&info_context, v1::GetServerInfoRequest(), &info)
          .ok());
  ASSERT_GT(info.models_size(), 0);
  for (const v1::ModelInfo& model : info.models()) {
    SCOPED_TRACE(model.name());
    const int64_t b = 2, lq = 5, lk = 6, d = model.d_model();
    v1::ModelRequest native_request;
    native_request.set_request_id("hosted");
    native_request.set_model(model.name());
    ToWire(TestTensor::Random(DType::kFloat32, {b, lq, d}, 11),
           native_request.mutable_hidden());
    ToWire(TestTensor::Random(DType::kFloat32, {b, lk, d}, 12),
           native_request.mutable_memory());
    // Positions, except for a layer that takes its distances from the mask
    // (positional "relative").
    if (!absl::StrContains(model.config_json(),
                           "\"positional\":\"relative\"")) {
      v1::Tensor* p = native_request.mutable_positions();
      p->set_dtype(v1::INT32);
      p->add_shape(b);
      p->add_shape(lq);
      std::vector<int32_t> pos;
      for (int i = 0; i < b * lq; ++i) pos.push_back(3 + i % lq);
      p->set_data(std::string(reinterpret_cast<const char*>(pos.data()),
                              pos.size() * 4));
    }
    // A Linformer layer mixes its keys: no causal mask and no weights per key;
    // it pads them instead.
    const bool linformer =
        absl::StrContains(model.config_json(), "\"attention\":\"linformer\"");
    if (linformer) {
      native_request.mutable_mask()->set_alignment(v1::TOP_LEFT);
      native_request.mutable_mask()->add_key_lengths(lk);
      native_request.mutable_mask()->add_key_lengths(lk - 2);
    } else {
      native_request.mutable_mask()->set_causal(true);
      native_request.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
      native_request.set_return_weights(true);
    }
    v1::AttendResponse native;
    {
      grpc::ClientContext context;
      Prepare(&context);
      ASSERT_THAT(
          ToAbsl(native_->AttendModel(&context, native_request, &native)),
          StatusIs(absl::StatusCode::kOk, ::testing::_));
    }
    for (bool typed : {false, true}) {
      ModelInferRequest r;
      r.set_model_name(model.name());
      r.set_model_version("1");
      AddTensor("hidden", native_request.hidden(), typed, &r);
      AddTensor("memory", native_request.memory(), typed, &r);
      if (native_request.has_positions()) {
        AddTensor("positions", native_request.positions(), typed, &r);
      }
      AddMask(native_request.mask(), typed, &r);
      (*r.mutable_parameters())["return_weights"].set_bool_param(!linformer);
      ModelInferResponse got;
      ASSERT_THAT(Infer(r, &got),
                  StatusIs(absl::StatusCode::kOk, ::testing::_));
      ExpectSame(got, 0, "output", native.output());
      if (!linformer) ExpectSame(got, 1, "weights", native.weights());
    }
  }
}

TEST_F(KserveE2eTest, MetadataConfigReadinessAndStatistics) {
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ServerLiveResponse live;
    ASSERT_TRUE(
        v2_->ServerLive(&context, inference::ServerLiveRequest(), &live).ok());
    EXPECT_TRUE(live.live());
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(
        v2_->ServerReady(&context, inference::ServerReadyRequest(), &ready)
            .ok());
    EXPECT_TRUE(ready.ready());
  }
  for (const auto& [name, version, expected] :
       std::vector<std::tuple<std::string, std::string, bool>>{
           {"attention", "", true},
           {"attention", "1", true},
           {"attention", "2", false},
           {"mha_post", "", true},
           {"no_such_model", "", false}}) {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse ready;
    ASSERT_TRUE(v2_->ModelReady(&context, request, &ready).ok());
    EXPECT_EQ(ready.ready(), expected) << name << " version " << version;
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ServerMetadataResponse meta;
    ASSERT_TRUE(
        v2_->ServerMetadata(&context, inference::ServerMetadataRequest(), &meta)
            .ok());
    EXPECT_EQ(meta.name(), "attnserve");
    EXPECT_FALSE(meta.version().empty());
    EXPECT_THAT(meta.extensions(),
                ::testing::IsSupersetOf({"model_configuration", "statistics"}));
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelMetadataRequest request;
    request.set_name("attention");
    inference::ModelMetadataResponse meta;
    ASSERT_TRUE(v2_->ModelMetadata(&context, request, &meta).ok());
    EXPECT_EQ(meta.name(), "attention");
    EXPECT_THAT(meta.versions(), ElementsAre("1"));
    std::vector<std::string> inputs;
    for (const auto& t : meta.inputs()) inputs.push_back(t.name());
    EXPECT_THAT(inputs, ElementsAre("query", "key", "value", "mask",
                                    "key_lengths", "alibi_slopes", "sinks"));
    EXPECT_EQ(meta.inputs(0).datatype(), "FP32");
    EXPECT_THAT(meta.inputs(0).shape(), ElementsAre(-1, -1, -1, -1));
    EXPECT_EQ(meta.inputs(4).datatype(), "INT32");
    ASSERT_EQ(meta.outputs_size(), 4);
    EXPECT_EQ(meta.outputs(0).name(), "output");
    EXPECT_EQ(meta.outputs(1).name(), "weights");
    EXPECT_EQ(meta.outputs(2).name(), "entropy");
    EXPECT_EQ(meta.outputs(3).name(), "max_weight");
    EXPECT_THAT(meta.outputs(3).shape(), ElementsAre(-1, -1, -1));
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelMetadataRequest request;
    request.set_name("mha_post");
    inference::ModelMetadataResponse meta;
    ASSERT_TRUE(v2_->ModelMetadata(&context, request, &meta).ok());
    ASSERT_GE(meta.inputs_size(), 3);
    EXPECT_EQ(meta.inputs(0).name(), "hidden");
    ASSERT_EQ(meta.inputs(0).shape_size(), 3);
    EXPECT_EQ(meta.inputs(0).shape(0), -1);
    EXPECT_GT(meta.inputs(0).shape(2), 0);
    EXPECT_EQ(meta.inputs(2).name(), "positions");
    EXPECT_EQ(meta.inputs(2).datatype(), "INT32");
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelConfigRequest request;
    request.set_name("attention");
    inference::ModelConfigResponse config;
    ASSERT_TRUE(v2_->ModelConfig(&context, request, &config).ok());
    EXPECT_EQ(config.config().name(), "attention");
    EXPECT_EQ(config.config().max_batch_size(), 0);
    ASSERT_EQ(config.config().input_size(), 7);
    EXPECT_EQ(config.config().input(0).data_type(), inference::TYPE_FP32);
    EXPECT_FALSE(config.config().input(0).optional());
    EXPECT_EQ(config.config().input(3).data_type(), inference::TYPE_BOOL);
    EXPECT_TRUE(config.config().input(3).optional());
    EXPECT_EQ(config.config().output_size(), 4);
    EXPECT_FALSE(config.config().model_transaction_policy().decoupled());
  }
  // Statistics count this model's calls: one success and one failure more.
  auto statistics = [&](const std::string& name) {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelStatisticsRequest request;
    request.set_name(name);
    inference::ModelStatisticsResponse stats;
    EXPECT_TRUE(v2_->ModelStatistics(&context, request, &stats).ok());
    EXPECT_EQ(stats.model_stats_size(), 1);
    return stats.model_stats_size() == 1 ? stats.model_stats(0)
                                         : inference::ModelStatistics();
  };
  const inference::ModelStatistics before = statistics("attention");
  ModelInferResponse response;
  ASSERT_TRUE(Infer(ToV2(Case{}.Build(3), false), &response).ok());
  ModelInferRequest bad = ToV2(Case{}.Build(3), false);
  bad.mutable_inputs(0)->set_datatype("FLOAT32");
  EXPECT_FALSE(Infer(bad, &response).ok());
  const inference::ModelStatistics after = statistics("attention");
  EXPECT_EQ(after.name(), "attention");
  EXPECT_EQ(after.version(), "1");
  EXPECT_EQ(after.inference_stats().success().count(),
            before.inference_stats().success().count() + 1);
  EXPECT_GT(after.inference_stats().success().ns(),
            before.inference_stats().success().ns());
  EXPECT_EQ(after.inference_stats().fail().count(),
            before.inference_stats().fail().count() + 1);
  EXPECT_EQ(after.inference_stats().compute_infer().count(),
            after.inference_stats().success().count());
  EXPECT_EQ(after.inference_count(), after.inference_stats().success().count());
  EXPECT_GT(after.last_inference(), 0u);
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelStatisticsResponse all;
    ASSERT_TRUE(v2_->ModelStatistics(&context,
                                     inference::ModelStatisticsRequest(), &all)
                    .ok());
    EXPECT_GE(all.model_stats_size(), 2);
  }
  EXPECT_GE(
      ::attnserve::testing::AwaitMetric(
          server(),
          R"(attnserve_requests_total{code="OK",method="ModelInfer"})", 1),
      1);
  EXPECT_GE(
      ::attnserve::testing::AwaitMetric(
          server(),
          R"(attnserve_requests_total{code="INVALID_ARGUMENT",method="ModelInfer"})",
          1),
      1);
}

TEST_F(KserveE2eTest, UnknownModelsAndVersionsAreNotFound) {
  ModelInferRequest r = ToV2(Case{}.Build(1), false);
  r.set_model_name("bert");
  ModelInferResponse got;
  EXPECT_THAT(Infer(r, &got),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"bert\""), HasSubstr("attention"))));
  r.set_model_name("attention");
  r.set_model_version("3");
  EXPECT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kNotFound,
                                       HasSubstr("no version \"3\"")));
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelMetadataRequest meta_request;
  meta_request.set_name("bert");
  inference::ModelMetadataResponse meta;
  EXPECT_THAT(ToAbsl(v2_->ModelMetadata(&context, meta_request, &meta)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"bert\"")));
}

// Each malformed request: its code and the input or parameter it names.
TEST_F(KserveE2eTest, MalformedInputsNameTheInput) {
  struct Bad {
    std::string what;
    std::function<void(ModelInferRequest*)> spoil;
    std::string message;
  };
  const v1::AttendRequest base = Case{}.Build(5);
  const std::vector<Bad> bad = {
      {"missing input",
       [](ModelInferRequest* r) {
         r->mutable_inputs()->RemoveLast();
         r->mutable_raw_input_contents()->RemoveLast();
       },
       "missing input \"value\""},
      {"unknown input",
       [](ModelInferRequest* r) { r->mutable_inputs(2)->set_name("values"); },
       "inputs[2] (values): unknown input for model attention"},
      {"duplicate input",
       [](ModelInferRequest* r) { r->mutable_inputs(2)->set_name("key"); },
       "inputs[2] (key): given twice"},
      {"wrong datatype string",
       [](ModelInferRequest* r) {
         r->mutable_inputs(0)->set_datatype("FLOAT32");
       },
       "inputs[0] (query).datatype: unknown datatype \"FLOAT32\""},
      {"lower-case datatype",
       [](ModelInferRequest* r) { r->mutable_inputs(1)->set_datatype("fp32"); },
       "inputs[1] (key).datatype: unknown datatype \"fp32\""},
      {"datatype the input does not take",
       [](ModelInferRequest* r) {
         r->mutable_inputs(0)->set_datatype("INT32");
       },
       "inputs[0] (query).datatype: \"INT32\" is not accepted for query"},
      {"unsupported protocol datatype",
       [](ModelInferRequest* r) { r->mutable_inputs(1)->set_datatype("FP64"); },
       "inputs[1] (key).datatype: \"FP64\" is not supported"},
      {"raw and typed contents",
       [](ModelInferRequest* r) {
         r->mutable_inputs(1)->mutable_contents()->add_fp32_contents(1);
       },
       "inputs[1] (key).contents: set together with raw_input_contents"},
      {"raw count",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents()->RemoveLast();
       },
       "raw_input_contents: 2 entries for 3 inputs"},
      {"byte count",
       [](ModelInferRequest* r) {
         r->mutable_raw_input_contents(0)->pop_back();
       },
       "query: 319 bytes do not match shape [1, 2, 5, 8]"},
      {"shape mismatch",
       [](ModelInferRequest* r) {
         // key [1, 1, 7, 8] declared as [1, 1, 8, 7]: same bytes, wrong D.
         r->mutable_inputs(1)->set_shape(2, 8);
         r->mutable_inputs(1)->set_shape(3, 7);
       },
       "key"},
      {"rank",
       [](ModelInferRequest* r) {
         r->mutable_inputs(2)->clear_shape();
         r->mutable_inputs(2)->add_shape(56);
       },
       "value.shape: expected rank 4"},
      {"negative dimension",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_shape(1, -2); },
       "query"},
      {"input parameters",
       [](ModelInferRequest* r) {
         (*r->mutable_inputs(0)->mutable_parameters())["priority"]
             .set_int64_param(1);
       },
       "inputs[0] (query).parameters: unknown parameter \"priority\""},
      {"unknown parameter",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["sequence_id"].set_int64_param(4);
       },
       "parameters[\"sequence_id\"]: unknown parameter for model attention"},
      {"parameter kind",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["causal"].set_string_param("yes");
       },
       "parameters[\"causal\"]: expected a bool_param, got string_param"},
      {"layout",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["layout"].set_string_param("NCHW");
       },
       "parameters[\"layout\"]: unknown layout \"NCHW\""},
      {"window range",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["window_left"].set_int64_param(-1);
       },
       "parameters[\"window_left\"]: -1 is out of range"},
      {"scale",
       [](ModelInferRequest* r) {
         (*r->mutable_parameters())["scale"].set_string_param("big");
       },
       "parameters[\"scale\"]: \"big\" is not a number"},
      {"unknown output",
       [](ModelInferRequest* r) { r->add_outputs()->set_name("logits"); },
       "outputs[0] (logits): unknown output for model attention"},
      {"key_lengths rank",
       [](ModelInferRequest* r) {
         AddInput("key_lengths", v1::INT32, {1, 1}, std::string(4, '\0'), false,
                  r);
       },
       "inputs[3] (key_lengths).shape: expected rank 1 [B]"},
      {"key_lengths bytes",
       [](ModelInferRequest* r) {
         AddInput("key_lengths", v1::INT32, {1}, std::string(3, '\0'), false,
                  r);
       },
       "inputs[3] (key_lengths): 3 bytes do not match shape [1] of INT32"},
      {"key_lengths value",
       [](ModelInferRequest* r) {
         AddInput("key_lengths", v1::INT32, {1}, std::string("\x09\0\0\0", 4),
                  false, r);
       },
       "key_lengths[0] = 9"},
      {"mask dtype",
       [](ModelInferRequest* r) {
         AddInput("mask", v1::INT32, {7}, std::string(28, '\0'), false, r);
       },
       "inputs[3] (mask).datatype: \"INT32\" is not accepted for mask"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    ModelInferRequest r = ToV2(base, false);
    b.spoil(&r);
    ModelInferResponse got;
    EXPECT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr(b.message)));
  }
}

TEST_F(KserveE2eTest, MalformedTypedContentsNameTheInput) {
  const v1::AttendRequest base = Case{}.Build(6);
  struct Bad {
    std::string what;
    std::function<void(ModelInferRequest*)> spoil;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {"element count",
       [](ModelInferRequest* r) {
         r->mutable_inputs(1)
             ->mutable_contents()
             ->mutable_fp32_contents()
             ->RemoveLast();
       },
       "inputs[1] (key).contents: 55 fp32_contents for shape [1, 1, 7, 8] "
       "(expected 56"},
      {"wrong contents field",
       [](ModelInferRequest* r) {
         r->mutable_inputs(2)->mutable_contents()->add_int_contents(1);
       },
       "inputs[2] (value).contents: int_contents is set, but datatype FP32 "
       "takes fp32_contents"},
      {"FP16 typed",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("FP16"); },
       "inputs[0] (query): FP16 has no typed contents"},
      {"no contents",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->clear_contents(); },
       "inputs[0] (query).contents: 0 fp32_contents"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    ModelInferRequest r = ToV2(base, true);
    b.spoil(&r);
    ModelInferResponse got;
    EXPECT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr(b.message)));
  }
}

TEST_F(KserveE2eTest, HostedModelErrorsNameTheInput) {
  ModelInferRequest r;
  r.set_model_name("mha_post");
  AddInput("hidden", v1::FLOAT32, {1, 3, 63}, std::string(3 * 63 * 4, '\0'),
           false, &r);
  ModelInferResponse got;
  EXPECT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("hidden.shape")));
  ModelInferRequest missing;
  missing.set_model_name("mha_post");
  EXPECT_THAT(Infer(missing, &got),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing input \"hidden\"")));
  ModelInferRequest scale = r;
  (*scale.mutable_parameters())["scale"].set_double_param(0.5);
  EXPECT_THAT(Infer(scale, &got),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameters[\"scale\"]: unknown parameter "
                                 "for model mha_post")));
}

template <typename T>
std::string RawOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

std::vector<float> FloatsOf(const std::string& raw) {
  std::vector<float> v(raw.size() / 4);
  std::memcpy(v.data(), raw.data(), v.size() * 4);
  return v;
}

// docs/api.md's worked ModelInfer example, with the values it states.
TEST_F(KserveE2eTest, WorkedExampleOfTheApiDoc) {
  ModelInferRequest r;
  r.set_model_name("attention");
  r.set_id("example-1");
  AddInput("query", v1::FLOAT32, {1, 2, 3, 2},
           RawOf(std::vector<float>{1, 0, 0, 1, 1, 1, 0, 0, 2, 0, 0, -1}),
           false, &r);
  AddInput("key", v1::FLOAT32, {1, 1, 4, 2},
           RawOf(std::vector<float>{1, 0, 0, 1, 1, 1, -1, 0}), false, &r);
  AddInput("value", v1::FLOAT32, {1, 1, 4, 2},
           RawOf(std::vector<float>{1, 0, 0, 1, 2, 2, 5, 5}), false, &r);
  AddInput("mask", v1::BOOL, {1, 2, 1, 4}, std::string("\1\1\1\1\1\0\1\1", 8),
           false, &r);
  AddInput("key_lengths", v1::INT32, {1}, RawOf(std::vector<int32_t>{3}), false,
           &r);
  auto& p = *r.mutable_parameters();
  p["causal"].set_bool_param(true);
  p["alignment"].set_string_param("BOTTOM_RIGHT");
  p["return_weights"].set_bool_param(true);
  ModelInferResponse got;
  ASSERT_THAT(Infer(r, &got), StatusIs(absl::StatusCode::kOk, ::testing::_));
  ASSERT_EQ(got.outputs_size(), 2);
  EXPECT_EQ(got.id(), "example-1");
  EXPECT_EQ(got.outputs(0).name(), "output");
  EXPECT_EQ(got.outputs(0).datatype(), "FP32");
  EXPECT_THAT(got.outputs(0).shape(), ElementsAre(1, 2, 3, 2));
  EXPECT_THAT(got.outputs(1).shape(), ElementsAre(1, 2, 3, 4));
  using ::testing::FloatNear;
  const float e = 1e-4f;
  EXPECT_THAT(FloatsOf(got.raw_output_contents(0)),
              ElementsAre(FloatNear(0.6698f, e), FloatNear(0.3302f, e),
                          FloatNear(1.0f, e), FloatNear(1.2033f, e),
                          FloatNear(1.2552f, e), FloatNear(1.2552f, e),
                          FloatNear(1.0f, e), FloatNear(0.0f, e),
                          FloatNear(1.5f, e), FloatNear(1.0f, e),
                          FloatNear(1.3302f, e), FloatNear(0.6605f, e)));
  const std::vector<float> w = FloatsOf(got.raw_output_contents(1));
  ASSERT_EQ(w.size(), 24u);
  EXPECT_NEAR(w[0], 0.6698f, e);
  EXPECT_NEAR(w[1], 0.3302f, e);
  EXPECT_EQ(w[3], 0.0f);
  EXPECT_NEAR(w[12 + 4], 0.5f, e);
  EXPECT_EQ(w[12 + 5], 0.0f);
}

std::string WriteToken(const TempDir& dir, const std::string& token) {
  const std::string path = dir.Path("token");
  std::ofstream(path) << token << "\n";
  return path;
}

TEST(KserveAuthE2eTest, TokenGuardsEverythingButLivenessAndReadiness) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       absl::StrCat("--auth_token_file=", WriteToken(dir, "s3cret"))});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub((*server)->Channel());
  const ModelInferRequest request = ToV2(Case{}.Build(9), false);
  for (const std::string token : {"", "wrong"}) {
    SCOPED_TRACE(absl::StrCat("token \"", token, "\""));
    grpc::ClientContext context;
    Prepare(&context, token);
    ModelInferResponse response;
    EXPECT_THAT(ToAbsl(stub->ModelInfer(&context, request, &response)),
                StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
    grpc::ClientContext meta_context;
    Prepare(&meta_context, token);
    inference::ServerMetadataResponse meta;
    EXPECT_THAT(ToAbsl(stub->ServerMetadata(
                    &meta_context, inference::ServerMetadataRequest(), &meta)),
                StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
    grpc::ClientContext ready_context;
    Prepare(&ready_context, token);
    inference::ModelReadyRequest ready_request;
    ready_request.set_name("attention");
    inference::ModelReadyResponse model_ready;
    EXPECT_THAT(
        ToAbsl(stub->ModelReady(&ready_context, ready_request, &model_ready)),
        StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ServerReadyResponse ready;
    EXPECT_TRUE(
        stub->ServerReady(&context, inference::ServerReadyRequest(), &ready)
            .ok());
    EXPECT_TRUE(ready.ready());
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    auto stream = stub->ModelStreamInfer(&context);
    stream->Write(request);
    stream->WritesDone();
    inference::ModelStreamInferResponse answer;
    EXPECT_FALSE(stream->Read(&answer));
    EXPECT_THAT(ToAbsl(stream->Finish()),
                StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  }
  grpc::ClientContext context;
  Prepare(&context, "s3cret");
  ModelInferResponse response;
  EXPECT_TRUE(stub->ModelInfer(&context, request, &response).ok());
  EXPECT_EQ(response.outputs_size(), 1);
}

// The flags of a server that takes v2 requests of up to 128 MiB, as one
// message each.
constexpr char kLargeMessages[] = "--max_message_bytes=128MiB";
constexpr char kLargeTransport[] = "--max_transport_bytes=512MiB";

// A large ModelInfer keeps the server in its grace period after SIGTERM:
// meanwhile ServerReady and ModelReady say not ready, new inferences are
// UNAVAILABLE, and the call in flight still completes.
// As a native call: a ModelInfer cancelled while queued is taken out of the
// queue at once (its bytes go then), answered and never computed.
TEST(KserveCancelE2eTest, InferCancelledInTheQueueFreesItsBytesAtOnce) {
  // v2 requests come as one message: this one (64 MiB) needs a larger
  // --max_message_bytes than the default.
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                      kLargeMessages, kLargeTransport});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = GRPCInferenceService::NewStub((*server)->Channel());
  // About 140 GFLOP: a second or so on one thread, long enough to act while
  // it computes.
  Case slow;
  slow.hq = 16, slow.hkv = 16, slow.lq = 8192, slow.lk = 4096, slow.d = 64,
  slow.dv = 64;
  const ModelInferRequest request = ToV2(slow.Build(21), false);
  // The call cancelled in the queue is small (4 MiB), so that it is queued
  // well before the first one ends, however slowly a large one would arrive.
  Case small = slow;
  small.lq = 512, small.lk = 256;
  const ModelInferRequest small_request = ToV2(small.Build(22), false);
  const std::string used = R"(attnserve_inflight_bytes{state="used"})";
  struct Call {
    grpc::ClientContext context;
    ModelInferResponse response;
    grpc::Status status;
    absl::Notification done;
  };
  Call first, second;
  auto start = [&](Call* call, const ModelInferRequest* request) {
    Prepare(&call->context);
    stub->async()->ModelInfer(&call->context, request, &call->response,
                              [call](grpc::Status s) {
                                call->status = std::move(s);
                                call->done.Notify();
                              });
  };
  start(&first, &request);
  ASSERT_GE(::attnserve::testing::AwaitMetric(
                **server, "attnserve_queue_duration_seconds_count", 1),
            1);
  const double first_bytes = ::attnserve::testing::MetricSample(**server, used);
  ASSERT_GT(first_bytes, 0);
  start(&second, &small_request);
  ASSERT_GE(
      ::attnserve::testing::AwaitMetric(**server, "attnserve_queue_depth", 1),
      1);
  second.context.TryCancel();
  EXPECT_LE(
      ::attnserve::testing::AwaitMetricAtMost(**server, used, first_bytes),
      first_bytes);
  EXPECT_TRUE(second.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(first.done.HasBeenNotified())
      << "the first call ended before the cancel";
  // Counted just after the answer: awaited, not sampled.
  EXPECT_EQ(::attnserve::testing::AwaitMetric(
                **server, R"(attnserve_rejected_total{reason="cancelled"})", 1),
            1);
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(::attnserve::testing::MetricSample(
                **server,
                R"(attnserve_compute_duration_seconds_count{kernel="flash"})"),
            1);
}

TEST(KserveDrainE2eTest, DrainingIsNotReadyAndFinishesInFlightInference) {
  auto server = ServerProcess::Start({"--workers=1", "--threads_per_worker=1",
                                      "--shutdown_grace=30s", kLargeMessages,
                                      kLargeTransport});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->Channel();
  auto stub = GRPCInferenceService::NewStub(channel);
  Case slow;
  slow.hq = 16, slow.hkv = 16, slow.lq = 4096, slow.lk = 4096, slow.d = 64,
  slow.dv = 64;
  const ModelInferRequest slow_request = ToV2(slow.Build(21), false);
  grpc::ClientContext slow_context;
  Prepare(&slow_context);
  ModelInferResponse slow_response;
  grpc::Status slow_status;
  absl::Notification slow_done;
  stub->async()->ModelInfer(&slow_context, &slow_request, &slow_response,
                            [&](grpc::Status s) {
                              slow_status = std::move(s);
                              slow_done.Notify();
                            });
  ASSERT_GE(::attnserve::testing::AwaitMetric(
                **server, "attnserve_queue_duration_seconds_count", 1),
            1);
  // A stream opened before the drain stays open but takes no new work.
  grpc::ClientContext stream_context;
  Prepare(&stream_context);
  auto stream = stub->ModelStreamInfer(&stream_context);
  {
    // A malformed message is answered at once (the worker is busy): the
    // stream is open on the server before the signal.
    ModelInferRequest bad = ToV2(Case{}.Build(4), false);
    bad.mutable_inputs(0)->set_datatype("FLOAT32");
    ASSERT_TRUE(stream->Write(bad));
    inference::ModelStreamInferResponse answer;
    ASSERT_TRUE(stream->Read(&answer));
    ASSERT_THAT(answer.error_message(), HasSubstr("INVALID_ARGUMENT"));
  }
  (*server)->Kill(SIGTERM);
  bool saw_not_ready = false;
  for (int i = 0; i < 200 && !saw_not_ready && !slow_done.HasBeenNotified();
       ++i) {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ServerReadyResponse ready;
    const grpc::Status s =
        stub->ServerReady(&context, inference::ServerReadyRequest(), &ready);
    ASSERT_TRUE(s.ok()) << s.error_message();
    saw_not_ready = !ready.ready();
    if (!saw_not_ready) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(saw_not_ready) << "ServerReady stayed true after SIGTERM";
  {
    grpc::ClientContext context;
    Prepare(&context);
    inference::ModelReadyRequest request;
    request.set_name("attention");
    inference::ModelReadyResponse ready;
    ASSERT_TRUE(stub->ModelReady(&context, request, &ready).ok());
    EXPECT_FALSE(ready.ready());
  }
  {
    grpc::ClientContext context;
    Prepare(&context);
    ModelInferResponse response;
    EXPECT_THAT(
        ToAbsl(stub->ModelInfer(&context, ToV2(Case{}.Build(2), false),
                                &response)),
        StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
  }
  {
    ASSERT_TRUE(stream->Write(ToV2(Case{}.Build(3), false)));
    inference::ModelStreamInferResponse answer;
    ASSERT_TRUE(stream->Read(&answer));
    EXPECT_EQ(answer.error_message(), "UNAVAILABLE: server is shutting down");
    stream->WritesDone();
    EXPECT_FALSE(stream->Read(&answer));
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_FALSE(slow_done.HasBeenNotified())
      << "the slow call ended before the drain checks: make it slower";
  ASSERT_TRUE(slow_done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(slow_response.raw_output_contents(0).size(),
            static_cast<size_t>(16 * 4096 * 64 * 4));
  absl::StatusOr<int> exit_code = (*server)->WaitForExit(kPatience);
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
}

}  // namespace
}  // namespace attnserve
