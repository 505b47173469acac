// The double-precision oracle against hand-computed values and against itself
// under symmetries (layouts, GQA repeats, masks), and its validation errors.
// Long because every mask part has its own hand-checked case.

#include "core/reference.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::TestTensor;
using ::testing::ElementsAre;
using ::testing::FloatEq;
using ::testing::IsEmpty;
using ::testing::Pointwise;

constexpr DType kF32 = DType::kFloat32;
constexpr float kInf = std::numeric_limits<float>::infinity();

AttentionInputs MakeInputs(const TestTensor& q, const TestTensor& k,
                           const TestTensor& v, Layout layout = Layout::kBHLD) {
  AttentionInputs in;
  in.query = q.view();
  in.key = k.view();
  in.value = v.view();
  in.layout = layout;
  return in;
}

struct Result {
  TestTensor output;
  TestTensor weights;
};

// Runs the reference into NaN-filled output and weights, so that an element it
// fails to write shows.
absl::StatusOr<Result> RunReference(const AttentionInputs& in,
                                    DType output_dtype = kF32,
                                    bool with_weights = true) {
  const bool bhld = in.layout == Layout::kBHLD;
  const int64_t batch = in.query.shape[0];
  const int64_t q_heads = in.query.shape[bhld ? 1 : 2];
  const int64_t q_len = in.query.shape[bhld ? 2 : 1];
  const int64_t k_len = in.key.shape[bhld ? 2 : 1];
  const int64_t value_dim = in.value.shape[3];
  Result r;
  r.output = bhld
                 ? TestTensor(output_dtype, {batch, q_heads, q_len, value_dim})
                 : TestTensor(output_dtype, {batch, q_len, q_heads, value_dim});
  r.output.Fill(std::nanf(""));
  r.weights = TestTensor(kF32, {batch, q_heads, q_len, k_len});
  r.weights.Fill(std::nanf(""));
  AttentionOutputs out;
  out.output = r.output.mutable_view();
  if (with_weights) out.weights = r.weights.mutable_view();
  const absl::Status status = ReferenceAttention(in, out);
  if (!status.ok()) return status;
  return r;
}

// The keys each row of weights[b][h] gives a nonzero weight.
std::vector<std::vector<int64_t>> AttendedKeys(const TestTensor& weights,
                                               int64_t b, int64_t h) {
  std::vector<std::vector<int64_t>> rows(weights.shape()[2]);
  for (int64_t i = 0; i < weights.shape()[2]; ++i) {
    for (int64_t j = 0; j < weights.shape()[3]; ++j) {
      if (weights.at({b, h, i, j}) != 0.0f) rows[i].push_back(j);
    }
  }
  return rows;
}

struct Dims {
  int64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 1, k_len = 1,
          head_dim = 4, value_dim = 3;
};

// Runs BHLD attention with all-zero queries, so that every key a row may attend
// scores the same, and checks what that implies: the row's weights are 1/n on
// its n attended keys and its output is the mean of their values (zeros when n
// = 0). Returns the weights for AttendedKeys.
TestTensor RunUniform(const Dims& d, const MaskSpec& mask) {
  const TestTensor q(kF32, {d.batch, d.q_heads, d.q_len, d.head_dim});
  const TestTensor k = TestTensor::Random(
      kF32, {d.batch, d.kv_heads, d.k_len, d.head_dim}, /*seed=*/1);
  const TestTensor v = TestTensor::Random(
      kF32, {d.batch, d.kv_heads, d.k_len, d.value_dim}, /*seed=*/2);
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask = mask;
  absl::StatusOr<Result> r = RunReference(in);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return TestTensor();
  const int64_t group = d.q_heads / d.kv_heads;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.q_heads; ++h) {
      const std::vector<std::vector<int64_t>> keys =
          AttendedKeys(r->weights, b, h);
      for (int64_t i = 0; i < d.q_len; ++i) {
        const std::vector<int64_t>& row = keys[i];
        const double n = static_cast<double>(row.size());
        for (int64_t j : row) {
          EXPECT_EQ(r->weights.at({b, h, i, j}), static_cast<float>(1.0 / n))
              << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
        }
        for (int64_t c = 0; c < d.value_dim; ++c) {
          double sum = 0.0;
          for (int64_t j : row) sum += v.at({b, h / group, j, c});
          const float want = row.empty() ? 0.0f : static_cast<float>(sum / n);
          EXPECT_FLOAT_EQ(r->output.at({b, h, i, c}), want)
              << "b=" << b << " h=" << h << " i=" << i << " c=" << c;
        }
      }
    }
  }
  return std::move(r->weights);
}

TEST(ReferenceTest, HandComputedTwoByTwo) {
  // D = 1, so the default scale is 1 and row i scores key j with q_i * k_j.
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, 2});
  const TestTensor k = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, -1});
  const TestTensor v = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {10, 20});
  AttentionInputs in = MakeInputs(q, k, v);
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  // Row 0 scores (1, -1): p0 = e / (e + 1/e). Row 1 scores (2, -2).
  const double p0 = 1.0 / (1.0 + std::exp(-2.0));
  const double p1 = 1.0 / (1.0 + std::exp(-4.0));
  EXPECT_THAT(r->weights.ToFloats(),
              Pointwise(FloatEq(),
                        {static_cast<float>(p0), static_cast<float>(1 - p0),
                         static_cast<float>(p1), static_cast<float>(1 - p1)}));
  EXPECT_FLOAT_EQ(r->output.at(0), static_cast<float>(10 * p0 + 20 * (1 - p0)));
  EXPECT_FLOAT_EQ(r->output.at(1), static_cast<float>(10 * p1 + 20 * (1 - p1)));

  in.scale = 0.5f;  // row 0 scores (0.5, -0.5)
  r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  const double half = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_FLOAT_EQ(r->weights.at(0), static_cast<float>(half));
  EXPECT_FLOAT_EQ(r->output.at(0),
                  static_cast<float>(10 * half + 20 * (1 - half)));
}

