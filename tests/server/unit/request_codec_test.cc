// DecodeRequest field by field: every wire field valid and malformed, with the
// exact message, and PrepareResponse. Long because it is one case per field
// and error; the request builders at the top are shared.

#include "server/request_codec.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"
#include "wire/dtype.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kB = 1, kHq = 2, kHkv = 1, kLq = 3, kLk = 4, kD = 2;

std::vector<int64_t> InLayout(v1::Layout layout, int64_t b, int64_t h,
                              int64_t l, int64_t d) {
  if (layout == v1::BLHD) return {b, l, h, d};
  return {b, h, l, d};
}

// B1 Hq2 Hkv1 Lq3 Lk4 D2, random values, no mask.
v1::AttendRequest ValidRequest(v1::Layout layout = v1::BHLD,
                               DType dtype = DType::kFloat32) {
  v1::AttendRequest request;
  request.set_request_id("r1");
  request.set_layout(layout);
  ToWire(TestTensor::Random(dtype, InLayout(layout, kB, kHq, kLq, kD), 1),
         request.mutable_query());
  ToWire(TestTensor::Random(dtype, InLayout(layout, kB, kHkv, kLk, kD), 2),
         request.mutable_key());
  ToWire(TestTensor::Random(dtype, InLayout(layout, kB, kHkv, kLk, kD), 3),
         request.mutable_value());
  return request;
}

// Every mask part at once; the bool mask keeps key 0 out for query row 1.
void AddEveryMaskPart(v1::AttendRequest* request) {
  v1::Mask* mask = request->mutable_mask();
  mask->set_causal(true);
  mask->set_alignment(v1::BOTTOM_RIGHT);
  mask->set_window_left(2);
  mask->set_window_right(0);
  mask->add_key_lengths(4);
  TestTensor m = TestTensor::FromFloats(DType::kBool, {kLq, kLk},
                                        {1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1});
  ToWire(m, mask->mutable_explicit_mask());
  mask->add_alibi_slopes(0.5f);
  mask->add_alibi_slopes(0.25f);
  request->set_scale(0.75f);
}

class RequestCodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions options;
    options.num_threads = 1;
    auto engine = AttentionEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  absl::StatusOr<DecodedRequest> Decode(const v1::AttendRequest& request) {
    return DecodeRequest(request, *engine_, limits_);
  }
  absl::Status DecodeStatus(const v1::AttendRequest& request) {
    return Decode(request).status();
  }

  static AttentionEngine* engine_;
  RequestLimits limits_;
};

AttentionEngine* RequestCodecTest::engine_ = nullptr;

TEST_F(RequestCodecTest, DecodesBhld) {
  const v1::AttendRequest request = ValidRequest(v1::BHLD);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.layout, Layout::kBHLD);
  EXPECT_EQ(decoded->plan.shape.batch, kB);
  EXPECT_EQ(decoded->plan.shape.q_heads, kHq);
  EXPECT_EQ(decoded->plan.shape.kv_heads, kHkv);
  EXPECT_EQ(decoded->plan.shape.q_len, kLq);
  EXPECT_EQ(decoded->plan.shape.k_len, kLk);
  EXPECT_EQ(decoded->plan.shape.head_dim, kD);
  EXPECT_EQ(decoded->plan.shape.value_dim, kD);
  EXPECT_THAT(decoded->plan.shape.output_shape,
              ::testing::ElementsAre(kB, kHq, kLq, kD));
  EXPECT_EQ(decoded->output_dtype, DType::kFloat32);
  EXPECT_FALSE(decoded->return_weights);
  EXPECT_EQ(decoded->response_payload_bytes, kB * kHq * kLq * kD * 4);
  EXPECT_FALSE(decoded->inputs.scale.has_value());
  EXPECT_FALSE(decoded->inputs.mask.causal);
  EXPECT_FALSE(decoded->inputs.mask.window_left.has_value());
  EXPECT_FALSE(decoded->inputs.mask.window_right.has_value());
  EXPECT_FALSE(decoded->inputs.mask.explicit_mask.has_value());
  EXPECT_TRUE(decoded->inputs.mask.key_lengths.empty());
  EXPECT_TRUE(decoded->inputs.mask.alibi_slopes.empty());
}

