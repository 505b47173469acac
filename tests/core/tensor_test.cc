#include "core/tensor.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(TensorTest, DTypeSizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeName(DType::kFloat32), "f32");
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bf16");
  EXPECT_EQ(DTypeName(DType::kFloat16), "f16");
  EXPECT_EQ(DTypeName(DType::kBool), "bool");
}

TEST(TensorTest, ShapeString) {
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({7}), "[7]");
  EXPECT_EQ(ShapeString({2, 8, 128, 64}), "[2, 8, 128, 64]");
  EXPECT_EQ(ShapeString({0, -1}), "[0, -1]");
}

TEST(TensorTest, ContiguousStrides) {
  EXPECT_THAT(ContiguousStrides({2, 3, 4, 5}), ElementsAre(60, 20, 5, 1));
  EXPECT_THAT(ContiguousStrides({2, 3, 4}), ElementsAre(12, 4, 1, 0));
  EXPECT_THAT(ContiguousStrides({9}), ElementsAre(1, 0, 0, 0));
  EXPECT_THAT(ContiguousStrides({}), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(ContiguousStrides({3, 0, 2}), ElementsAre(0, 2, 1, 0));
}

TEST(TensorTest, MakeTensorViewIsDenseRowMajor) {
  float data[24] = {};
  const TensorView v = MakeTensorView(data, DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(v.data, data);
  EXPECT_EQ(v.dtype, DType::kFloat32);
  EXPECT_EQ(v.rank, 3);
  EXPECT_THAT(v.dims(), ElementsAre(2, 3, 4));
  EXPECT_EQ(v.dim(1), 3);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.num_elements(), 24);
  EXPECT_TRUE(v.is_contiguous());

  const MutableTensorView m =
      MakeMutableTensorView(data, DType::kBFloat16, {4, 6});
  EXPECT_EQ(m.data, data);
  EXPECT_THAT(m.strides, ElementsAre(6, 1, 0, 0));
  EXPECT_TRUE(m.is_contiguous());
}

TEST(TensorTest, IsContiguous) {
  float data[64] = {};
  TensorView v = MakeTensorView(data, DType::kFloat32, {2, 3, 4});
  ASSERT_TRUE(v.is_contiguous());

  TensorView transposed = v;  // [2, 4, 3] seen through the [2, 3, 4] memory
  transposed.shape = {2, 4, 3, 0};
  transposed.strides = {12, 1, 4, 0};
  EXPECT_FALSE(transposed.is_contiguous());

  TensorView padded_rows = v;  // rows of 4 in rows of 5
  padded_rows.strides = {15, 5, 1, 0};
  EXPECT_FALSE(padded_rows.is_contiguous());

  TensorView strided_last = v;
  strided_last.strides = {24, 8, 2, 0};
  EXPECT_FALSE(strided_last.is_contiguous());

  // The stride of a size-1 dimension is never used, so it does not matter.
  TensorView unit = MakeTensorView(data, DType::kFloat32, {2, 1, 4});
  unit.strides[1] = 12345;
  EXPECT_TRUE(unit.is_contiguous());

  EXPECT_TRUE(MakeTensorView(data, DType::kFloat32, {}).is_contiguous());
  EXPECT_TRUE(MakeTensorView(data, DType::kFloat32, {0, 5}).is_contiguous());
}

TEST(TensorTest, FromBytesViewsDenseTensor) {
  float data[6] = {};
  const absl::StatusOr<TensorView> v =
      TensorViewFromBytes("query", data, sizeof data, DType::kFloat32, {2, 3});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data, data);
  EXPECT_EQ(v->dtype, DType::kFloat32);
  EXPECT_EQ(v->rank, 2);
  EXPECT_THAT(v->dims(), ElementsAre(2, 3));
  EXPECT_THAT(v->strides, ElementsAre(3, 1, 0, 0));
}