// Gemma 2's soft-cap and gpt-oss's sinks by hand, on the same 2 × 2: the
// cap bends the scores before the float mask parts (here ALiBi) are added;
// the sink is one more term of the denominator, with no value.
TEST(ReferenceTest, HandComputedSoftcapAndSinks) {
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, 2});
  const TestTensor k = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, -1});
  const TestTensor v = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {10, 20});
  AttentionInputs in = MakeInputs(q, k, v);
  const std::vector<float> slopes = {0.25f};
  in.mask.alibi_slopes = slopes;
  in.softcap = 1.5f;
  const std::vector<float> sinks = {0.75f};
  in.sinks = sinks;
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < 2; ++i) {
    // Scores q_i · k_j = (i + 1) · (1, -1); ALiBi -0.25 · |i - j|.
    double t[2], sum = std::exp(0.75);
    for (int64_t j = 0; j < 2; ++j) {
      const double score = (i + 1) * (j == 0 ? 1.0 : -1.0);
      t[j] = 1.5 * std::tanh(score / 1.5) - 0.25 * std::abs(i - j);
      sum += std::exp(t[j]);
    }
    const double w0 = std::exp(t[0]) / sum, w1 = std::exp(t[1]) / sum;
    EXPECT_FLOAT_EQ(r->weights.at(2 * i), static_cast<float>(w0)) << i;
    EXPECT_FLOAT_EQ(r->weights.at(2 * i + 1), static_cast<float>(w1)) << i;
    EXPECT_FLOAT_EQ(r->output.at(i), static_cast<float>(10 * w0 + 20 * w1))
        << i;
  }
}

// T5's buckets: exact below half of a side's buckets, logarithmic up to
// max_distance, the last one past it; bidirectional keys after the query
// take the upper half; unidirectional ones share bucket 0.
TEST(ReferenceTest, RelativeBucketIsT5s) {
  RelativeBiasSpec bi;
  bi.num_buckets = 32;
  bi.max_distance = 128;
  bi.bidirectional = true;
  for (int64_t n = 0; n < 8; ++n) {
    EXPECT_EQ(RelativeBucket(bi, -n), n);
    if (n > 0) EXPECT_EQ(RelativeBucket(bi, n), 16 + n);
  }
  EXPECT_EQ(RelativeBucket(bi, 0), 0);
  EXPECT_EQ(RelativeBucket(bi, -127), 15);
  EXPECT_EQ(RelativeBucket(bi, -100000), 15);
  EXPECT_EQ(RelativeBucket(bi, 100000), 31);
  RelativeBiasSpec uni = bi;
  uni.bidirectional = false;
  EXPECT_EQ(RelativeBucket(uni, 5), 0);
  EXPECT_EQ(RelativeBucket(uni, -5), 5);
  EXPECT_EQ(RelativeBucket(uni, -15), 15);
  EXPECT_EQ(RelativeBucket(uni, -1000000), 31);
  // Distances where the logarithmic buckets change, as T5's PyTorch code
  // gives them (float32) for 32 buckets and distance 128.
  const std::vector<std::pair<int64_t, int32_t>> bidirectional = {
      {8, 8},   {11, 8},  {12, 9},  {15, 9},   {16, 10}, {22, 10},
      {23, 11}, {31, 11}, {32, 12}, {45, 12},  {46, 13}, {63, 13},
      {64, 14}, {90, 14}, {91, 15}, {127, 15}, {128, 15}};
  for (const auto& [a, b] : bidirectional) {
    EXPECT_EQ(RelativeBucket(bi, -a), b) << a;
    EXPECT_EQ(RelativeBucket(bi, a), 16 + b) << a;
  }
  const std::vector<std::pair<int64_t, int32_t>> unidirectional = {
      {16, 16}, {18, 16},  {19, 17},  {23, 18}, {24, 19}, {31, 21},
      {32, 21}, {53, 25},  {54, 25},  {63, 26}, {64, 26}, {89, 29},
      {90, 29}, {126, 31}, {127, 31}, {128, 31}};
  for (const auto& [a, b] : unidirectional) {
    EXPECT_EQ(RelativeBucket(uni, -a), b) << a;
  }
  // Non-decreasing in the distance, each bucket reached, and the logarithm
  // within one bucket of the exact real-number formula.
  int32_t last = 0;
  for (int64_t a = 0; a < 300; ++a) {
    const int32_t b = RelativeBucket(uni, -a);
    EXPECT_GE(b, last) << a;
    EXPECT_LE(b, last + 1) << a;
    last = b;
    if (a >= 16) {
      const double exact =
          16 + std::log(a / 16.0) / std::log(128 / 16.0) * (32 - 16);
      EXPECT_NEAR(b, std::min(31.0, std::floor(exact)), 1.0) << a;
    }
  }
  EXPECT_EQ(last, 31);
}

TEST(ReferenceTest, DefaultScaleIsInverseSqrtHeadDim) {
  // D = 3: key 0 has q·k = 3, key 1 has q·k = 0, so the scores are
  // (3 / sqrt(3), 0) = (sqrt(3), 0) by default.
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 1, 3}, {1, 1, 1});
  const TestTensor k =
      TestTensor::FromFloats(kF32, {1, 1, 2, 3}, {1, 1, 1, 0, 0, 0});
  const TestTensor v = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, 0});
  AttentionInputs in = MakeInputs(q, k, v);
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->output.at(0),
                  static_cast<float>(1.0 / (1.0 + std::exp(-std::sqrt(3.0)))));

  in.scale = 0.25f;
  r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->output.at(0),
                  static_cast<float>(1.0 / (1.0 + std::exp(-0.75))));

  in.scale = 0.0f;
  r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output.at(0), 0.5f);
}

