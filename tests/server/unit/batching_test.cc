// Dynamic batching's data path: which requests are compatible
// (AttendBatchKey), and that a batched run gives every member exactly the
// bytes a run of its own gives (RunAttendBatch).

#include "server/batching.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/request_codec.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;

struct Config {
  std::string name;
  DType dtype = DType::kFloat32;
  v1::Layout layout = v1::BHLD;
  int64_t hq = 2, hkv = 1, lq = 16, lk = 16, d = 64;
  bool causal = false;
  bool bottom_right = false;
  bool window = false;
  bool key_lengths = false;
  bool alibi = false;
  bool weights = false;
  v1::DataType output_dtype = v1::DATA_TYPE_UNSPECIFIED;
};

std::vector<int64_t> InLayout(v1::Layout layout, int64_t b, int64_t h,
                              int64_t l, int64_t d) {
  if (layout == v1::BLHD) return {b, l, h, d};
  return {b, h, l, d};
}

v1::AttendRequest MakeRequest(const Config& c, int64_t b, uint64_t seed) {
  v1::AttendRequest r;
  r.set_layout(c.layout);
  ToWire(
      TestTensor::Random(c.dtype, InLayout(c.layout, b, c.hq, c.lq, c.d), seed),
      r.mutable_query());
  ToWire(TestTensor::Random(c.dtype, InLayout(c.layout, b, c.hkv, c.lk, c.d),
                            seed + 1),
         r.mutable_key());
  ToWire(TestTensor::Random(c.dtype, InLayout(c.layout, b, c.hkv, c.lk, c.d),
                            seed + 2),
         r.mutable_value());
  v1::Mask* mask = r.mutable_mask();
  mask->set_causal(c.causal);
  if (c.bottom_right) mask->set_alignment(v1::BOTTOM_RIGHT);
  if (c.window) {
    mask->set_window_left(3);
    mask->set_window_right(1);
  }
  if (c.key_lengths) {
    for (int64_t i = 0; i < b; ++i) {
      mask->add_key_lengths(static_cast<int32_t>((seed * 7 + i * 5) % c.lk));
    }
  }
  if (c.alibi) {
    for (int64_t h = 0; h < c.hq; ++h) mask->add_alibi_slopes(0.5f / (h + 1));
  }
  r.set_return_weights(c.weights);
  r.set_output_dtype(c.output_dtype);
  return r;
}

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions alone;
    alone.num_threads = 1;
    auto a = AttentionEngine::Create(alone);
    ASSERT_TRUE(a.ok()) << a.status();
    alone_ = *std::move(a);
    // The batch on two threads, with no serial threshold: each member's rows
    // must not depend on how many threads share the run.
    EngineOptions batched;
    batched.num_threads = 2;
    auto b = AttentionEngine::Create(batched);
    ASSERT_TRUE(b.ok()) << b.status();
    batched_ = *std::move(b);
  }

  DecodedRequest Decode(const v1::AttendRequest& request) {
    absl::StatusOr<DecodedRequest> d = DecodeRequest(request, *alone_, limits_);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : DecodedRequest();
  }

  std::string Key(const v1::AttendRequest& request) {
    return AttendBatchKey(Decode(request));
  }

  std::unique_ptr<AttentionEngine> alone_, batched_;
  RequestLimits limits_;
};

TEST_F(BatchingTest, BatchedRunsAreBitIdenticalToRunsAlone) {
  std::vector<Config> configs;
  configs.push_back({"f32"});
  Config c;
  c = {"bf16_causal_key_lengths"};
  c.dtype = DType::kBFloat16;
  c.causal = true;
  c.key_lengths = true;
  configs.push_back(c);
  c = {"f16_blhd_gqa_window_alibi"};
  c.dtype = DType::kFloat16;
  c.layout = v1::BLHD;
  c.hq = 4;
  c.hkv = 2;
  c.window = true;
  c.alibi = true;
  configs.push_back(c);
  c = {"f32_weights_bottom_right"};
  c.weights = true;
  c.causal = true;
  c.bottom_right = true;
  c.lq = 8;
  c.lk = 24;
  configs.push_back(c);
  c = {"f32_many_query_blocks_to_bf16"};
  c.lq = 100;
  c.lk = 130;
  c.d = 32;
  c.output_dtype = v1::BFLOAT16;
  c.key_lengths = true;
  configs.push_back(c);

  for (const Config& config : configs) {
    SCOPED_TRACE(config.name);
    const std::vector<int64_t> batches = {1, 2, 1, 3};
    std::vector<v1::AttendRequest> requests;
    for (size_t i = 0; i < batches.size(); ++i) {
      requests.push_back(MakeRequest(config, batches[i], 10 * i + 1));
    }
    std::vector<DecodedRequest> decoded;
    for (const v1::AttendRequest& r : requests) decoded.push_back(Decode(r));
    const std::string key = AttendBatchKey(decoded[0]);
    ASSERT_FALSE(key.empty());
    std::vector<v1::AttendResponse> alone(requests.size());
    std::vector<v1::AttendResponse> batched(requests.size());
    std::vector<BatchedAttend> members;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(AttendBatchKey(decoded[i]), key);
      const AttentionOutputs outputs = PrepareResponse(decoded[i], &alone[i]);
      ASSERT_TRUE(alone_->Run(decoded[i].inputs, outputs).ok());
      members.push_back(BatchedAttend{&decoded[i], &batched[i]});
    }
    ASSERT_TRUE(RunAttendBatch(members, *batched_).ok());
    for (size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(batched[i].output().dtype(), alone[i].output().dtype());
      EXPECT_THAT(batched[i].output().shape(),
                  ::testing::ElementsAreArray(alone[i].output().shape()));
      // Bytewise: the kernels compute every batch row alone.
      EXPECT_TRUE(batched[i].output().data() == alone[i].output().data());
      EXPECT_EQ(batched[i].has_weights(), config.weights);
      EXPECT_TRUE(batched[i].weights().data() == alone[i].weights().data());
      EXPECT_THAT(batched[i].weights().shape(),
                  ::testing::ElementsAreArray(alone[i].weights().shape()));
      EXPECT_EQ(batched[i].timing().flops(), alone[i].timing().flops());
    }
  }
}