TEST_F(RequestCodecTest, DecodesBlhd) {
  v1::AttendRequest request = ValidRequest(v1::BLHD);
  request.set_return_weights(true);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.layout, Layout::kBLHD);
  EXPECT_EQ(decoded->plan.shape.q_heads, kHq);
  EXPECT_EQ(decoded->plan.shape.q_len, kLq);
  EXPECT_THAT(decoded->plan.shape.output_shape,
              ::testing::ElementsAre(kB, kLq, kHq, kD));
  EXPECT_THAT(decoded->plan.shape.weights_shape,
              ::testing::ElementsAre(kB, kHq, kLq, kLk));
  EXPECT_TRUE(decoded->return_weights);
  EXPECT_EQ(decoded->response_payload_bytes,
            kB * kHq * kLq * kD * 4 + kB * kHq * kLq * kLk * 4);
}

TEST_F(RequestCodecTest, UnspecifiedLayoutIsBhld) {
  v1::AttendRequest request = ValidRequest(v1::BHLD);
  request.set_layout(v1::LAYOUT_UNSPECIFIED);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.layout, Layout::kBHLD);
}

TEST_F(RequestCodecTest, DecodesEveryMaskPart) {
  v1::AttendRequest request = ValidRequest();
  AddEveryMaskPart(&request);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const MaskSpec& mask = decoded->inputs.mask;
  EXPECT_TRUE(mask.causal);
  EXPECT_EQ(mask.alignment, CausalAlignment::kBottomRight);
  EXPECT_EQ(mask.window_left, 2);
  EXPECT_EQ(mask.window_right, 0);
  EXPECT_THAT(mask.key_lengths, ::testing::ElementsAre(4));
  ASSERT_TRUE(mask.explicit_mask.has_value());
  EXPECT_EQ(mask.explicit_mask->dtype, DType::kBool);
  EXPECT_THAT(mask.explicit_mask->dims(), ::testing::ElementsAre(kLq, kLk));
  EXPECT_THAT(mask.alibi_slopes, ::testing::ElementsAre(0.5f, 0.25f));
  EXPECT_EQ(decoded->inputs.scale, 0.75f);
}

TEST_F(RequestCodecTest, DecodesTopLeftAndFloatMask) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->set_causal(true);
  request.mutable_mask()->set_alignment(v1::TOP_LEFT);
  ToWire(TestTensor::FromFloats(DType::kFloat32, {kB, 1, 1, kLk},
                                {0.0f, -1.0f, -INFINITY, 2.0f}),
         request.mutable_mask()->mutable_explicit_mask());
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.mask.alignment, CausalAlignment::kTopLeft);
  ASSERT_TRUE(decoded->inputs.mask.explicit_mask.has_value());
  EXPECT_EQ(decoded->inputs.mask.explicit_mask->dtype, DType::kFloat32);
}

TEST_F(RequestCodecTest, ScalarMaskBroadcasts) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::FromFloats(DType::kBool, {}, {1}),
         request.mutable_mask()->mutable_explicit_mask());
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.mask.explicit_mask->rank, 0);
}

TEST_F(RequestCodecTest, ViewsPointIntoTheRequestBytes) {
  v1::AttendRequest request = ValidRequest();
  AddEveryMaskPart(&request);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const AttentionInputs& in = decoded->inputs;
  EXPECT_EQ(in.query.data, request.query().data().data());
  EXPECT_EQ(in.key.data, request.key().data().data());
  EXPECT_EQ(in.value.data, request.value().data().data());
  EXPECT_EQ(in.mask.explicit_mask->data,
            request.mask().explicit_mask().data().data());
  EXPECT_EQ(in.mask.key_lengths.data(), request.mask().key_lengths().data());
  EXPECT_EQ(in.mask.alibi_slopes.data(), request.mask().alibi_slopes().data());
}

TEST_F(RequestCodecTest, OutputDtypeDefaultsToQueryDtype) {
  const v1::AttendRequest request = ValidRequest(v1::BHLD, DType::kBFloat16);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->output_dtype, DType::kBFloat16);
  EXPECT_EQ(decoded->response_payload_bytes, kB * kHq * kLq * kD * 2);
}

TEST_F(RequestCodecTest, ExplicitOutputDtype) {
  v1::AttendRequest request = ValidRequest(v1::BHLD, DType::kFloat16);
  request.set_output_dtype(v1::FLOAT32);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->output_dtype, DType::kFloat32);
  EXPECT_EQ(decoded->response_payload_bytes, kB * kHq * kLq * kD * 4);
}

