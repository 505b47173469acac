#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/attention.h"
#include "core/reference.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr DType kF32 = DType::kFloat32;
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// Anything that computes attention and validates like AttentionEngine::Run.
using RunFn = std::function<absl::Status(const AttentionInputs&,
                                         const AttentionOutputs&)>;

// A RunFn with a name for gtest to print.
struct Runner {
  const char* name;
  RunFn run;
};

void PrintTo(const Runner& runner, std::ostream* os) { *os << runner.name; }

// Every test starts from a valid call (B = 2, Hq = 4, Hkv = 2, Lq = 3, Lk = 5,
// D = 8, Dv = 6, BHLD, with weights) and breaks one thing.
class ValidationTest : public ::testing::TestWithParam<Runner> {
 protected:
  ValidationTest() {
    inputs_.query = Input(kF32, {2, 4, 3, 8});
    inputs_.key = Input(kF32, {2, 2, 5, 8});
    inputs_.value = Input(kF32, {2, 2, 5, 6});
    outputs_.output = Output(kF32, {2, 4, 3, 6});
    outputs_.weights = Output(kF32, {2, 4, 3, 5});
  }

  absl::Status Call() const { return GetParam().run(inputs_, outputs_); }

  // A zero tensor that lives as long as the test.
  TensorView Input(DType dtype, std::vector<int64_t> shape) {
    return tensors_.emplace_back(dtype, std::move(shape)).view();
  }
  MutableTensorView Output(DType dtype, std::vector<int64_t> shape) {
    return tensors_.emplace_back(dtype, std::move(shape)).mutable_view();
  }

  // The valid call in layout BLHD: query [2, 3, 4, 8], key [2, 5, 2, 8],
  // value [2, 5, 2, 6], output [2, 3, 4, 6].
  void UseBlhd() {
    inputs_.layout = Layout::kBLHD;
    inputs_.query = Input(kF32, {2, 3, 4, 8});
    inputs_.key = Input(kF32, {2, 5, 2, 8});
    inputs_.value = Input(kF32, {2, 5, 2, 6});
    outputs_.output = Output(kF32, {2, 3, 4, 6});
  }

  AttentionInputs inputs_;
  AttentionOutputs outputs_;

 private:
  std::deque<TestTensor> tensors_;  // a deque never moves its elements
};

TEST_P(ValidationTest, ValidCallSucceeds) {
  EXPECT_TRUE(Call().ok()) << Call();
  UseBlhd();
  EXPECT_TRUE(Call().ok()) << Call();
}

TEST_P(ValidationTest, QueryWrongRank) {
  inputs_.query = Input(kF32, {4, 3, 8});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("query: expected rank 4, got "
                                           "rank 3 (shape [4, 3, 8])")));
}

TEST_P(ValidationTest, KeyWrongRank) {
  inputs_.key = Input(kF32, {5, 8});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("key: expected rank 4, got rank 2")));
}

TEST_P(ValidationTest, ValueWrongRank) {
  inputs_.value = Input(kF32, {2, 10, 6});
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("value: expected rank 4, got rank 3")));
}

TEST_P(ValidationTest, KeyDTypeDiffersFromQuery) {
  inputs_.key = Input(DType::kBFloat16, {2, 2, 5, 8});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("key: dtype bf16 differs from "
                                           "query dtype f32")));
}

TEST_P(ValidationTest, ValueDTypeDiffersFromQuery) {
  inputs_.value = Input(DType::kFloat16, {2, 2, 5, 6});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("value: dtype f16 differs "
                                                   "from query dtype f32")));
}

TEST_P(ValidationTest, BoolQuery) {
  inputs_.query = Input(DType::kBool, {2, 4, 3, 8});
  inputs_.key = Input(DType::kBool, {2, 2, 5, 8});
  inputs_.value = Input(DType::kBool, {2, 2, 5, 6});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("query: dtype bool is not supported "
                                           "(expected f32, bf16 or f16)")));
}

TEST_P(ValidationTest, NegativeDimension) {
  inputs_.query.shape[2] = -3;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("query: negative dimension in "
                                           "shape [2, 4, -3, 8]")));
}

TEST_P(ValidationTest, NullData) {
  inputs_.query.data = nullptr;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("query: null data")));
}

TEST_P(ValidationTest, HeadDimZero) {
  inputs_.query = Input(kF32, {2, 4, 3, 0});
  inputs_.key = Input(kF32, {2, 2, 5, 0});
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("query: head dimension D = 0 is out of "
                                   "range [1, 576]")));
}