TEST(ReferenceTest, UniformScoresGiveMeanOfValues) {
  Dims d;
  d.batch = 2;
  d.q_heads = d.kv_heads = 2;
  d.q_len = 3;
  d.k_len = 4;
  d.value_dim = 5;
  const TestTensor w = RunUniform(d, MaskSpec());
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.q_heads; ++h) {
      EXPECT_THAT(AttendedKeys(w, b, h),
                  ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3),
                              ElementsAre(0, 1, 2, 3)));
    }
  }
}

TEST(ReferenceTest, WeightsRowsSumToOneAndGiveTheOutput) {
  const TestTensor q = TestTensor::Random(kF32, {2, 2, 3, 4}, 1, -2, 2);
  const TestTensor k = TestTensor::Random(kF32, {2, 2, 5, 4}, 2, -2, 2);
  const TestTensor v = TestTensor::Random(kF32, {2, 2, 5, 3}, 3);
  absl::StatusOr<Result> r = RunReference(MakeInputs(q, k, v));
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 3; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < 5; ++j) {
          EXPECT_GT(r->weights.at({b, h, i, j}), 0.0f);
          sum += r->weights.at({b, h, i, j});
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
        for (int64_t c = 0; c < 3; ++c) {
          double pv = 0.0;
          for (int64_t j = 0; j < 5; ++j) {
            pv += r->weights.at({b, h, i, j}) * v.at({b, h, j, c});
          }
          EXPECT_NEAR(r->output.at({b, h, i, c}), pv, 1e-6);
        }
      }
    }
  }
}

TEST(ReferenceTest, ValueDimDiffersFromHeadDim) {
  // D = 2, Dv = 3, scale 1: scores (1, 0).
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 1, 2}, {1, 1});
  const TestTensor k = TestTensor::FromFloats(kF32, {1, 1, 2, 2}, {1, 0, 0, 0});
  const TestTensor v =
      TestTensor::FromFloats(kF32, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  AttentionInputs in = MakeInputs(q, k, v);
  in.scale = 1.0f;
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  ASSERT_EQ(r->output.shape(), (std::vector<int64_t>{1, 1, 1, 3}));
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(r->output.at(c),
                    static_cast<float>(p0 * (1 + c) + (1 - p0) * (4 + c)));
  }
}

TEST(ReferenceTest, CausalTopLeftWithFewerQueriesThanKeys) {
  Dims d;
  d.q_len = 2;
  d.k_len = 4;
  MaskSpec mask;
  mask.causal = true;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(0, 1)));
}

TEST(ReferenceTest, CausalBottomRightWithFewerQueriesThanKeys) {
  Dims d;
  d.q_len = 2;
  d.k_len = 4;
  MaskSpec mask;
  mask.causal = true;
  mask.alignment = CausalAlignment::kBottomRight;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(0, 1, 2, 3)));
}

TEST(ReferenceTest, CausalTopLeftWithMoreQueriesThanKeys) {
  Dims d;
  d.q_len = 4;
  d.k_len = 2;
  MaskSpec mask;
  mask.causal = true;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(0, 1), ElementsAre(0, 1),
                          ElementsAre(0, 1)));
}

TEST(ReferenceTest, CausalBottomRightWithMoreQueriesThanKeys) {
  // The diagonal is d(i) = i - 2: the first two rows see no key (zeros).
  Dims d;
  d.q_len = 4;
  d.k_len = 2;
  MaskSpec mask;
  mask.causal = true;
  mask.alignment = CausalAlignment::kBottomRight;
  EXPECT_THAT(
      AttendedKeys(RunUniform(d, mask), 0, 0),
      ElementsAre(IsEmpty(), IsEmpty(), ElementsAre(0), ElementsAre(0, 1)));
}

TEST(ReferenceTest, CausalAlignmentsAgreeWhenSquare) {
  Dims d;
  d.q_len = d.k_len = 3;
  MaskSpec mask;
  mask.causal = true;
  const auto top_left = AttendedKeys(RunUniform(d, mask), 0, 0);
  mask.alignment = CausalAlignment::kBottomRight;
  EXPECT_EQ(AttendedKeys(RunUniform(d, mask), 0, 0), top_left);
  EXPECT_THAT(top_left, ElementsAre(ElementsAre(0), ElementsAre(0, 1),
                                    ElementsAre(0, 1, 2)));
}

TEST(ReferenceTest, WindowLeftOnly) {
  Dims d;
  d.q_len = d.k_len = 4;
  MaskSpec mask;
  mask.window_left = 1;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3),
                          ElementsAre(1, 2, 3), ElementsAre(2, 3)));
}

TEST(ReferenceTest, SinkTokensKeepTheFirstKeysOutsideTheWindow) {
  Dims d;
  d.q_len = d.k_len = 6;
  MaskSpec mask;
  mask.causal = true;
  mask.window_left = 1;
  mask.sink_tokens = 2;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(0, 1),
                          ElementsAre(0, 1, 2), ElementsAre(0, 1, 2, 3),
                          ElementsAre(0, 1, 3, 4), ElementsAre(0, 1, 4, 5)));
}

TEST(ReferenceTest, WindowRightOnly) {
  Dims d;
  d.q_len = d.k_len = 4;
  MaskSpec mask;
  mask.window_right = 1;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0, 1), ElementsAre(0, 1, 2),
                          ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3)));
}

TEST(ReferenceTest, WindowBothSides) {
  Dims d;
  d.q_len = d.k_len = 4;
  MaskSpec mask;
  mask.window_left = 1;
  mask.window_right = 0;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(0, 1), ElementsAre(1, 2),
                          ElementsAre(2, 3)));
  mask.window_left = 0;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                          ElementsAre(3)));
}

TEST(ReferenceTest, WindowFollowsBottomRightDiagonal) {
  // d(i) = i + 3.
  Dims d;
  d.q_len = 2;
  d.k_len = 5;
  MaskSpec mask;
  mask.alignment = CausalAlignment::kBottomRight;
  mask.window_left = 1;
  mask.window_right = 0;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(2, 3), ElementsAre(3, 4)));
  // Top-left: d(i) = i.
  mask.alignment = CausalAlignment::kTopLeft;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0), ElementsAre(0, 1)));
}