TEST_F(RequestCodecTest, MissingTensors) {
  v1::AttendRequest request = ValidRequest();
  request.clear_query();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("query: missing"),
                             HasSubstr("[B, Hq, Lq, D]"))));
  request = ValidRequest(v1::BLHD);
  request.clear_key();
  EXPECT_THAT(
      DecodeStatus(request),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("key: missing"), HasSubstr("[B, Lk, Hkv, D]"))));
  request = ValidRequest();
  request.clear_value();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("value: missing")));
  EXPECT_THAT(DecodeStatus(v1::AttendRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query: missing")));
}

TEST_F(RequestCodecTest, UnspecifiedDtype) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_value()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("value.dtype: DATA_TYPE_UNSPECIFIED")));
}

TEST_F(RequestCodecTest, BoolQuery) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_query()->set_dtype(v1::BOOL);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query.dtype: BOOL is not supported")));
}

TEST_F(RequestCodecTest, UnknownDtypeNumber) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_key()->set_dtype(static_cast<v1::DataType>(17));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key.dtype: unknown value 17")));
}

TEST_F(RequestCodecTest, DtypeMismatch) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::Random(DType::kBFloat16, {kB, kHkv, kLk, kD}, 2),
         request.mutable_key());
  EXPECT_THAT(
      DecodeStatus(request),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("key.dtype: BFLOAT16 differs from query.dtype FLOAT32")));
}

TEST_F(RequestCodecTest, ByteSizeOneShort) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_query()->mutable_data()->pop_back();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("query: 47 bytes do not match shape "
                                       "[1, 2, 3, 2] of f32"),
                             HasSubstr("expected 48 bytes"))));
}

TEST_F(RequestCodecTest, ByteSizeOneLong) {
  v1::AttendRequest request = ValidRequest(v1::BHLD, DType::kFloat16);
  request.mutable_value()->mutable_data()->push_back('\0');
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("value: 17 bytes do not match shape "
                                       "[1, 1, 4, 2] of f16"),
                             HasSubstr("expected 16 bytes"))));
}

TEST_F(RequestCodecTest, RankThree) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::Random(DType::kFloat32, {kHq, kLq, kD}, 1),
         request.mutable_query());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("query.shape: expected rank 4"),
                             HasSubstr("got rank 3 (shape [2, 3, 2])"))));
}

TEST_F(RequestCodecTest, RankFive) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::Random(DType::kFloat32, {1, kB, kHkv, kLk, kD}, 1),
         request.mutable_key());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key: rank 5 exceeds the maximum 4")));
}

TEST_F(RequestCodecTest, NegativeDimension) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_query()->set_shape(2, -3);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query: negative dimension in shape "
                                 "[1, 2, -3, 2]")));
}

TEST_F(RequestCodecTest, KeyShapeMismatch) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::Random(DType::kFloat32, {kB, kHkv, kLk, kD + 1}, 2),
         request.mutable_key());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key: shape [1, 1, 4, 3]"),
                             HasSubstr("expected [1, 1, 4, 2]"))));
}

TEST_F(RequestCodecTest, UnknownLayout) {
  v1::AttendRequest request = ValidRequest();
  request.set_layout(static_cast<v1::Layout>(7));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layout: unknown value 7")));
}

TEST_F(RequestCodecTest, UnknownAlignment) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->set_alignment(static_cast<v1::Alignment>(-2));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.alignment: unknown value -2")));
}

TEST_F(RequestCodecTest, UnknownOutputDtype) {
  v1::AttendRequest request = ValidRequest();
  request.set_output_dtype(static_cast<v1::DataType>(42));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: unknown value 42")));
}

TEST_F(RequestCodecTest, BoolOutputDtype) {
  v1::AttendRequest request = ValidRequest();
  request.set_output_dtype(v1::BOOL);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_dtype: BOOL is not supported")));
}

TEST_F(RequestCodecTest, MaskNotBroadcastable) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor(DType::kBool, {2, kLk}),
         request.mutable_mask()->mutable_explicit_mask());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("mask: shape [2, 4] is not "
                                       "broadcastable to [1, 2, 3, 4]"),
                             HasSubstr("expected 1 or 3"))));
}

TEST_F(RequestCodecTest, MaskDtypeFloat16) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor(DType::kFloat16, {kLq, kLk}),
         request.mutable_mask()->mutable_explicit_mask());
  EXPECT_THAT(
      DecodeStatus(request),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("mask.explicit_mask.dtype: FLOAT16 is not supported "
                         "(expected BOOL or FLOAT32)")));
}

TEST_F(RequestCodecTest, MaskDtypeUnspecified) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->mutable_explicit_mask();
  EXPECT_THAT(
      DecodeStatus(request),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("mask.explicit_mask.dtype: DATA_TYPE_UNSPECIFIED")));
}