TEST_P(ValidationTest, HeadDimAbove576) {
  inputs_.query = Input(kF32, {2, 4, 3, 577});
  inputs_.key = Input(kF32, {2, 2, 5, 577});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("query: head dimension D = 577 is out "
                                         "of range [1, 576]")));
}

TEST_P(ValidationTest, ValueDimOutOfRange) {
  inputs_.value = Input(kF32, {2, 2, 5, 0});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("value: head dimension Dv = 0 is out "
                                         "of range [1, 512]")));
  inputs_.value = Input(kF32, {2, 2, 5, 513});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("Dv = 513")));
}

TEST_P(ValidationTest, KvHeadsZero) {
  inputs_.key = Input(kF32, {2, 0, 5, 8});
  inputs_.value = Input(kF32, {2, 0, 5, 6});
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("key: number of kv heads must be at "
                                   "least 1, got 0 (shape [2, 0, 5, 8])")));
}

TEST_P(ValidationTest, KeyBatchDiffersFromQuery) {
  inputs_.key = Input(kF32, {3, 2, 5, 8});
  EXPECT_THAT(
      Call(),
      StatusIs(
          kInvalid,
          HasSubstr("key: shape [3, 2, 5, 8] does not match query shape "
                    "[2, 4, 3, 8] in layout BHLD (expected [2, 2, 5, 8])")));
}

TEST_P(ValidationTest, KeyHeadDimDiffersFromQuery) {
  inputs_.key = Input(kF32, {2, 2, 5, 7});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, AllOf(HasSubstr("key: shape [2, 2, 5, 7]"),
                                       HasSubstr("(expected [2, 2, 5, 8])"))));
}

TEST_P(ValidationTest, KeyMismatchInBlhdNamesTheLayout) {
  UseBlhd();
  inputs_.key = Input(kF32, {2, 5, 2, 7});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("in layout BLHD (expected "
                                                   "[2, 5, 2, 8])")));
}

TEST_P(ValidationTest, ValueShapeDiffersFromKey) {
  const char* const kPrefix =
      "does not match key shape [2, 2, 5, 8] in layout "
      "BHLD (expected [2, 2, 5, 6])";
  inputs_.value = Input(kF32, {2, 2, 4, 6});  // Lk
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, AllOf(HasSubstr("value: shape [2, 2, 4, 6]"),
                                       HasSubstr(kPrefix))));
  inputs_.value = Input(kF32, {2, 1, 5, 6});  // Hkv
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr(kPrefix)));
  inputs_.value = Input(kF32, {1, 2, 5, 6});  // B
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr(kPrefix)));
  UseBlhd();
  inputs_.value = Input(kF32, {2, 4, 2, 6});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("in layout BLHD (expected "
                                                   "[2, 5, 2, 6])")));
}

TEST_P(ValidationTest, QueryHeadsNotMultipleOfKvHeads) {
  inputs_.key = Input(kF32, {2, 3, 5, 8});
  inputs_.value = Input(kF32, {2, 3, 5, 6});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("query heads Hq = 4 is not a multiple "
                                         "of key/value heads Hkv = 3")));
}

TEST_P(ValidationTest, NonDenseLastDimension) {
  const AttentionInputs valid = inputs_;
  inputs_.query.strides[3] = 2;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("query: last dimension must be dense "
                                         "(stride 1), got stride 2")));
  inputs_ = valid;
  inputs_.key.strides[3] = 0;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("key: last dimension must be dense "
                                           "(stride 1), got stride 0")));
  inputs_ = valid;
  inputs_.value.strides[3] = -1;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("value: last dimension must be dense "
                                         "(stride 1), got stride -1")));
}

TEST_P(ValidationTest, NegativeWindows) {
  inputs_.mask.window_left = -1;
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("mask.window_left: must be >= 0, got -1")));
  inputs_.mask.window_left = 0;
  inputs_.mask.window_right = -2;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.window_right: must be "
                                                   ">= 0, got -2")));
}

TEST_P(ValidationTest, SinkTokens) {
  inputs_.mask.sink_tokens = -1;
  inputs_.mask.window_left = 4;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.sink_tokens: must be "
                                                   ">= 0, got -1")));
  inputs_.mask.sink_tokens = 2;
  inputs_.mask.window_left.reset();
  EXPECT_THAT(Call(),
              StatusIs(kInvalid,
                       HasSubstr("mask.sink_tokens: needs mask.window_left")));
  inputs_.mask.window_left = 4;
  BlockSparseSpec sparse;
  sparse.block_size = 4;
  sparse.local_left = 1;
  inputs_.mask.block_sparse = sparse;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.sink_tokens: not with "
                                                   "mask.block_sparse")));
  inputs_.mask.block_sparse.reset();
  inputs_.method = AttentionMethod::kLinear;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.window_left")));
}

