#include "client/check.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "client/request_builder.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

DType Core(v1::DataType dtype) {
  return dtype == v1::BFLOAT16 ? DType::kBFloat16 : DType::kFloat32;
}

// B = 1, Hq = 2, Hkv = 1, Lq = 3, Lk = 5, D = Dv = 4, causal bottom-right.
v1::AttendRequest SmallRequest(v1::DataType dtype, bool weights) {
  RandomInputs random;
  random.heads = 2;
  random.kv_heads = 1;
  random.q_len = 3;
  random.k_len = 5;
  random.head_dim = 4;
  random.dtype = dtype;
  random.seed = 7;
  v1::AttendRequest request;
  FillRandomInputs(random, v1::BHLD, &request);
  CallOptions call;
  call.causal = true;
  call.alignment = v1::BOTTOM_RIGHT;
  call.return_weights = weights;
  ApplyCallOptions(call, &request);
  return request;
}

void SetTensor(v1::DataType dtype, const std::vector<int64_t>& shape,
               v1::Tensor* tensor) {
  tensor->set_dtype(dtype);
  for (int64_t d : shape) tensor->add_shape(d);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  tensor->mutable_data()->assign(n * DTypeSize(Core(dtype)), '\0');
}

// What a perfect server answers: the reference itself, output in the query's
// dtype.
v1::AttendResponse ReferenceResponse(const v1::AttendRequest& request) {
  const DType dtype = Core(request.query().dtype());
  auto view = [&](const v1::Tensor& t) {
    return MakeTensorView(t.data().data(), dtype, t.shape());
  };
  AttentionInputs inputs;
  inputs.query = view(request.query());
  inputs.key = view(request.key());
  inputs.value = view(request.value());
  inputs.mask.causal = request.mask().causal();
  inputs.mask.alignment = CausalAlignment::kBottomRight;

  v1::AttendResponse response;
  SetTensor(request.query().dtype(), {1, 2, 3, 4}, response.mutable_output());
  AttentionOutputs outputs;
  outputs.output =
      MakeMutableTensorView(response.mutable_output()->mutable_data()->data(),
                            dtype, response.output().shape());
  if (request.return_weights()) {
    SetTensor(v1::FLOAT32, {1, 2, 3, 5}, response.mutable_weights());
    outputs.weights = MakeMutableTensorView(
        response.mutable_weights()->mutable_data()->data(), DType::kFloat32,
        response.weights().shape());
  }
  EXPECT_TRUE(ReferenceAttention(inputs, outputs).ok());
  return response;
}

void AddTo(v1::Tensor* tensor, int64_t i, float delta) {
  const DType dtype = Core(tensor->dtype());
  char* data = tensor->mutable_data()->data();
  StoreFromFloat(data, dtype, i, LoadAsFloat(data, dtype, i) + delta);
}

TEST(CheckTest, ToleranceDependsOnTheDTypes) {
  EXPECT_EQ(CheckTolerance(v1::FLOAT32, v1::FLOAT32), 1e-5);
  EXPECT_EQ(CheckTolerance(v1::BFLOAT16, v1::FLOAT32), 2e-2);
  EXPECT_EQ(CheckTolerance(v1::FLOAT16, v1::FLOAT16), 2e-2);
  EXPECT_EQ(CheckTolerance(v1::FLOAT32, v1::BFLOAT16), 2e-2);
}

TEST(CheckTest, PassesWhenTheResponseMatchesTheReference) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, true);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, ReferenceResponse(request));
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_THAT(*reports, SizeIs(2));
  EXPECT_EQ((*reports)[0].tensor, "output");
  EXPECT_EQ((*reports)[0].elements, 24);
  EXPECT_EQ((*reports)[1].tensor, "weights");
  EXPECT_EQ((*reports)[1].elements, 30);
  for (const CheckReport& report : *reports) {
    EXPECT_TRUE(report.passed());
    EXPECT_EQ(report.max_abs_error, 0);
    EXPECT_THAT(FormatCheckReport(report), HasSubstr(": ok"));
  }
  EXPECT_EQ(CheckExitCode(*reports), kExitOk);
}

TEST(CheckTest, AnErrorBeyondTheToleranceExitsWith3) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, false);
  v1::AttendResponse response = ReferenceResponse(request);
  AddTo(response.mutable_output(), 5, 1e-3f);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  ASSERT_THAT(*reports, SizeIs(1));
  const CheckReport& report = (*reports)[0];
  EXPECT_FALSE(report.passed());
  EXPECT_EQ(report.failures, 1);
  EXPECT_EQ(report.worst_index, 5);
  EXPECT_NEAR(report.max_abs_error, 1e-3, 1e-6);
  EXPECT_THAT(FormatCheckReport(report), HasSubstr("at element 5 (got "));
  EXPECT_THAT(FormatCheckReport(report),
              HasSubstr("tolerance 1e-05*(1+|ref|): FAILED, 1 of 24 elements "
                        "beyond"));
  EXPECT_EQ(CheckExitCode(*reports), kExitCheckFailed);
  EXPECT_EQ(CheckExitCode(*reports), 3);
}

TEST(CheckTest, AnErrorWithinTheTolerancePasses) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, false);
  v1::AttendResponse response = ReferenceResponse(request);
  AddTo(response.mutable_output(), 0, 5e-6f);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_TRUE((*reports)[0].passed());
  EXPECT_GT((*reports)[0].max_abs_error, 0);
  EXPECT_EQ(CheckExitCode(*reports), kExitOk);
}

TEST(CheckTest, BFloat16UsesTheWiderTolerance) {
  const v1::AttendRequest request = SmallRequest(v1::BFLOAT16, false);
  v1::AttendResponse response = ReferenceResponse(request);
  AddTo(response.mutable_output(), 3, 1e-2f);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_TRUE((*reports)[0].passed()) << FormatCheckReport((*reports)[0]);

  AddTo(response.mutable_output(), 3, 0.25f);
  reports = CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_FALSE((*reports)[0].passed());
  EXPECT_EQ(CheckExitCode(*reports), kExitCheckFailed);
}

TEST(CheckTest, WrongWeightsFailTheWeightsReport) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, true);
  v1::AttendResponse response = ReferenceResponse(request);
  AddTo(response.mutable_weights(), 29, -0.5f);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_TRUE((*reports)[0].passed());
  EXPECT_FALSE((*reports)[1].passed());
  EXPECT_EQ((*reports)[1].worst_index, 29);
  EXPECT_EQ(CheckExitCode(*reports), kExitCheckFailed);
}

TEST(CheckTest, NanFails) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, false);
  v1::AttendResponse response = ReferenceResponse(request);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(response.mutable_output()->mutable_data()->data() + 8, &nan, 4);
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  ASSERT_TRUE(reports.ok()) << reports.status();
  EXPECT_EQ((*reports)[0].failures, 1);
  EXPECT_EQ((*reports)[0].worst_index, 2);
  EXPECT_TRUE(std::isnan((*reports)[0].max_abs_error));
}

TEST(CheckTest, AResponseOfTheWrongShapeIsAnError) {
  const v1::AttendRequest request = SmallRequest(v1::FLOAT32, true);
  v1::AttendResponse response = ReferenceResponse(request);
  response.mutable_output()->set_shape(3, 2);
  EXPECT_THAT(CheckResponse(request, response).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the response's output is f32 [1, 2, 3, 2] "
                                 "with 96 bytes; expected f32 [1, 2, 3, 4]")));
  response = ReferenceResponse(request);
  response.clear_weights();
  EXPECT_THAT(CheckResponse(request, response).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the response's weights")));
}

}  // namespace
}  // namespace attnserve::client