TEST_F(RequestCodecTest, MaskWrongByteSize) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor(DType::kFloat32, {kLq, kLk}),
         request.mutable_mask()->mutable_explicit_mask());
  request.mutable_mask()->mutable_explicit_mask()->mutable_data()->pop_back();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("mask.explicit_mask: 47 bytes"),
                             HasSubstr("expected 48 bytes"))));
}

TEST_F(RequestCodecTest, MaskRankFive) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor(DType::kBool, {1, kB, kHq, kLq, kLk}),
         request.mutable_mask()->mutable_explicit_mask());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.explicit_mask: rank 5 exceeds")));
}

TEST_F(RequestCodecTest, KeyLengthsWrongLength) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->add_key_lengths(1);
  request.mutable_mask()->add_key_lengths(2);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.key_lengths: expected 1 entries (one "
                                 "per batch), got 2")));
}

TEST_F(RequestCodecTest, KeyLengthsOutOfRange) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->add_key_lengths(kLk + 1);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.key_lengths[0] = 5 is out of range "
                                 "[0, Lk = 4]")));
  request.mutable_mask()->set_key_lengths(0, -1);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.key_lengths[0] = -1 is out of range")));
}

TEST_F(RequestCodecTest, AlibiWrongLength) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->add_alibi_slopes(0.5f);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.alibi_slopes: expected 2 entries (one "
                                 "per query head), got 1")));
}

TEST_F(RequestCodecTest, AlibiNotFinite) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->add_alibi_slopes(0.5f);
  request.mutable_mask()->add_alibi_slopes(INFINITY);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.alibi_slopes[1]: must be finite")));
}

TEST_F(RequestCodecTest, NegativeWindow) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->set_window_left(-1);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.window_left: must be >= 0, got -1")));
  request = ValidRequest();
  request.mutable_mask()->set_window_right(-5);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.window_right: must be >= 0, got -5")));
}

TEST_F(RequestCodecTest, ZeroWindowIsSetNotUnbounded) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_mask()->set_window_left(0);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.mask.window_left, 0);
  EXPECT_FALSE(decoded->inputs.mask.window_right.has_value());
}

TEST_F(RequestCodecTest, NanScale) {
  v1::AttendRequest request = ValidRequest();
  request.set_scale(std::numeric_limits<float>::quiet_NaN());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("scale: must be finite, got nan")));
}

TEST_F(RequestCodecTest, ZeroScaleIsKept) {
  v1::AttendRequest request = ValidRequest();
  request.set_scale(0.0f);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.scale, 0.0f);
}

TEST_F(RequestCodecTest, QueryHeadsNotMultipleOfKvHeads) {
  v1::AttendRequest request = ValidRequest();
  ToWire(TestTensor::Random(DType::kFloat32, {kB, 3, kLq, kD}, 1),
         request.mutable_query());
  ToWire(TestTensor::Random(DType::kFloat32, {kB, 2, kLk, kD}, 2),
         request.mutable_key());
  ToWire(TestTensor::Random(DType::kFloat32, {kB, 2, kLk, kD}, 3),
         request.mutable_value());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query heads Hq = 3 is not a multiple of "
                                 "key/value heads Hkv = 2")));
}

// Shapes whose element counts do not fit in 64 bits, with no data to match.
TEST_F(RequestCodecTest, HugeQueryShapeOverflows) {
  v1::AttendRequest request = ValidRequest();
  v1::Tensor* query = request.mutable_query();
  query->clear_shape();
  query->clear_data();
  for (int64_t d : {int64_t{1} << 40, int64_t{1} << 40, int64_t{1}, kD}) {
    query->add_shape(d);
  }
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("query: element count of shape "
                                 "[1099511627776, 1099511627776, 1, 2] "
                                 "overflows")));
}

// An empty batch passes the byte checks with any other dimensions, so the
// output and weights shapes can overflow although they hold no element.
v1::AttendRequest EmptyBatchRequest(int64_t hq, int64_t lq, int64_t lk,
                                    int64_t dv) {
  v1::AttendRequest request;
  auto set = [](v1::Tensor* t, std::vector<int64_t> shape) {
    t->set_dtype(v1::FLOAT32);
    for (int64_t d : shape) t->add_shape(d);
  };
  set(request.mutable_query(), {0, hq, lq, 1});
  set(request.mutable_key(), {0, 1, lk, 1});
  set(request.mutable_value(), {0, 1, lk, dv});
  return request;
}