TEST_P(ValidationTest, KeyLengthsWrongCount) {
  const int32_t one[] = {5};
  inputs_.mask.key_lengths = one;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("mask.key_lengths: expected 2 entries "
                                         "(one per batch), got 1")));
  const int32_t three[] = {5, 5, 5};
  inputs_.mask.key_lengths = three;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("expected 2 entries (one per "
                                           "batch), got 3")));
}

TEST_P(ValidationTest, KeyLengthsOutOfRange) {
  const int32_t negative[] = {5, -1};
  inputs_.mask.key_lengths = negative;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.key_lengths[1] = -1 is out of "
                                           "range [0, Lk = 5]")));
  const int32_t too_long[] = {6, 0};
  inputs_.mask.key_lengths = too_long;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.key_lengths[0] = 6 is out of "
                                           "range [0, Lk = 5]")));
}

TEST_P(ValidationTest, MaskNotBroadcastable) {
  inputs_.mask.explicit_mask = Input(DType::kBool, {3});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("mask: shape [3] is not broadcastable "
                                         "to [2, 4, 3, 5] (dimension 0 is 3, "
                                         "expected 1 or 5)")));
  inputs_.mask.explicit_mask = Input(kF32, {1, 2, 1, 1});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("(dimension 1 is 2, expected "
                                           "1 or 4)")));
}

TEST_P(ValidationTest, MaskShapeIgnoresLayout) {
  UseBlhd();
  inputs_.mask.explicit_mask =
      Input(DType::kBool, {2, 3, 4, 5});  // [B, Lq, Hq, Lk]
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("is not broadcastable to "
                                                   "[2, 4, 3, 5]")));
}

TEST_P(ValidationTest, MaskRankAboveFour) {
  TensorView mask = Input(DType::kBool, {1, 1, 1, 1});
  mask.rank = 5;
  inputs_.mask.explicit_mask = mask;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask: rank 5 exceeds 4")));
}

TEST_P(ValidationTest, MaskWrongDType) {
  inputs_.mask.explicit_mask = Input(DType::kFloat16, {5});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask: dtype f16 is not "
                                                   "supported (expected bool "
                                                   "or f32)")));
  inputs_.mask.explicit_mask = Input(DType::kBFloat16, {5});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask: dtype bf16 is not "
                                                   "supported")));
}

TEST_P(ValidationTest, MaskNullData) {
  TensorView mask = Input(DType::kBool, {5});
  mask.data = nullptr;
  inputs_.mask.explicit_mask = mask;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask: null data")));
}

TEST_P(ValidationTest, AlibiWrongLength) {
  const float three[] = {0.1f, 0.2f, 0.3f};
  inputs_.mask.alibi_slopes = three;
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("mask.alibi_slopes: expected 4 entries "
                                   "(one per query head), got 3")));
}

TEST_P(ValidationTest, AlibiNonFinite) {
  float slopes[] = {0.1f, 0.2f, std::nanf(""), 0.4f};
  inputs_.mask.alibi_slopes = slopes;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.alibi_slopes[2]: must "
                                                   "be finite, got nan")));
  slopes[2] = 0.3f;
  slopes[3] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.alibi_slopes[3]: must "
                                                   "be finite, got -inf")));
}

TEST_P(ValidationTest, SoftcapNotPositiveOrNonFinite) {
  for (const float cap :
       {0.0f, -1.0f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
    inputs_.softcap = cap;
    EXPECT_THAT(
        Call(),
        StatusIs(kInvalid, HasSubstr(absl::StrCat(
                               "softcap: must be finite and > 0, got ", cap))));
  }
  inputs_.softcap = 1e-30f;
  EXPECT_TRUE(Call().ok()) << Call();
}

TEST_P(ValidationTest, SinksWrongLengthOrNonFinite) {
  float sinks[] = {0.1f, 0.2f, 0.3f, std::nanf("")};
  inputs_.sinks = absl::MakeConstSpan(sinks, 3);
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("sinks: expected 4 entries (one per "
                                           "query head), got 3")));
  inputs_.sinks = sinks;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("sinks[3]: must be finite, got nan")));
  sinks[3] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("sinks[3]: must be finite, got -inf")));
  sinks[3] = -1e30f;
  EXPECT_TRUE(Call().ok()) << Call();
}