TEST(ReferenceTest, WindowWiderThanSequencesIsUnbounded) {
  Dims d;
  d.q_len = 2;
  d.k_len = 3;
  MaskSpec mask;
  mask.window_left = std::numeric_limits<int64_t>::max();
  mask.window_right = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(0, 1, 2)));
}

TEST(ReferenceTest, KeyLengthsMaskPaddingPerBatch) {
  Dims d;
  d.batch = 3;
  d.q_len = 2;
  d.k_len = 4;
  const int32_t lengths[] = {4, 2, 0};
  MaskSpec mask;
  mask.key_lengths = lengths;
  const TestTensor w = RunUniform(d, mask);
  EXPECT_THAT(AttendedKeys(w, 0, 0),
              ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(0, 1, 2, 3)));
  EXPECT_THAT(AttendedKeys(w, 1, 0),
              ElementsAre(ElementsAre(0, 1), ElementsAre(0, 1)));
  EXPECT_THAT(AttendedKeys(w, 2, 0), ElementsAre(IsEmpty(), IsEmpty()));
}

TEST(ReferenceTest, MaskPartsCombine) {
  // Causal bottom-right (d(i) = i + 2), window_left 2, key_lengths 4 and a bool
  // mask hiding key 1: a key is attended only if every part allows it.
  Dims d;
  d.q_len = 3;
  d.k_len = 5;
  const int32_t lengths[] = {4};
  const TestTensor keep =
      TestTensor::FromFloats(DType::kBool, {5}, {1, 0, 1, 1, 1});
  MaskSpec mask;
  mask.causal = true;
  mask.alignment = CausalAlignment::kBottomRight;
  mask.window_left = 2;
  mask.key_lengths = lengths;
  mask.explicit_mask = keep.view();
  EXPECT_THAT(
      AttendedKeys(RunUniform(d, mask), 0, 0),
      ElementsAre(ElementsAre(0, 2), ElementsAre(2, 3), ElementsAre(2, 3)));
}

TEST(ReferenceTest, BoolMaskOverKeysBroadcasts) {
  Dims d;
  d.batch = 2;
  d.q_heads = d.kv_heads = 2;
  d.q_len = 2;
  d.k_len = 4;
  // Any nonzero byte attends.
  TestTensor keep = TestTensor::FromFloats(DType::kBool, {4}, {1, 0, 1, 1});
  static_cast<unsigned char*>(keep.data())[2] = 2;
  MaskSpec mask;
  mask.explicit_mask = keep.view();
  const TestTensor w = RunUniform(d, mask);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_THAT(AttendedKeys(w, b, h),
                  ElementsAre(ElementsAre(0, 2, 3), ElementsAre(0, 2, 3)));
    }
  }
}

TEST(ReferenceTest, BoolMaskPerRowBroadcastsOverBatchAndHeads) {
  Dims d;
  d.batch = 2;
  d.q_heads = d.kv_heads = 2;
  d.q_len = 2;
  d.k_len = 3;
  const TestTensor keep = TestTensor::FromFloats(DType::kBool, {1, 1, 2, 3},
                                                 {1, 0, 0,  //
                                                  0, 1, 1});
  MaskSpec mask;
  mask.explicit_mask = keep.view();
  const TestTensor w = RunUniform(d, mask);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_THAT(AttendedKeys(w, b, h),
                  ElementsAre(ElementsAre(0), ElementsAre(1, 2)));
    }
  }
}

TEST(ReferenceTest, BoolMaskPerBatchBroadcastsOverHeadsAndRows) {
  Dims d;
  d.batch = 2;
  d.q_heads = d.kv_heads = 2;
  d.q_len = 2;
  d.k_len = 3;
  const TestTensor keep = TestTensor::FromFloats(DType::kBool, {2, 1, 1, 3},
                                                 {1, 1, 0,  //
                                                  0, 0, 1});
  MaskSpec mask;
  mask.explicit_mask = keep.view();
  const TestTensor w = RunUniform(d, mask);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_THAT(AttendedKeys(w, 0, h),
                ElementsAre(ElementsAre(0, 1), ElementsAre(0, 1)));
    EXPECT_THAT(AttendedKeys(w, 1, h),
                ElementsAre(ElementsAre(2), ElementsAre(2)));
  }
}

TEST(ReferenceTest, BoolMaskPerHeadCanHideAWholeHead) {
  Dims d;
  d.q_heads = 2;
  d.kv_heads = 1;
  d.q_len = 2;
  d.k_len = 3;
  // Rank 3 [Hq, 1, 1] aligns to the right: [1, Hq, 1, 1].
  const TestTensor keep =
      TestTensor::FromFloats(DType::kBool, {2, 1, 1}, {1, 0});
  MaskSpec mask;
  mask.explicit_mask = keep.view();
  const TestTensor w = RunUniform(d, mask);
  EXPECT_THAT(AttendedKeys(w, 0, 0),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(0, 1, 2)));
  EXPECT_THAT(AttendedKeys(w, 0, 1), ElementsAre(IsEmpty(), IsEmpty()));
}

TEST(ReferenceTest, BoolScalarMaskAppliesEverywhere) {
  Dims d;
  d.batch = 2;
  d.q_len = 2;
  d.k_len = 2;
  TestTensor keep(DType::kBool, {});  // rank 0, one element
  MaskSpec mask;
  mask.explicit_mask = keep.view();
  const TestTensor hidden = RunUniform(d, mask);
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_THAT(AttendedKeys(hidden, b, 0), ElementsAre(IsEmpty(), IsEmpty()));
  }
  keep.Set(0, 1);
  const TestTensor shown = RunUniform(d, mask);
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_THAT(AttendedKeys(shown, b, 0),
                ElementsAre(ElementsAre(0, 1), ElementsAre(0, 1)));
  }
}