TEST(TensorTest, FromBytesWrongSizeNamesEverything) {
  uint16_t data[8] = {};
  const absl::StatusOr<TensorView> v =
      TensorViewFromBytes("key", data, 10, DType::kBFloat16, {2, 3});
  EXPECT_THAT(v.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("key: "), HasSubstr("10 bytes"),
                             HasSubstr("[2, 3]"), HasSubstr("bf16"),
                             HasSubstr("expected 12 bytes"))));
  EXPECT_THAT(
      TensorViewFromBytes("key", data, 14, DType::kBFloat16, {2, 3}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("14 bytes do not match shape [2, 3] of bf16 "
                         "(expected 12 bytes)")));
}

TEST(TensorTest, FromBytesRejectsRankAboveFour) {
  float data[1] = {};
  EXPECT_THAT(
      TensorViewFromBytes("mask", data, 4, DType::kFloat32, {1, 1, 1, 1, 1})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("mask: rank 5 exceeds the maximum 4"),
                     HasSubstr("[1, 1, 1, 1, 1]"))));
  EXPECT_TRUE(
      TensorViewFromBytes("mask", data, 4, DType::kFloat32, {1, 1, 1, 1}).ok());
}

TEST(TensorTest, FromBytesRejectsNegativeDimension) {
  EXPECT_THAT(
      TensorViewFromBytes("value", nullptr, 0, DType::kFloat32, {2, -1, 3})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("value: negative dimension in shape [2, -1, 3]")));
  // A zero earlier in the shape does not hide a negative dimension.
  EXPECT_THAT(TensorViewFromBytes("value", nullptr, 0, DType::kFloat32, {0, -4})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("negative dimension")));
}

TEST(TensorTest, FromBytesRejectsElementCountOverflow) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_THAT(
      TensorViewFromBytes("query", nullptr, 0, DType::kFloat32, {big, big})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("query: element count of shape [1099511627776, "
                         "1099511627776] overflows")));
  // Elements fit in int64 but their bytes do not.
  EXPECT_THAT(
      TensorViewFromBytes("query", nullptr, 0, DType::kFloat32,
                          {kInt64Max / 4 + 1})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  EXPECT_THAT(
      TensorViewFromBytes("query", nullptr, 0, DType::kBool,
                          {2, 2, kInt64Max / 4 + 1})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  // The largest count that fits is a size mismatch, not an overflow.
  EXPECT_THAT(
      TensorViewFromBytes("query", nullptr, 0, DType::kFloat32, {kInt64Max / 4})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("bytes do not match")));
}

// A zero dimension makes the element count 0, but the view's strides are still
// products of the other dimensions and must not overflow int64
// (ContiguousStrides would multiply 4 * 2^62 here, signed overflow that UBSan
// aborts on).
TEST(TensorTest, FromBytesRejectsZeroSizeShapeWhoseStridesOverflow) {
  const int64_t huge = int64_t{1} << 62;
  EXPECT_THAT(
      TensorViewFromBytes("query", nullptr, 0, DType::kBool, {0, huge, 4})
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(TensorTest, FromBytesAcceptsZeroSize) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{0}, std::vector<int64_t>{2, 0, 3},
        std::vector<int64_t>{1, 1, 0, 64}}) {
    const absl::StatusOr<TensorView> v =
        TensorViewFromBytes("value", nullptr, 0, DType::kFloat16, shape);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->num_elements(), 0);
    EXPECT_THAT(v->dims(), ElementsAreArray(shape));
  }
}

TEST(TensorTest, FromBytesAcceptsScalar) {
  float data = 2.0f;
  const absl::StatusOr<TensorView> v =
      TensorViewFromBytes("scale", &data, 4, DType::kFloat32, {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->rank, 0);
  EXPECT_EQ(v->num_elements(), 1);
}

TEST(TensorTest, FromBytesAcceptsUnalignedData) {
  alignas(8) unsigned char bytes[1 + 3 * 4] = {};
  const absl::StatusOr<TensorView> v =
      TensorViewFromBytes("query", bytes + 1, 12, DType::kFloat32, {3});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data, bytes + 1);
}

}  // namespace
}  // namespace attnserve
