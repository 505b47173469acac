// The long-sequence variants through a real attnserve process: block-sparse
// layouts, linear and LSH attention against the core reference computed here
// from the same tensors, the FLOPs the server counts for them, and their
// errors as a caller sees them.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/server_process.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"
#include "wire/dtype.h"

namespace attnserve {
namespace {

using ::attnserve::testing::MetricSample;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::HasSubstr;

class VariantsE2eTest : public ::attnserve::testing::ServerTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer({"--workers=1"}); }

  grpc::Status Attend(const v1::AttendRequest& request,
                      v1::AttendResponse* response) {
    auto stub = v1::AttentionService::NewStub(channel());
    grpc::ClientContext context;
    return stub->Attend(&context, request, response);
  }

  // Sends `request` and compares its output with the reference of `inputs`
  // (the same tensors and options, built by hand).
  void ExpectMatchesReference(const v1::AttendRequest& request,
                              const AttentionInputs& inputs,
                              std::vector<int64_t> out_shape) {
    v1::AttendResponse response;
    const grpc::Status rpc = Attend(request, &response);
    ASSERT_TRUE(rpc.ok()) << rpc.error_message();
    TestTensor ref(DType::kFloat32, out_shape);
    ASSERT_TRUE(
        ReferenceAttention(inputs, {ref.mutable_view(), std::nullopt}).ok());
    ASSERT_EQ(response.output().data().size(), ref.size() * sizeof(float));
    const float* got =
        reinterpret_cast<const float*>(response.output().data().data());
    for (int64_t i = 0; i < ref.size(); ++i) {
      ASSERT_NEAR(got[i], ref.at(i), 1e-4f * (1 + std::fabs(ref.at(i))))
          << "output[" << i << "]";
    }
    auto engine = AttentionEngine::Create(EngineOptions{});
    ASSERT_TRUE(engine.ok());
    auto plan = (*engine)->Validate(inputs);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(response.timing().flops(), plan->shape.flops);
  }
};

TEST_F(VariantsE2eTest, BlockSparseMatchesTheReferenceAndCountsKeptFlops) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 2, 64, 16}, 1);
  const TestTensor k = TestTensor::Random(DType::kFloat32, {1, 2, 64, 16}, 2);
  const TestTensor v = TestTensor::Random(DType::kFloat32, {1, 2, 64, 16}, 3);
  v1::AttendRequest request;
  ToWire(q, request.mutable_query());
  ToWire(k, request.mutable_key());
  ToWire(v, request.mutable_value());
  request.mutable_mask()->set_causal(true);
  v1::BlockSparse* bs = request.mutable_mask()->mutable_block_sparse();
  bs->set_block_size(8);
  bs->set_local_left(1);
  bs->set_stride(3);
  bs->set_random_blocks(1);
  bs->set_seed(5);
  bs->add_global_tokens(0);
  const std::vector<int32_t> globals = {0};
  AttentionInputs in;
  in.query = q.view();
  in.key = k.view();
  in.value = v.view();
  in.mask.causal = true;
  BlockSparseSpec spec;
  spec.block_size = 8;
  spec.local_left = 1;
  spec.stride = 3;
  spec.random_blocks = 1;
  spec.seed = 5;
  spec.global_tokens = globals;
  in.mask.block_sparse = spec;
  ExpectMatchesReference(request, in, {1, 2, 64, 16});
}

TEST_F(VariantsE2eTest, LinearAttentionMatchesTheReference) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 40, 4, 16}, 4);
  const TestTensor k = TestTensor::Random(DType::kFloat32, {1, 40, 2, 16}, 5);
  const TestTensor v = TestTensor::Random(DType::kFloat32, {1, 40, 2, 8}, 6);
  for (const v1::FeatureMap map : {v1::ELU_PLUS_ONE, v1::FAVOR_PLUS}) {
    v1::AttendRequest request;
    request.set_layout(v1::BLHD);
    ToWire(q, request.mutable_query());
    ToWire(k, request.mutable_key());
    ToWire(v, request.mutable_value());
    request.mutable_mask()->set_causal(true);
    request.mutable_mask()->add_key_lengths(33);
    request.mutable_linear()->set_feature_map(map);
    request.mutable_linear()->set_num_features(32);
    request.mutable_linear()->set_seed(9);
    const std::vector<int32_t> lengths = {33};
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = v.view();
    in.layout = Layout::kBLHD;
    in.mask.causal = true;
    in.mask.key_lengths = lengths;
    in.method = AttentionMethod::kLinear;
    in.linear.feature_map = map == v1::FAVOR_PLUS ? FeatureMap::kFavorPlus
                                                  : FeatureMap::kEluPlusOne;
    in.linear.num_features = 32;
    in.linear.seed = 9;
    ExpectMatchesReference(request, in, {1, 40, 4, 8});
  }
}

