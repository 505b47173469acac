#include "client/request_builder.h"

#include <cstdint>
#include <string>
#include <vector>

#include "client/tensors/wire_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> Shape(const v1::Tensor& t) {
  return {t.shape().begin(), t.shape().end()};
}

TEST(UniformBytesTest, IsDeterministicAndInRange) {
  const std::string a = UniformBytes(v1::FLOAT32, 1000, 42, 0);
  EXPECT_EQ(a, UniformBytes(v1::FLOAT32, 1000, 42, 0));
  EXPECT_NE(a, UniformBytes(v1::FLOAT32, 1000, 42, 1));
  EXPECT_NE(a, UniformBytes(v1::FLOAT32, 1000, 43, 0));
  // A prefix of a longer draw: value i depends only on (seed, stream, i).
  EXPECT_EQ(UniformBytes(v1::FLOAT32, 10, 42, 0), a.substr(0, 40));

  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  t.add_shape(1000);
  t.set_data(a);
  double sum = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const float x = ElementAsFloat(t, i);
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
  }
  EXPECT_NEAR(sum / 1000, 0.0, 0.1);
  EXPECT_EQ(UniformBytes(v1::BFLOAT16, 7, 1, 0).size(), 14u);
  EXPECT_EQ(UniformBytes(v1::FLOAT16, 7, 1, 0).size(), 14u);
}

TEST(FillRandomInputsTest, ShapesFollowTheLayoutAndDefaults) {
  RandomInputs random;
  random.batch = 2;
  random.heads = 4;
  random.q_len = 3;
  random.head_dim = 8;
  random.dtype = v1::BFLOAT16;
  v1::AttendRequest request;
  FillRandomInputs(random, v1::BHLD, &request);
  EXPECT_THAT(Shape(request.query()), ElementsAre(2, 4, 3, 8));
  EXPECT_THAT(Shape(request.key()), ElementsAre(2, 4, 3, 8));
  EXPECT_THAT(Shape(request.value()), ElementsAre(2, 4, 3, 8));
  EXPECT_EQ(request.query().dtype(), v1::BFLOAT16);
  EXPECT_EQ(request.query().data().size(), 2u * 4 * 3 * 8 * 2);

  random.kv_heads = 2;
  random.k_len = 5;
  random.value_dim = 16;
  FillRandomInputs(random, v1::BLHD, &request);
  EXPECT_THAT(Shape(request.query()), ElementsAre(2, 3, 4, 8));
  EXPECT_THAT(Shape(request.key()), ElementsAre(2, 5, 2, 8));
  EXPECT_THAT(Shape(request.value()), ElementsAre(2, 5, 2, 16));
  // Query and key come from different streams of the same seed.
  EXPECT_NE(request.query().data().substr(0, 16),
            request.key().data().substr(0, 16));
}