TEST(ReferenceTest, BoolMaskViewStridesAreHonoured) {
  // A [Lq, Lk] mask seen through the transpose of [Lk, Lq] memory.
  Dims d;
  d.q_len = 2;
  d.k_len = 3;
  TestTensor memory(DType::kBool, {3, 2});
  memory.Set({0, 0}, 1);  // row 0 attends key 0
  memory.Set({2, 0}, 1);  // and key 2
  memory.Set({1, 1}, 1);  // row 1 attends key 1
  TensorView transposed = memory.view();
  transposed.shape = {2, 3, 0, 0};
  transposed.strides = {1, 2, 0, 0};
  MaskSpec mask;
  mask.explicit_mask = transposed;
  EXPECT_THAT(AttendedKeys(RunUniform(d, mask), 0, 0),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1)));
}

TEST(ReferenceTest, FloatMaskIsAddedAfterScaling) {
  // D = 1, scale 2: scores (2·1 + m0, 2·0 + m1). With m = (0, 2 + ln 3) the
  // scores are (2, 2 + ln 3), so p = (1/4, 3/4) (a scaled mask would differ).
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 1, 1}, {1});
  const TestTensor k = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, 0});
  const TestTensor v = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {0, 4});
  const TestTensor bias = TestTensor::FromFloats(
      kF32, {2}, {0, static_cast<float>(2 + std::log(3.0))});
  AttentionInputs in = MakeInputs(q, k, v);
  in.scale = 2.0f;
  in.mask.explicit_mask = bias.view();
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->weights.at(0), 0.25f);
  EXPECT_FLOAT_EQ(r->weights.at(1), 0.75f);
  EXPECT_FLOAT_EQ(r->output.at(0), 3.0f);
}

TEST(ReferenceTest, FloatMaskMinusInfMasksPerBatch) {
  Dims d;
  d.batch = 2;
  d.q_heads = d.kv_heads = 2;
  d.q_len = 2;
  d.k_len = 3;
  const TestTensor bias = TestTensor::FromFloats(kF32, {2, 1, 1, 3},
                                                 {0, -kInf, 0,  //
                                                  -kInf, 0, -kInf});
  MaskSpec mask;
  mask.explicit_mask = bias.view();
  const TestTensor w = RunUniform(d, mask);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_THAT(AttendedKeys(w, 0, h),
                ElementsAre(ElementsAre(0, 2), ElementsAre(0, 2)));
    EXPECT_THAT(AttendedKeys(w, 1, h),
                ElementsAre(ElementsAre(1), ElementsAre(1)));
  }
}

TEST(ReferenceTest, FloatMaskAllMinusInfRowIsZeroNotNaN) {
  const TestTensor q = TestTensor::Random(kF32, {1, 1, 2, 4}, 1);
  const TestTensor k = TestTensor::Random(kF32, {1, 1, 3, 4}, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 1, 3, 2}, 3);
  const TestTensor bias = TestTensor::FromFloats(kF32, {2, 3},
                                                 {0, 0, -kInf,  //
                                                  -kInf, -kInf, -kInf});
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.explicit_mask = bias.view();
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->weights.at({0, 0, 0, 0}), 0.0f);
  EXPECT_EQ(r->weights.at({0, 0, 0, 2}), 0.0f);
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(r->weights.at({0, 0, 1, j}), 0.0f);
  for (int64_t c = 0; c < 2; ++c) {
    EXPECT_FALSE(std::isnan(r->output.at({0, 0, 0, c})));
    EXPECT_EQ(r->output.at({0, 0, 1, c}), 0.0f);
  }
}

TEST(ReferenceTest, FloatMaskLowestFiniteGivesUniformAverage) {
  // What a float mask of finfo.min (PyTorch's way of masking a whole row)
  // asks for: every score is swamped equally, so the row averages all values.
  const TestTensor q = TestTensor::Random(kF32, {1, 1, 2, 4}, 1);
  const TestTensor k = TestTensor::Random(kF32, {1, 1, 3, 4}, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 1, 3, 2}, 3);
  TestTensor bias(kF32, {3});
  bias.Fill(std::numeric_limits<float>::lowest());
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.explicit_mask = bias.view();
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t c = 0; c < 2; ++c) {
      const double mean = (double{v.at({0, 0, 0, c})} + v.at({0, 0, 1, c}) +
                           v.at({0, 0, 2, c})) /
                          3;
      EXPECT_FLOAT_EQ(r->output.at({0, 0, i, c}), static_cast<float>(mean));
    }
  }
}

TEST(ReferenceTest, NaNScoresMakeOnlyTheirRowNaN) {
  TestTensor q = TestTensor::Random(kF32, {1, 1, 3, 2}, 1);
  const TestTensor k = TestTensor::Random(kF32, {1, 1, 2, 2}, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 1, 2, 2}, 3);
  q.Set({0, 0, 1, 0}, std::nanf(""));  // row 1 scores both keys NaN
  TestTensor bias(kF32, {3, 2});
  bias.Set({2, 1}, std::nanf(""));  // row 2 scores key 1 NaN
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.explicit_mask = bias.view();
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t c = 0; c < 2; ++c) {
    EXPECT_FALSE(std::isnan(r->output.at({0, 0, 0, c})));
    EXPECT_TRUE(std::isnan(r->output.at({0, 0, 1, c})));
    EXPECT_TRUE(std::isnan(r->output.at({0, 0, 2, c})));
  }
  for (int64_t j = 0; j < 2; ++j) {
    EXPECT_TRUE(std::isnan(r->weights.at({0, 0, 2, j})));
  }
}