TEST_P(ValidationTest, RelativeBiasOutOfRange) {
  std::vector<float> table(4 * 8, 0.5f);
  RelativeBiasSpec r;
  r.table = table;
  r.num_buckets = 8;
  r.max_distance = 16;
  r.bidirectional = true;
  inputs_.mask.relative_bias = r;
  EXPECT_TRUE(Call().ok()) << Call();
  inputs_.mask.relative_bias->num_buckets = 3;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("mask.relative_bias.num_buckets: 3 is "
                                         "outside [4, 1024] (bidirectional)")));
  inputs_.mask.relative_bias->num_buckets = 8;
  inputs_.mask.relative_bias->max_distance = 2;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.relative_bias.max_distance: 2 "
                                           "is outside (2, 4096]")));
  inputs_.mask.relative_bias->max_distance = 16;
  inputs_.mask.relative_bias->table = absl::MakeConstSpan(table).subspan(1);
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.relative_bias.table: expected "
                                           "Hq × num_buckets = 4 × 8 = 32 "
                                           "entries, got 31")));
  table[5] = std::nanf("");
  inputs_.mask.relative_bias->table = table;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("mask.relative_bias.table[5]: must be "
                                         "finite, got nan")));
}

TEST_P(ValidationTest, RelativeKeysOutOfRange) {
  // Hq 4, D 8.
  RelativeKeysSpec r;
  r.table = Input(kF32, {4, 6, 8});
  r.zero_row = 2;
  std::vector<float> bias(4 * 8, 0.25f);
  r.query_bias = bias;
  inputs_.mask.relative_keys = r;
  EXPECT_TRUE(Call().ok()) << Call();
  inputs_.mask.relative_keys->table = Input(kF32, {1, 1, 8});
  inputs_.mask.relative_keys->zero_row = 0;
  EXPECT_TRUE(Call().ok()) << Call();  // one row shared by every head

  inputs_.mask.relative_keys->table = Input(DType::kBFloat16, {4, 6, 8});
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("mask.relative_keys.table: dtype bf16 "
                                         "is not supported (expected f32)")));
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {2, 6, 8}, {4, 6, 7}, {4, 0, 8}, {6, 8}, {1, 4, 6, 8}}) {
    inputs_.mask.relative_keys->table = Input(kF32, shape);
    EXPECT_THAT(Call(), StatusIs(kInvalid,
                                 HasSubstr("is not [heads, rows, D] with heads "
                                           "1 or Hq = 4, rows >= 1 and D = 8")))
        << ShapeString(shape);
  }
  inputs_.mask.relative_keys->table = Input(kF32, {4, 6, 8});
  for (int64_t row : {-1, 6}) {
    inputs_.mask.relative_keys->zero_row = row;
    EXPECT_THAT(Call(),
                StatusIs(kInvalid, HasSubstr(absl::StrCat(
                                       "mask.relative_keys.zero_row: ", row,
                                       " is outside [0, rows = 6)"))));
  }
  inputs_.mask.relative_keys->zero_row = 5;
  inputs_.mask.relative_keys->query_bias = absl::MakeConstSpan(bias).subspan(1);
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.relative_keys.query_bias: "
                                           "expected Hq·D = 32 entries ([Hq, "
                                           "D]), got 31")));
  bias[9] = std::numeric_limits<float>::infinity();
  inputs_.mask.relative_keys->query_bias = bias;
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("mask.relative_keys.query_bias[9]: "
                                           "must be finite, got inf")));
  bias[9] = 0.0f;
  inputs_.mask.relative_keys->query_bias = bias;
  inputs_.mask.relative_keys->table = Input(kF32, {4, 6, 8});
  inputs_.method = AttentionMethod::kLinear;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("mask.relative_keys: "
                                                   "relative position keys")));
}

TEST_P(ValidationTest, ScaleNonFinite) {
  inputs_.scale = std::nanf("");
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("scale: must be finite, got nan")));
  inputs_.scale = std::numeric_limits<float>::infinity();
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("scale: must be finite, got inf")));
  inputs_.scale = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("scale: must be finite, got -inf")));
}

TEST_P(ValidationTest, OutputWrongShape) {
  outputs_.output = Output(kF32, {2, 4, 3, 5});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("output: shape [2, 4, 3, 5] "
                                           "does not match [2, 4, 3, 6]")));
  outputs_.output = Output(kF32, {8, 3, 6});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("output: shape [8, 3, 6] does "
                                           "not match [2, 4, 3, 6]")));
}