TEST_F(VariantsE2eTest, LshAttentionMatchesTheReference) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 2, 50, 16}, 7);
  const TestTensor v = TestTensor::Random(DType::kFloat32, {1, 2, 50, 8}, 8);
  v1::AttendRequest request;
  ToWire(q, request.mutable_query());
  ToWire(v, request.mutable_value());
  request.mutable_mask()->set_causal(true);
  v1::LshAttention* lsh = request.mutable_lsh();
  lsh->set_num_hashes(2);
  lsh->set_num_buckets(4);
  lsh->set_chunk_size(8);
  lsh->set_seed(3);
  AttentionInputs in;
  in.query = q.view();
  in.value = v.view();
  in.mask.causal = true;
  in.method = AttentionMethod::kLsh;
  in.lsh = {2, 4, 8, 3};
  ExpectMatchesReference(request, in, {1, 2, 50, 8});
}

// attnserve_compute_duration_seconds counts each call under the kernel that
// ran it: flash for a block-sparse layout even at a decode shape (one query
// row against 2048 keys), linear and lsh for those methods.
TEST_F(VariantsE2eTest, ComputeTimeIsCountedUnderTheKernelThatRan) {
  auto count = [&](const char* kernel) {
    return MetricSample(
        server(),
        absl::StrCat(R"(attnserve_compute_duration_seconds_count{kernel=")",
                     kernel, R"("})"));
  };
  const double flash = count("flash"), decode = count("decode"),
               linear = count("linear"), lsh = count("lsh");
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 2, 1, 16}, 1);
  const TestTensor kv =
      TestTensor::Random(DType::kFloat32, {1, 2, 2048, 16}, 2);
  v1::AttendRequest sparse;
  ToWire(q, sparse.mutable_query());
  ToWire(kv, sparse.mutable_key());
  ToWire(kv, sparse.mutable_value());
  sparse.mutable_mask()->mutable_block_sparse()->set_block_size(64);
  sparse.mutable_mask()->mutable_block_sparse()->set_local_left(1);
  v1::AttendRequest linear_request = sparse;
  linear_request.mutable_mask()->clear_block_sparse();
  linear_request.mutable_linear()->set_feature_map(v1::RELU);
  v1::AttendRequest lsh_request = linear_request;
  lsh_request.clear_linear();
  lsh_request.clear_key();
  ToWire(kv, lsh_request.mutable_query());
  lsh_request.mutable_lsh()->set_num_hashes(1);
  lsh_request.mutable_lsh()->set_num_buckets(2);
  lsh_request.mutable_lsh()->set_chunk_size(64);
  for (const v1::AttendRequest* r : {&sparse, &linear_request, &lsh_request}) {
    v1::AttendResponse response;
    const grpc::Status rpc = Attend(*r, &response);
    ASSERT_TRUE(rpc.ok()) << rpc.error_message();
  }
  EXPECT_EQ(count("flash"), flash + 1);
  EXPECT_EQ(count("decode"), decode);
  EXPECT_EQ(count("linear"), linear + 1);
  EXPECT_EQ(count("lsh"), lsh + 1);
}

TEST_F(VariantsE2eTest, ErrorsNameTheField) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 1, 4, 8}, 1);
  v1::AttendRequest request;
  ToWire(q, request.mutable_query());
  ToWire(q, request.mutable_key());
  ToWire(q, request.mutable_value());
  request.mutable_mask()->mutable_block_sparse()->set_block_size(2);
  v1::AttendResponse response;
  grpc::Status rpc = Attend(request, &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rpc.error_message(),
              HasSubstr("mask.block_sparse: the layout has no component"));
  request.mutable_mask()->clear_block_sparse();
  request.mutable_lsh()->set_num_hashes(1);
  rpc = Attend(request, &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rpc.error_message(),
              HasSubstr("key: LSH attention shares queries and keys"));
  request.clear_lsh();
  request.mutable_linear()->set_feature_map(v1::RELU);
  request.mutable_mask()->set_window_left(1);
  rpc = Attend(request, &response);
  EXPECT_EQ(rpc.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rpc.error_message(),
              HasSubstr("mask.window_left/window_right: a sliding window "
                        "cannot be linearised"));
}

}  // namespace
}  // namespace attnserve