TEST(ReferenceTest, AlibiPenalizesDistanceFromDiagonalPerHead) {
  // Zero queries: the scores are -slope_h · |i - j| alone.
  const TestTensor q(kF32, {1, 2, 3, 4});
  const TestTensor k = TestTensor::Random(kF32, {1, 2, 3, 4}, 1);
  const TestTensor v = TestTensor::Random(kF32, {1, 2, 3, 2}, 2);
  const float slopes[] = {0.5f, 0.0f};
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.alibi_slopes = slopes;
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int64_t i = 0; i < 3; ++i) {
    double e[3], sum = 0;
    for (int64_t j = 0; j < 3; ++j) {
      e[j] = std::exp(-0.5 * std::abs(static_cast<double>(i - j)));
      sum += e[j];
    }
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_FLOAT_EQ(r->weights.at({0, 0, i, j}),
                      static_cast<float>(e[j] / sum))
          << i << "," << j;
      EXPECT_FLOAT_EQ(r->weights.at({0, 1, i, j}), 1.0f / 3) << i << "," << j;
    }
  }
}

TEST(ReferenceTest, AlibiDistanceUsesTheAlignedDiagonal) {
  const TestTensor q(kF32, {1, 1, 1, 2});
  const TestTensor k = TestTensor::Random(kF32, {1, 1, 3, 2}, 1);
  const TestTensor v = TestTensor::Random(kF32, {1, 1, 3, 1}, 2);
  const float slopes[] = {1.0f};
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.alibi_slopes = slopes;
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  // Top-left: d(0) = 0, scores (0, -1, -2).
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->weights.ToFloats(),
              Pointwise(FloatEq(), {static_cast<float>(1 / z),
                                    static_cast<float>(std::exp(-1.0) / z),
                                    static_cast<float>(std::exp(-2.0) / z)}));
  // Bottom-right: d(0) = Lk - Lq = 2, scores (-2, -1, 0).
  in.mask.alignment = CausalAlignment::kBottomRight;
  r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->weights.ToFloats(),
              Pointwise(FloatEq(), {static_cast<float>(std::exp(-2.0) / z),
                                    static_cast<float>(std::exp(-1.0) / z),
                                    static_cast<float>(1 / z)}));
}

TEST(ReferenceTest, ScaleMaskAndAlibiAddUp) {
  // D = 1, scale 2, q·k = 1 for both keys: 2 + m_j - ln2 · |0 - j| with
  // m = (ln 2, 0) gives scores (2 + ln 2, 2 - ln 2), so p = (4/5, 1/5).
  const TestTensor q = TestTensor::FromFloats(kF32, {1, 1, 1, 1}, {1});
  const TestTensor k = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {1, 1});
  const TestTensor v = TestTensor::FromFloats(kF32, {1, 1, 2, 1}, {5, 10});
  const TestTensor bias =
      TestTensor::FromFloats(kF32, {2}, {static_cast<float>(std::log(2.0)), 0});
  const float slopes[] = {static_cast<float>(std::log(2.0))};
  AttentionInputs in = MakeInputs(q, k, v);
  in.scale = 2.0f;
  in.mask.explicit_mask = bias.view();
  in.mask.alibi_slopes = slopes;
  absl::StatusOr<Result> r = RunReference(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->weights.at(0), 0.8f);
  EXPECT_FLOAT_EQ(r->weights.at(1), 0.2f);
  EXPECT_FLOAT_EQ(r->output.at(0), 6.0f);
}

TEST(ReferenceTest, FullyMaskedRowsAreExactlyZeroInEveryDType) {
  const TestTensor q = TestTensor::Random(kF32, {2, 1, 3, 4}, 1);
  const TestTensor k = TestTensor::Random(kF32, {2, 1, 2, 4}, 2);
  const TestTensor v = TestTensor::Random(kF32, {2, 1, 2, 3}, 3, 1, 2);
  // Batch 1 has no keys; in batch 0, bottom-right causal leaves row 0 (d = -1)
  // without keys and the bool mask hides row 2 entirely.
  const int32_t lengths[] = {2, 0};
  const TestTensor keep = TestTensor::FromFloats(DType::kBool, {3, 2},
                                                 {1, 1,  //
                                                  1, 1,  //
                                                  0, 0});
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.causal = true;
  in.mask.alignment = CausalAlignment::kBottomRight;
  in.mask.key_lengths = lengths;
  in.mask.explicit_mask = keep.view();
  for (DType dtype : {kF32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    absl::StatusOr<Result> r = RunReference(in, dtype);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < 3; ++i) {
        const bool attends = b == 0 && i == 1;
        for (int64_t c = 0; c < 3; ++c) {
          if (attends) {
            EXPECT_GE(r->output.at({b, 0, i, c}), 1.0f);
          } else {
            EXPECT_EQ(r->output.at({b, 0, i, c}), 0.0f) << b << "," << i;
          }
        }
        if (attends) continue;
        for (int64_t j = 0; j < 2; ++j) {
          EXPECT_EQ(r->weights.at({b, 0, i, j}), 0.0f) << b << "," << i;
        }
      }
    }
  }
}

// Repeats each of the Hkv heads of a BHLD tensor `times` times (PyTorch's
// repeat_interleave on dim 1).
TestTensor RepeatHeads(const TestTensor& t, int64_t times) {
  const std::vector<int64_t>& s = t.shape();
  TestTensor out(t.dtype(), {s[0], s[1] * times, s[2], s[3]});
  for (int64_t b = 0; b < s[0]; ++b) {
    for (int64_t h = 0; h < s[1] * times; ++h) {
      for (int64_t l = 0; l < s[2]; ++l) {
        for (int64_t d = 0; d < s[3]; ++d) {
          out.Set({b, h, l, d}, t.at({b, h / times, l, d}));
        }
      }
    }
  }
  return out;
}