// Members of every shape, dtype and mask in one run: each is computed as its
// own run would compute it.
TEST_F(BatchingTest, AMixedBatchIsBitIdenticalToRunsAlone) {
  std::vector<Config> configs(3);
  configs[0] = {"f32"};
  configs[1] = {"bf16_causal"};
  configs[1].dtype = DType::kBFloat16;
  configs[1].causal = true;
  configs[2] = {"f32_weights"};
  configs[2].weights = true;
  configs[2].lq = 8;
  configs[2].lk = 24;
  std::vector<v1::AttendRequest> requests;
  for (size_t i = 0; i < configs.size(); ++i) {
    requests.push_back(MakeRequest(configs[i], 1 + i % 2, 7 * i + 3));
  }
  std::vector<DecodedRequest> decoded;
  for (const v1::AttendRequest& r : requests) decoded.push_back(Decode(r));
  std::vector<v1::AttendResponse> alone(requests.size());
  std::vector<v1::AttendResponse> batched(requests.size());
  std::vector<BatchedAttend> members;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(AttendBatchKey(decoded[i]), AttendBatchKey(decoded[0]));
    const AttentionOutputs outputs = PrepareResponse(decoded[i], &alone[i]);
    ASSERT_TRUE(alone_->Run(decoded[i].inputs, outputs).ok());
    members.push_back(BatchedAttend{&decoded[i], &batched[i]});
  }
  ASSERT_TRUE(RunAttendBatch(members, *batched_).ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(configs[i].name);
    EXPECT_TRUE(batched[i].output().data() == alone[i].output().data());
    EXPECT_TRUE(batched[i].weights().data() == alone[i].weights().data());
    EXPECT_EQ(batched[i].has_weights(), configs[i].weights);
  }
}

TEST_F(BatchingTest, KeyJoinsEverySoftmaxRequest) {
  const Config base{"base"};
  const std::string key = Key(MakeRequest(base, 1, 1));
  ASSERT_FALSE(key.empty());
  Config c = base;
  c.lq = 15;
  c.hq = 4;
  c.hkv = 2;
  c.dtype = DType::kBFloat16;
  c.causal = true;
  c.alibi = true;
  c.weights = true;
  EXPECT_EQ(Key(MakeRequest(c, 3, 2)), key);
  v1::AttendRequest masked = MakeRequest(base, 1, 1);
  ToWire(TestTensor(DType::kBool, {16, 16}),
         masked.mutable_mask()->mutable_explicit_mask());
  EXPECT_EQ(Key(masked), key);
}

TEST_F(BatchingTest, OtherKernelsAreNeverBatched) {
  const Config base{"base"};
  v1::AttendRequest linear = MakeRequest(base, 1, 1);
  linear.mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
  EXPECT_EQ(Key(linear), "");

  Config decode = base;  // few query rows against many keys: decode
  decode.lq = 1;
  decode.lk = 1024;
  decode.hq = 1;
  EXPECT_EQ(Key(MakeRequest(decode, 1, 1)), "");
}

// A member the engine refuses fails the whole run with its index; the
// service then computes each member alone.
TEST_F(BatchingTest, AFailedRunNamesTheMember) {
  const Config base{"base"};
  const v1::AttendRequest r1 = MakeRequest(base, 1, 1);
  const v1::AttendRequest r2 = MakeRequest(base, 1, 2);
  DecodedRequest d1 = Decode(r1), d2 = Decode(r2);
  d2.plan.weights = true;  // its response will have no weights tensor
  v1::AttendResponse a, b;
  const std::vector<BatchedAttend> members = {{&d1, &a}, {&d2, &b}};
  const absl::Status status = RunAttendBatch(members, *batched_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("calls[1]: weights"));
}

}  // namespace
}  // namespace attnserve::server