TEST_F(RequestCodecTest, EmptyBatchWithHugeWeightsShapeOverflows) {
  v1::AttendRequest request = EmptyBatchRequest(
      int64_t{1} << 20, int64_t{1} << 20, int64_t{1} << 40, 1);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->response_payload_bytes, 0);

  request.set_return_weights(true);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("weights: element count of shape [0, 1048576, "
                                 "1048576, 1099511627776] of f32 overflows")));
}

TEST_F(RequestCodecTest, EmptyBatchWithHugeOutputShapeOverflows) {
  const v1::AttendRequest request =
      EmptyBatchRequest(int64_t{1} << 30, int64_t{1} << 30, 1, 256);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output: element count of shape [0, "
                                 "1073741824, 1073741824, 256] of f32 "
                                 "overflows")));
}

TEST_F(RequestCodecTest, ResponseOverLimit) {
  // Output 48 bytes + weights 96 bytes.
  v1::AttendRequest request = ValidRequest();
  request.set_return_weights(true);
  limits_.max_response_bytes = 143;
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("response: 144 bytes"),
                             HasSubstr("limit of 143 bytes"),
                             HasSubstr("--max_response_bytes"))));
  limits_.max_response_bytes = 144;
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->response_payload_bytes, 144);

  request.set_return_weights(false);
  limits_.max_response_bytes = 47;
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("response: 48 bytes"),
                             HasSubstr("--max_response_bytes"))));
}

TEST_F(RequestCodecTest, WorkOverLimit) {
  v1::AttendRequest request = ValidRequest();
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const double flops = decoded->plan.shape.flops;
  limits_.max_flops = flops - 1;
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("FLOPs of attention exceed the limit"),
                             HasSubstr("--max_request_flops"))));
  limits_.max_flops = flops;
  EXPECT_TRUE(Decode(request).ok());
}

TEST_F(RequestCodecTest, PrepareResponseSizesAndViews) {
  v1::AttendRequest request = ValidRequest(v1::BLHD, DType::kBFloat16);
  request.set_return_weights(true);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  v1::AttendResponse response;
  const AttentionOutputs outputs = PrepareResponse(*decoded, &response);

  EXPECT_EQ(response.output().dtype(), v1::BFLOAT16);
  EXPECT_THAT(response.output().shape(),
              ::testing::ElementsAre(kB, kLq, kHq, kD));
  EXPECT_EQ(response.output().data().size(),
            static_cast<size_t>(kB * kLq * kHq * kD * 2));
  EXPECT_EQ(response.output().data(),
            std::string(response.output().data().size(), '\0'));
  EXPECT_EQ(outputs.output.data, response.output().data().data());
  EXPECT_EQ(outputs.output.dtype, DType::kBFloat16);
  EXPECT_THAT(outputs.output.dims(), ::testing::ElementsAre(kB, kLq, kHq, kD));
  // 2·B·Hq·Lq·Lk·(D + Dv): the count clients read instead of recomputing it.
  EXPECT_EQ(response.timing().flops(), 2.0 * kB * kHq * kLq * kLk * (kD + kD));

  EXPECT_EQ(response.weights().dtype(), v1::FLOAT32);
  EXPECT_THAT(response.weights().shape(),
              ::testing::ElementsAre(kB, kHq, kLq, kLk));
  EXPECT_EQ(response.weights().data().size(),
            static_cast<size_t>(kB * kHq * kLq * kLk * 4));
  ASSERT_TRUE(outputs.weights.has_value());
  EXPECT_EQ(outputs.weights->data, response.weights().data().data());
  EXPECT_EQ(static_cast<int64_t>(response.output().data().size() +
                                 response.weights().data().size()),
            decoded->response_payload_bytes);
}

TEST_F(RequestCodecTest, PrepareResponseResetsAReusedMessage) {
  v1::AttendResponse response;
  response.mutable_output()->add_shape(7);
  response.mutable_output()->set_data(std::string(64, 'x'));
  response.mutable_weights()->set_data("stale");
  auto decoded = Decode(ValidRequest());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const AttentionOutputs outputs = PrepareResponse(*decoded, &response);
  EXPECT_FALSE(outputs.weights.has_value());
  EXPECT_FALSE(response.has_weights());
  EXPECT_THAT(response.output().shape(),
              ::testing::ElementsAre(kB, kHq, kLq, kD));
  EXPECT_EQ(response.output().data(), std::string(48, '\0'));
}