TEST(ReferenceTest, GqaQueryHeadsShareKvHeadsInOrder) {
  Dims d;
  d.batch = 2;
  d.q_heads = 4;
  d.kv_heads = 2;
  d.q_len = 2;
  d.k_len = 3;
  // RunUniform checks each head's output against kv head h / 2.
  RunUniform(d, MaskSpec());

  // And the mapping is visible without that helper: heads 0 and 1 average kv
  // head 0's values, heads 2 and 3 kv head 1's.
  const TestTensor q(kF32, {1, 4, 1, 2});
  const TestTensor k(kF32, {1, 2, 2, 2});
  const TestTensor v =
      TestTensor::FromFloats(kF32, {1, 2, 2, 1}, {1, 3, 10, 30});
  absl::StatusOr<Result> r = RunReference(MakeInputs(q, k, v));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->output.ToFloats(), ElementsAre(2, 2, 20, 20));
}

TEST(ReferenceTest, GqaEqualsRepeatedKvHeads) {
  const TestTensor q = TestTensor::Random(kF32, {2, 4, 3, 4}, 1, -2, 2);
  const TestTensor k = TestTensor::Random(kF32, {2, 2, 5, 4}, 2, -2, 2);
  const TestTensor v = TestTensor::Random(kF32, {2, 2, 5, 3}, 3);
  MaskSpec mask;
  mask.causal = true;
  AttentionInputs grouped = MakeInputs(q, k, v);
  grouped.mask = mask;
  const TestTensor k4 = RepeatHeads(k, 2);
  const TestTensor v4 = RepeatHeads(v, 2);
  AttentionInputs repeated = MakeInputs(q, k4, v4);
  repeated.mask = mask;
  absl::StatusOr<Result> a = RunReference(grouped);
  absl::StatusOr<Result> b = RunReference(repeated);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->output.ToFloats(), b->output.ToFloats());
  EXPECT_EQ(a->weights.ToFloats(), b->weights.ToFloats());
}

TEST(ReferenceTest, MqaEqualsRepeatedKvHead) {
  const TestTensor q = TestTensor::Random(kF32, {1, 3, 2, 4}, 1, -2, 2);
  const TestTensor k = TestTensor::Random(kF32, {1, 1, 4, 4}, 2, -2, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 1, 4, 2}, 3);
  const TestTensor k3 = RepeatHeads(k, 3);
  const TestTensor v3 = RepeatHeads(v, 3);
  absl::StatusOr<Result> a = RunReference(MakeInputs(q, k, v));
  absl::StatusOr<Result> b = RunReference(MakeInputs(q, k3, v3));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->output.ToFloats(), b->output.ToFloats());
  EXPECT_EQ(a->weights.ToFloats(), b->weights.ToFloats());
}

// [B, H, L, D] -> [B, L, H, D], a dense copy.
TestTensor SwapHeadsAndRows(const TestTensor& t) {
  const std::vector<int64_t>& s = t.shape();
  TestTensor out(t.dtype(), {s[0], s[2], s[1], s[3]});
  for (int64_t b = 0; b < s[0]; ++b) {
    for (int64_t h = 0; h < s[1]; ++h) {
      for (int64_t l = 0; l < s[2]; ++l) {
        for (int64_t d = 0; d < s[3]; ++d) {
          out.Set({b, l, h, d}, t.at({b, h, l, d}));
        }
      }
    }
  }
  return out;
}

TEST(ReferenceTest, BlhdEqualsBhldTransposed) {
  // Lq != Hq and Lk != Hkv so that a mix-up of the two axes shows; the mask and
  // weights stay [B, Hq, Lq, Lk] in both layouts.
  const TestTensor q = TestTensor::Random(kF32, {2, 4, 3, 4}, 1, -2, 2);
  const TestTensor k = TestTensor::Random(kF32, {2, 2, 5, 4}, 2, -2, 2);
  const TestTensor v = TestTensor::Random(kF32, {2, 2, 5, 3}, 3);
  const TestTensor bias = TestTensor::Random(kF32, {1, 4, 3, 5}, 4);
  const float slopes[] = {0.1f, 0.2f, 0.3f, 0.4f};
  MaskSpec mask;
  mask.causal = true;
  mask.alignment = CausalAlignment::kBottomRight;
  mask.explicit_mask = bias.view();
  mask.alibi_slopes = slopes;

  AttentionInputs bhld = MakeInputs(q, k, v);
  bhld.mask = mask;
  const TestTensor q_t = SwapHeadsAndRows(q);
  const TestTensor k_t = SwapHeadsAndRows(k);
  const TestTensor v_t = SwapHeadsAndRows(v);
  AttentionInputs blhd = MakeInputs(q_t, k_t, v_t, Layout::kBLHD);
  blhd.mask = mask;

  absl::StatusOr<Result> a = RunReference(bhld);
  absl::StatusOr<Result> b = RunReference(blhd);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->output.shape(), (std::vector<int64_t>{2, 3, 4, 3}));
  EXPECT_EQ(SwapHeadsAndRows(b->output).ToFloats(), a->output.ToFloats());
  EXPECT_EQ(b->weights.ToFloats(), a->weights.ToFloats());
}

TEST(ReferenceTest, StridedViewsEqualDenseCopies) {
  const TestTensor q = TestTensor::Random(kF32, {1, 2, 3, 4}, 1, -2, 2);
  const TestTensor k = TestTensor::Random(kF32, {1, 2, 5, 4}, 2, -2, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 2, 5, 3}, 3);
  absl::StatusOr<Result> dense = RunReference(MakeInputs(q, k, v));
  ASSERT_TRUE(dense.ok()) << dense.status();

  // The query as the first half of rows twice as long.
  TestTensor q_wide(kF32, {1, 2, 3, 8});
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t d = 0; d < 4; ++d) {
        q_wide.Set({0, h, i, d}, q.at({0, h, i, d}));
        q_wide.Set({0, h, i, d + 4}, 100.0f);
      }
    }
  }
  TensorView q_view = q_wide.view();
  q_view.shape[3] = 4;
  // The key stored [B, L, H, D] but passed as BHLD through permuted strides.
  const TestTensor k_blhd = SwapHeadsAndRows(k);
  TensorView k_view = k_blhd.view();
  k_view.shape = {1, 2, 5, 4};
  k_view.strides = {40, 4, 8, 1};
  // The output into rows of 5 with 2 spare columns that must stay untouched.
  TestTensor out_wide(kF32, {1, 2, 3, 5});
  out_wide.Fill(-7.0f);
  MutableTensorView out_view = out_wide.mutable_view();
  out_view.shape[3] = 3;

  AttentionInputs in;
  in.query = q_view;
  in.key = k_view;
  in.value = v.view();
  AttentionOutputs out;
  out.output = out_view;
  ASSERT_TRUE(ReferenceAttention(in, out).ok());
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t c = 0; c < 5; ++c) {
        EXPECT_EQ(out_wide.at({0, h, i, c}),
                  c < 3 ? dense->output.at({0, h, i, c}) : -7.0f)
            << h << "," << i << "," << c;
      }
    }
  }
}