TEST_P(ValidationTest, OutputFollowsLayout) {
  UseBlhd();
  outputs_.output = Output(kF32, {2, 4, 3, 6});  // BHLD
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("output: shape [2, 4, 3, 6] "
                                           "does not match [2, 3, 4, 6]")));
}

TEST_P(ValidationTest, OutputBool) {
  outputs_.output = Output(DType::kBool, {2, 4, 3, 6});
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("output: dtype bool is not "
                                                   "supported (expected f32, "
                                                   "bf16 or f16)")));
}

TEST_P(ValidationTest, OutputNonDenseLastDimension) {
  outputs_.output.strides[3] = 2;
  EXPECT_THAT(Call(), StatusIs(kInvalid,
                               HasSubstr("output: last dimension must be dense "
                                         "(stride 1), got stride 2")));
}

TEST_P(ValidationTest, OutputNullData) {
  outputs_.output.data = nullptr;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("output: null data")));
}

TEST_P(ValidationTest, WeightsWrongShape) {
  outputs_.weights = Output(kF32, {2, 4, 3, 4});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("weights: shape [2, 4, 3, 4] "
                                           "does not match [2, 4, 3, 5]")));
  // [B, Hq, Lq, Lk] whatever the layout.
  UseBlhd();
  outputs_.weights = Output(kF32, {2, 3, 4, 5});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("weights: shape [2, 3, 4, 5] "
                                           "does not match [2, 4, 3, 5]")));
}

TEST_P(ValidationTest, WeightsWrongDType) {
  outputs_.weights = Output(DType::kBFloat16, {2, 4, 3, 5});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("weights: dtype bf16 is not "
                                           "supported (expected f32)")));
}

TEST_P(ValidationTest, WeightsNotDense) {
  MutableTensorView weights = Output(kF32, {2, 4, 3, 6});
  weights.shape[3] = 5;  // rows of 5 in rows of 6
  outputs_.weights = weights;
  EXPECT_THAT(
      Call(),
      StatusIs(kInvalid, HasSubstr("weights: must be dense (row-major)")));
}

TEST_P(ValidationTest, WeightsNullData) {
  outputs_.weights->data = nullptr;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("weights: null data")));
}

TEST_P(ValidationTest, RowStatsWrongShapeDTypeOrNull) {
  outputs_.entropy = Output(kF32, {2, 4, 3});
  outputs_.max_weight = Output(kF32, {2, 4, 3});
  EXPECT_TRUE(Call().ok()) << Call();
  // [B, Hq, Lq] whatever the layout.
  outputs_.entropy = Output(kF32, {2, 3, 4});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("entropy: expected dense f32 [2, 4, "
                                           "3], got f32 [2, 3, 4]")));
  outputs_.entropy.reset();
  outputs_.max_weight = Output(DType::kBFloat16, {2, 4, 3});
  EXPECT_THAT(Call(),
              StatusIs(kInvalid, HasSubstr("max_weight: expected dense f32 [2, "
                                           "4, 3], got bf16 [2, 4, 3]")));
  outputs_.max_weight = Output(kF32, {2, 4, 3});
  outputs_.max_weight->data = nullptr;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("max_weight: null data")));
}

TEST_P(ValidationTest, RowStatsOnlyForSoftmax) {
  outputs_.weights.reset();
  outputs_.entropy = Output(kF32, {2, 4, 3});
  inputs_.method = AttentionMethod::kLinear;
  EXPECT_THAT(Call(), StatusIs(kInvalid, HasSubstr("entropy: only softmax "
                                                   "attention has weights")));
}

INSTANTIATE_TEST_SUITE_P(Reference, ValidationTest,
                         ::testing::Values(Runner{"reference",
                                                  ReferenceAttention}));

// The engine must reject exactly what the reference rejects. One engine serves
// the whole suite, as one serves a whole server.
absl::Status RunEngine(const AttentionInputs& inputs,
                       const AttentionOutputs& outputs) {
  static const auto* const engine = [] {
    EngineOptions options;
    options.max_isa = testing::CapIsa(Isa::kAuto);
    return new absl::StatusOr<std::unique_ptr<AttentionEngine>>(
        AttentionEngine::Create(options));
  }();
  if (!engine->ok()) return engine->status();
  return (**engine)->Run(inputs, outputs);
}

INSTANTIATE_TEST_SUITE_P(Engine, ValidationTest,
                         ::testing::Values(Runner{"engine", RunEngine}));

}  // namespace
}  // namespace attnserve