// Decodes, runs the engine into the prepared response and compares the
// response's bytes with the reference run on the same decoded views.
void ExpectRoundTripMatchesReference(AttentionEngine& engine,
                                     const v1::AttendRequest& request,
                                     float tolerance) {
  auto decoded = DecodeRequest(request, engine, RequestLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  v1::AttendResponse response;
  const AttentionOutputs outputs = PrepareResponse(*decoded, &response);
  const absl::Status run = engine.Run(decoded->inputs, outputs);
  ASSERT_TRUE(run.ok()) << run;

  const auto& out_shape = decoded->plan.shape.output_shape;
  const auto& w_shape = decoded->plan.shape.weights_shape;
  TestTensor ref_out(decoded->output_dtype,
                     {out_shape.begin(), out_shape.end()});
  TestTensor ref_w(DType::kFloat32, {w_shape.begin(), w_shape.end()});
  AttentionOutputs ref_outputs{ref_out.mutable_view(), std::nullopt};
  if (decoded->return_weights) ref_outputs.weights = ref_w.mutable_view();
  const absl::Status ref = ReferenceAttention(decoded->inputs, ref_outputs);
  ASSERT_TRUE(ref.ok()) << ref;

  const DType out_dtype = decoded->output_dtype;
  ASSERT_EQ(response.output().data().size(),
            static_cast<size_t>(ref_out.size()) * DTypeSize(out_dtype));
  for (int64_t i = 0; i < ref_out.size(); ++i) {
    const float got =
        LoadAsFloat(response.output().data().data(), out_dtype, i);
    const float want = ref_out.at(i);
    EXPECT_NEAR(got, want, tolerance * (1.0f + std::fabs(want)))
        << "output[" << i << "]";
  }
  if (!decoded->return_weights) return;
  ASSERT_EQ(response.weights().data().size(),
            static_cast<size_t>(ref_w.size()) * 4);
  for (int64_t i = 0; i < ref_w.size(); ++i) {
    const float got =
        LoadAsFloat(response.weights().data().data(), DType::kFloat32, i);
    EXPECT_NEAR(got, ref_w.at(i), tolerance * (1.0f + std::fabs(ref_w.at(i))))
        << "weights[" << i << "]";
  }
}

TEST_F(RequestCodecTest, RoundTripBhldF32WithEveryMaskPartAndWeights) {
  v1::AttendRequest request = ValidRequest(v1::BHLD);
  AddEveryMaskPart(&request);
  request.set_return_weights(true);
  ExpectRoundTripMatchesReference(*engine_, request, 1e-5f);
}

TEST_F(RequestCodecTest, RoundTripBlhdBf16) {
  // GQA, batch 2 and an odd shape so a wrong output stride would show.
  v1::AttendRequest request;
  request.set_layout(v1::BLHD);
  const DType bf16 = DType::kBFloat16;
  ToWire(TestTensor::Random(bf16, {2, 5, 4, 8}, 11), request.mutable_query());
  ToWire(TestTensor::Random(bf16, {2, 7, 2, 8}, 12), request.mutable_key());
  ToWire(TestTensor::Random(bf16, {2, 7, 2, 6}, 13), request.mutable_value());
  request.mutable_mask()->set_causal(true);
  request.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
  request.mutable_mask()->add_key_lengths(7);
  request.mutable_mask()->add_key_lengths(3);
  ExpectRoundTripMatchesReference(*engine_, request, 2e-2f);
}

TEST_F(RequestCodecTest, RoundTripBlhdF16ToF32WithWeightsAndFloatMask) {
  v1::AttendRequest request;
  request.set_layout(v1::BLHD);
  request.set_output_dtype(v1::FLOAT32);
  request.set_return_weights(true);
  const DType f16 = DType::kFloat16;
  ToWire(TestTensor::Random(f16, {1, 3, 2, 4}, 21), request.mutable_query());
  ToWire(TestTensor::Random(f16, {1, 5, 2, 4}, 22), request.mutable_key());
  ToWire(TestTensor::Random(f16, {1, 5, 2, 4}, 23), request.mutable_value());
  ToWire(TestTensor::Random(DType::kFloat32, {2, 1, 5}, 24, -2.0f, 0.0f),
         request.mutable_mask()->mutable_explicit_mask());
  ExpectRoundTripMatchesReference(*engine_, request, 2e-2f);
}

// ---- Long-sequence variants: block-sparse layouts, linear and LSH attention.

TEST_F(RequestCodecTest, DecodesBlockSparse) {
  v1::AttendRequest request = ValidRequest();
  v1::BlockSparse* bs = request.mutable_mask()->mutable_block_sparse();
  bs->set_block_size(2);
  bs->set_local_left(1);
  bs->set_stride(2);
  bs->set_stride_pattern(v1::FIXED);
  bs->set_random_blocks(1);
  bs->set_seed(99);
  bs->add_global_tokens(0);
  bs->add_global_tokens(3);
  ToWire(TestTensor::FromFloats(DType::kBool, {2, 2}, {1, 0, 0, 1}),
         bs->mutable_block_mask());
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& spec = decoded->inputs.mask.block_sparse;
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->block_size, 2);
  EXPECT_EQ(spec->local_left, 1);
  EXPECT_FALSE(spec->local_right.has_value());
  EXPECT_EQ(spec->stride, 2);
  EXPECT_EQ(spec->stride_pattern, StridePattern::kFixed);
  EXPECT_EQ(spec->random_blocks, 1);
  EXPECT_EQ(spec->seed, 99u);
  EXPECT_THAT(spec->global_tokens, ::testing::ElementsAre(0, 3));
  ASSERT_TRUE(spec->block_mask.has_value());
  EXPECT_EQ(spec->block_mask->dtype, DType::kBool);
  EXPECT_LE(decoded->plan.shape.flops, decoded->plan.shape.dense_flops());
}