TEST(ReferenceTest, WeightsAreOptional) {
  const TestTensor q = TestTensor::Random(kF32, {1, 2, 3, 4}, 1);
  const TestTensor k = TestTensor::Random(kF32, {1, 2, 5, 4}, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 2, 5, 3}, 3);
  absl::StatusOr<Result> with = RunReference(MakeInputs(q, k, v));
  absl::StatusOr<Result> without =
      RunReference(MakeInputs(q, k, v), kF32, /*with_weights=*/false);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(with->output.ToFloats(), without->output.ToFloats());
}

TEST(ReferenceTest, EmptyKeysGiveZeros) {
  const TestTensor q = TestTensor::Random(kF32, {2, 2, 3, 4}, 1);
  const TestTensor k(kF32, {2, 1, 0, 4});
  const TestTensor v(kF32, {2, 1, 0, 3});
  AttentionInputs in = MakeInputs(q, k, v);
  in.mask.causal = true;
  in.mask.alignment = CausalAlignment::kBottomRight;
  for (DType dtype : {kF32, DType::kBFloat16}) {
    absl::StatusOr<Result> r = RunReference(in, dtype);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->weights.shape(), (std::vector<int64_t>{2, 2, 3, 0}));
    EXPECT_EQ(r->output.ToFloats(), std::vector<float>(2 * 2 * 3 * 3, 0.0f));
  }
}

TEST(ReferenceTest, EmptyBatchOrQueriesAreFine) {
  {
    const TestTensor q(kF32, {0, 2, 3, 4});
    const TestTensor k(kF32, {0, 2, 5, 4});
    const TestTensor v(kF32, {0, 2, 5, 3});
    absl::StatusOr<Result> r = RunReference(MakeInputs(q, k, v));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->output.size(), 0);
  }
  {
    const TestTensor q(kF32, {1, 2, 0, 4});
    const TestTensor k = TestTensor::Random(kF32, {1, 2, 5, 4}, 1);
    const TestTensor v = TestTensor::Random(kF32, {1, 2, 5, 3}, 2);
    const int32_t lengths[] = {3};
    AttentionInputs in = MakeInputs(q, k, v);
    in.mask.causal = true;
    in.mask.key_lengths = lengths;
    absl::StatusOr<Result> r = RunReference(in);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->output.size(), 0);
  }
}

// Copies `t` into a tensor of `dtype` (exact when t's values fit).
TestTensor Cast(const TestTensor& t, DType dtype) {
  return TestTensor::FromFloats(dtype, t.shape(), t.ToFloats());
}

TEST(ReferenceTest, HalfPrecisionInputsAreReadExactlyAndOutputsRoundedOnce) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    // Random values already rounded to dtype, so f32 copies hold the same ones.
    const TestTensor q = TestTensor::Random(dtype, {1, 2, 3, 4}, 1, -2, 2);
    const TestTensor k = TestTensor::Random(dtype, {1, 1, 5, 4}, 2, -2, 2);
    const TestTensor v = TestTensor::Random(dtype, {1, 1, 5, 3}, 3);
    const TestTensor q32 = Cast(q, kF32);
    const TestTensor k32 = Cast(k, kF32);
    const TestTensor v32 = Cast(v, kF32);
    MaskSpec mask;
    mask.causal = true;
    AttentionInputs half = MakeInputs(q, k, v);
    half.mask = mask;
    AttentionInputs full = MakeInputs(q32, k32, v32);
    full.mask = mask;

    absl::StatusOr<Result> want = RunReference(full);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<Result> wide = RunReference(half, kF32);
    ASSERT_TRUE(wide.ok()) << wide.status();
    EXPECT_EQ(wide->output.ToFloats(), want->output.ToFloats());
    EXPECT_EQ(wide->weights.ToFloats(), want->weights.ToFloats());

    // Any float output dtype goes with any input dtype; each element is the f32
    // result rounded once.
    for (const AttentionInputs* in : {&half, &full}) {
      absl::StatusOr<Result> narrow = RunReference(*in, dtype);
      ASSERT_TRUE(narrow.ok()) << narrow.status();
      EXPECT_EQ(narrow->output.dtype(), dtype);
      EXPECT_EQ(narrow->output.ToFloats(),
                Cast(want->output, dtype).ToFloats());
    }
  }
}

TEST(ReferenceTest, InvalidInputsAreRejectedBeforeWriting) {
  const TestTensor q = TestTensor::Random(kF32, {1, 3, 2, 4}, 1);
  const TestTensor k = TestTensor::Random(kF32, {1, 2, 2, 4}, 2);
  const TestTensor v = TestTensor::Random(kF32, {1, 2, 2, 4}, 3);
  TestTensor out(kF32, {1, 3, 2, 4});
  out.Fill(5.0f);
  AttentionOutputs outputs;
  outputs.output = out.mutable_view();
  const absl::Status s = ReferenceAttention(MakeInputs(q, k, v), outputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.ToFloats(), std::vector<float>(out.size(), 5.0f));
}

}  // namespace
}  // namespace attnserve