TEST(ValidateRandomInputsTest, NamesTheFlag) {
  RandomInputs random;
  EXPECT_TRUE(ValidateRandomInputs(random, int64_t{1} << 29).ok());
  random.k_len = -2;
  EXPECT_THAT(ValidateRandomInputs(random, int64_t{1} << 29),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--lk must be >= 0, got -2")));
  random = RandomInputs();
  random.q_len = 1 << 20;
  EXPECT_THAT(ValidateRandomInputs(random, int64_t{1} << 29),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("would take 6442450944 bytes, above "
                                 "--max_message_bytes = 536870912")));
  random.batch = int64_t{1} << 40;
  EXPECT_EQ(RandomInputBytes(random), -1);
  EXPECT_THAT(ValidateRandomInputs(random, int64_t{1} << 29),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 2^63")));
}

TEST(ApplyCallOptionsTest, SetsAndClearsEveryField) {
  v1::AttendRequest request;
  CallOptions call;
  call.layout = v1::BLHD;
  call.causal = true;
  call.alignment = v1::BOTTOM_RIGHT;
  call.window_left = 0;
  call.key_lengths = {3, 5};
  call.scale = 0.25f;
  call.return_weights = true;
  call.output_dtype = v1::FLOAT16;
  ApplyCallOptions(call, &request);
  EXPECT_EQ(request.layout(), v1::BLHD);
  EXPECT_TRUE(request.mask().causal());
  EXPECT_EQ(request.mask().alignment(), v1::BOTTOM_RIGHT);
  // A window of 0 is set (only the diagonal), not left unbounded.
  EXPECT_TRUE(request.mask().has_window_left());
  EXPECT_EQ(request.mask().window_left(), 0);
  EXPECT_FALSE(request.mask().has_window_right());
  EXPECT_THAT(request.mask().key_lengths(), ElementsAre(3, 5));
  EXPECT_TRUE(request.has_scale());
  EXPECT_EQ(request.scale(), 0.25f);
  EXPECT_TRUE(request.return_weights());
  EXPECT_EQ(request.output_dtype(), v1::FLOAT16);

  ApplyCallOptions(CallOptions(), &request);
  EXPECT_FALSE(request.mask().has_window_left());
  EXPECT_FALSE(request.has_scale());
  EXPECT_TRUE(request.mask().key_lengths().empty());
  EXPECT_EQ(request.output_dtype(), v1::DATA_TYPE_UNSPECIFIED);
}

TEST(ApplyCallOptionsTest, SetsAndClearsTheVariants) {
  v1::AttendRequest request;
  FillRandomInputs(RandomInputs(), v1::BHLD, &request);
  CallOptions call;
  call.block_sparse.emplace();
  call.block_sparse->set_block_size(16);
  call.block_sparse->set_stride(2);
  call.linear.emplace();
  call.linear->set_feature_map(v1::RELU);
  ApplyCallOptions(call, &request);
  EXPECT_EQ(request.mask().block_sparse().block_size(), 16);
  EXPECT_EQ(request.mask().block_sparse().stride(), 2);
  EXPECT_EQ(request.method_case(), v1::AttendRequest::kLinear);
  EXPECT_EQ(request.linear().feature_map(), v1::RELU);
  EXPECT_TRUE(request.has_key());

  // LSH takes its keys from the queries: the key goes.
  call.linear.reset();
  call.lsh.emplace();
  call.lsh->set_num_hashes(2);
  ApplyCallOptions(call, &request);
  EXPECT_EQ(request.method_case(), v1::AttendRequest::kLsh);
  EXPECT_EQ(request.lsh().num_hashes(), 2);
  EXPECT_FALSE(request.has_key());

  ApplyCallOptions(CallOptions(), &request);
  EXPECT_FALSE(request.mask().has_block_sparse());
  EXPECT_EQ(request.method_case(), v1::AttendRequest::METHOD_NOT_SET);
}

TEST(FillModelRequestTest, HiddenMemoryPositionsAndCallOptions) {
  RandomInputs random;
  random.batch = 2;
  random.q_len = 3;
  random.dtype = v1::BFLOAT16;
  random.seed = 5;
  ModelSpec model;
  model.name = "mha_post";
  model.memory_len = 4;
  model.position_offset = 7;
  CallOptions call;
  call.causal = true;
  call.key_lengths = {2, 4};
  call.return_weights = true;
  call.output_dtype = v1::FLOAT32;
  v1::ModelRequest request;
  FillModelRequest(random, model, 64, call, &request);
  EXPECT_EQ(request.model(), "mha_post");
  EXPECT_EQ(request.hidden().dtype(), v1::BFLOAT16);
  EXPECT_THAT(Shape(request.hidden()), ElementsAre(2, 3, 64));
  EXPECT_EQ(request.hidden().data(),
            UniformBytes(v1::BFLOAT16, 2 * 3 * 64, 5, 0));
  ASSERT_TRUE(request.has_memory());
  EXPECT_THAT(Shape(request.memory()), ElementsAre(2, 4, 64));
  EXPECT_EQ(request.memory().data(),
            UniformBytes(v1::BFLOAT16, 2 * 4 * 64, 5, 1));
  ASSERT_TRUE(request.has_positions());
  EXPECT_EQ(request.positions().dtype(), v1::INT32);
  EXPECT_THAT(Shape(request.positions()), ElementsAre(2, 3));
  // 7, 8, 9 in each row, little-endian int32.
  const std::string row("\x07\0\0\0\x08\0\0\0\x09\0\0\0", 12);
  EXPECT_EQ(request.positions().data(), row + row);
  EXPECT_TRUE(request.mask().causal());
  EXPECT_THAT(request.mask().key_lengths(), ElementsAre(2, 4));
  EXPECT_TRUE(request.return_weights());
  EXPECT_EQ(request.output_dtype(), v1::FLOAT32);

  // Self-attention without positions: neither is sent.
  model.memory_len = 0;
  model.position_offset.reset();
  FillModelRequest(random, model, 64, CallOptions(), &request);
  EXPECT_FALSE(request.has_memory());
  EXPECT_FALSE(request.has_positions());
  EXPECT_FALSE(request.mask().causal());
  EXPECT_FALSE(request.return_weights());
}

TEST(ValidateModelSpecTest, NamesTheFlag) {
  RandomInputs random;
  ModelSpec model;
  model.name = "m";
  EXPECT_TRUE(ValidateModelSpec(random, model).ok());
  model.memory_len = -1;
  EXPECT_THAT(ValidateModelSpec(random, model),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--memory_len must be >= 0, got -1")));
  model.memory_len = 0;
  random.q_len = 10;
  model.position_offset = int64_t{2147483647} - 9;
  EXPECT_TRUE(ValidateModelSpec(random, model).ok());
  model.position_offset = int64_t{2147483647} - 8;
  EXPECT_THAT(ValidateModelSpec(random, model),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--position_offset 2147483639 with --lq 10 "
                                 "gives positions beyond 2147483647")));
}