TEST_F(RequestCodecTest, BlockSparseMalformedFields) {
  v1::AttendRequest request = ValidRequest();
  v1::BlockSparse* bs = request.mutable_mask()->mutable_block_sparse();
  bs->set_block_size(2);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse: the layout has no "
                                 "component")));
  bs->set_local_right(0);
  EXPECT_TRUE(Decode(request).ok());
  bs->set_stride_pattern(static_cast<v1::StridePattern>(7));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.stride_pattern: unknown "
                                 "value 7 (expected STRIDED = 1 or FIXED = "
                                 "2)")));
  bs->set_stride_pattern(v1::STRIDED);
  bs->set_block_size(0);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.block_size: must be in "
                                 "[1, 4096], got 0")));
  bs->set_block_size(2);
  ToWire(TestTensor(DType::kFloat32, {2, 2}), bs->mutable_block_mask());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.block_mask.dtype: FLOAT32 "
                                 "is not supported (expected BOOL)")));
  ToWire(TestTensor(DType::kBool, {2, 2}), bs->mutable_block_mask());
  bs->mutable_block_mask()->set_data("x");
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.block_mask")));
  ToWire(TestTensor(DType::kBool, {2, 3}), bs->mutable_block_mask());
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.block_mask: shape [2, 3] "
                                 "does not match [2, 2]")));
  bs->clear_block_mask();
  bs->add_global_tokens(2);
  bs->add_global_tokens(1);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.block_sparse.global_tokens[1]: 1 does "
                                 "not exceed the previous entry 2")));
}

TEST_F(RequestCodecTest, DecodesLinearAttention) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_linear()->set_feature_map(v1::FAVOR_PLUS);
  request.mutable_linear()->set_num_features(16);
  request.mutable_linear()->set_seed(5);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.method, AttentionMethod::kLinear);
  EXPECT_EQ(decoded->inputs.linear.feature_map, FeatureMap::kFavorPlus);
  EXPECT_EQ(decoded->inputs.linear.num_features, 16);
  EXPECT_EQ(decoded->inputs.linear.seed, 5u);
  request.mutable_linear()->set_feature_map(v1::RELU);
  decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.linear.feature_map, FeatureMap::kRelu);
}

TEST_F(RequestCodecTest, LinearAttentionMalformedFields) {
  v1::AttendRequest request = ValidRequest();
  request.mutable_linear();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("linear.feature_map: missing (expected "
                                 "ELU_PLUS_ONE = 1, RELU = 2 or FAVOR_PLUS = "
                                 "3)")));
  request.mutable_linear()->set_feature_map(static_cast<v1::FeatureMap>(9));
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("linear.feature_map: unknown value 9")));
  request.mutable_linear()->set_feature_map(v1::FAVOR_PLUS);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("linear.num_features: must be in [1, 4096] "
                                 "for FAVOR+, got 0")));
  request.mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
  request.mutable_mask()->add_alibi_slopes(0.5f);
  request.mutable_mask()->add_alibi_slopes(0.5f);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.alibi_slopes: ALiBi cannot be "
                                 "linearised")));
}