TEST(ValidateModelInputBytesTest, CountsHiddenAndMemory) {
  RandomInputs random;
  random.batch = 2;
  random.q_len = 3;
  ModelSpec model;
  model.memory_len = 5;
  EXPECT_EQ(ModelInputBytes(random, model, 64), 2 * 8 * 64 * 4);
  EXPECT_TRUE(ValidateModelInputBytes(random, model, 64, 4096).ok());
  EXPECT_THAT(ValidateModelInputBytes(random, model, 64, 4095),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hidden states and memory would take 4096 "
                                 "bytes, above --max_message_bytes = 4095")));
  model.memory_len = int64_t{1} << 62;
  EXPECT_EQ(ModelInputBytes(random, model, 64), -1);
}

TEST(WireTensorTest, ConvertsFromAndToNpy) {
  NpyArray array{NpyDType::kUInt8, {2, 2}, std::string("\x00\x02\x01\x00", 4)};
  v1::Tensor mask = TensorFromNpy(array);
  EXPECT_EQ(mask.dtype(), v1::BOOL);
  EXPECT_EQ(wire::ShapeText(mask), "[2, 2]");

  v1::Tensor bf16;
  bf16.set_dtype(v1::BFLOAT16);
  bf16.add_shape(2);
  bf16.set_data(std::string("\x80\x3f\x00\xc0", 4));  // 1, -2
  absl::StatusOr<NpyArray> npy = NpyFromTensor(bf16);
  ASSERT_TRUE(npy.ok()) << npy.status();
  EXPECT_EQ(npy->dtype, NpyDType::kBFloat16);
  EXPECT_EQ(ElementAsFloat(bf16, 1), -2.0f);
  const TensorStats stats = ComputeStats(bf16);
  EXPECT_EQ(stats.mean, -0.5);
  EXPECT_EQ(stats.abs_max, 2.0);

  bf16.set_data("x");
  EXPECT_THAT(NpyFromTensor(bf16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor data is 1 bytes")));
}

}  // namespace
}  // namespace attnserve::client