// B1 Hq2 L3 D2 with value [B, Hq, L, D] and no key.
v1::AttendRequest ValidLshRequest() {
  v1::AttendRequest request = ValidRequest();
  request.clear_key();
  ToWire(TestTensor::Random(DType::kFloat32, {kB, kHq, kLq, kD}, 3),
         request.mutable_value());
  v1::LshAttention* lsh = request.mutable_lsh();
  lsh->set_num_hashes(2);
  lsh->set_num_buckets(4);
  lsh->set_chunk_size(2);
  lsh->set_seed(11);
  return request;
}

TEST_F(RequestCodecTest, DecodesLshAttention) {
  const v1::AttendRequest request = ValidLshRequest();
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.method, AttentionMethod::kLsh);
  EXPECT_EQ(decoded->inputs.lsh.num_hashes, 2);
  EXPECT_EQ(decoded->inputs.lsh.num_buckets, 4);
  EXPECT_EQ(decoded->inputs.lsh.chunk_size, 2);
  EXPECT_EQ(decoded->inputs.lsh.seed, 11u);
  EXPECT_EQ(decoded->plan.shape.k_len, kLq);
  EXPECT_EQ(decoded->plan.shape.kv_heads, kHq);
}

TEST_F(RequestCodecTest, LshAttentionMalformedFields) {
  v1::AttendRequest request = ValidLshRequest();
  *request.mutable_key() = ValidRequest().key();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key: LSH attention shares queries and keys "
                                 "(Reformer's shared-QK); send no key")));
  request = ValidLshRequest();
  *request.mutable_value() = ValidRequest().value();
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("value: LSH attention takes its keys from the "
                                 "queries")));
  request = ValidLshRequest();
  request.mutable_lsh()->set_num_hashes(0);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lsh.num_hashes: must be in [1, 64], got 0")));
  request = ValidLshRequest();
  request.mutable_lsh()->set_num_buckets(3);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lsh.num_buckets: must be 1 or even in [2, "
                                 "4096], got 3")));
  request = ValidLshRequest();
  request.mutable_lsh()->set_chunk_size(0);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lsh.chunk_size: must be in [1, 65536], got "
                                 "0")));
  request = ValidLshRequest();
  request.mutable_mask()->set_window_left(1);
  EXPECT_THAT(DecodeStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mask.window_left/window_right: a sliding "
                                 "window is not supported by LSH attention")));
}

// The plan names the kernel that will run, which the metrics label and the
// batching key read: core's rule, flash for a block-sparse layout where the
// rule says decode, and the method's own kernel for linear and LSH attention.
TEST(RequestCodecPlanTest, NamesTheKernelThatRuns) {
  auto engine = AttentionEngine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const RequestLimits limits;
  auto plan_of = [&](const v1::AttendRequest& request) {
    absl::StatusOr<DecodedRequest> decoded =
        DecodeRequest(request, **engine, limits);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    return decoded.ok() ? decoded->plan.kernel : KernelPath::kAuto;
  };
  // One query row against 2048 keys: the decode shape.
  v1::AttendRequest request;
  ToWire(TestTensor::Random(DType::kFloat32, {1, 2, 1, 8}, 1),
         request.mutable_query());
  ToWire(TestTensor::Random(DType::kFloat32, {1, 2, 2048, 8}, 2),
         request.mutable_key());
  ToWire(TestTensor::Random(DType::kFloat32, {1, 2, 2048, 8}, 3),
         request.mutable_value());
  EXPECT_EQ(plan_of(request), KernelPath::kDecode);

  v1::AttendRequest sparse = request;
  sparse.mutable_mask()->mutable_block_sparse()->set_block_size(64);
  sparse.mutable_mask()->mutable_block_sparse()->set_local_left(2);
  EXPECT_EQ(plan_of(sparse), KernelPath::kFlash);

  v1::AttendRequest weights = request;
  weights.set_return_weights(true);
  EXPECT_EQ(plan_of(weights), KernelPath::kMaterialized);

  v1::AttendRequest linear = request;
  linear.mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
  EXPECT_EQ(plan_of(linear), KernelPath::kLinear);

  v1::AttendRequest lsh = request;
  lsh.clear_key();
  lsh.mutable_lsh()->set_num_hashes(1);
  lsh.mutable_lsh()->set_num_buckets(2);
  lsh.mutable_lsh()->set_chunk_size(64);
  ToWire(TestTensor::Random(DType::kFloat32, {1, 2, 2048, 8}, 4),
         lsh.mutable_query());
  EXPECT_EQ(plan_of(lsh), KernelPath::kLsh);
}

}  // namespace
}  // namespace attnserve::server
