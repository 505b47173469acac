// Every kernel path of the engine against the reference oracle, over dtypes,
// layouts, mask parts alone and combined, GQA/MQA, tile sizes and ISA paths.
// Long because it is the sweep: the cases are generated from small tables,
// each table next to the test that runs it.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/matmul.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class MaskKind {
  kNone,
  kCausalTopLeft,
  kCausalBottomRight,
  kWindow,
  kKeyLengths,
  kBoolMask,
  kFloatMask,
  kAlibi,
  kAll,
  // Not mask parts, but applied with them: logit soft-capping, attention
  // sinks, and both over causal, ALiBi and key lengths.
  kSoftcap,
  kSinks,
  kSoftcapSinks,
  // T5's relative position bias: bidirectional alone, unidirectional over
  // causal bottom-right with ALiBi and key lengths.
  kRelativeBias,
  kRelativeBiasCausal,
  // StreamingLLM: causal bottom-right, a sliding window and the first keys
  // kept (sink_tokens).
  kSinkWindow,
  // Relative position keys over a two-sided window: distances clipped at
  // both ends of the table; a table per head with a query bias (4 heads), or
  // one shared table (3 heads).
  kRelativeKeys,
};

std::string MaskName(MaskKind m) {
  switch (m) {
    case MaskKind::kNone:
      return "NoMask";
    case MaskKind::kCausalTopLeft:
      return "CausalTL";
    case MaskKind::kCausalBottomRight:
      return "CausalBR";
    case MaskKind::kWindow:
      return "Window";
    case MaskKind::kKeyLengths:
      return "KeyLengths";
    case MaskKind::kBoolMask:
      return "BoolMask";
    case MaskKind::kFloatMask:
      return "FloatMask";
    case MaskKind::kAlibi:
      return "Alibi";
    case MaskKind::kAll:
      return "AllMasks";
    case MaskKind::kSoftcap:
      return "Softcap";
    case MaskKind::kSinks:
      return "Sinks";
    case MaskKind::kSoftcapSinks:
      return "SoftcapSinks";
    case MaskKind::kRelativeBias:
      return "RelativeBias";
    case MaskKind::kRelativeBiasCausal:
      return "RelativeBiasCausal";
    case MaskKind::kSinkWindow:
      return "SinkWindow";
    case MaskKind::kRelativeKeys:
      return "RelativeKeys";
  }
  return "?";
}

struct Shape {
  int64_t b, hq, hkv, lq, lk, d, dv;
};

// One attention problem with owned inputs, built deterministically from a seed.
struct Case {
  Shape shape;
  DType dtype = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  Layout layout = Layout::kBHLD;
  MaskKind mask = MaskKind::kNone;
  std::optional<float> scale;

  TestTensor q, k, v, explicit_mask;
  std::vector<int32_t> key_lengths;
  std::vector<float> alibi;
  std::optional<float> softcap;
  std::vector<float> sinks;
  std::vector<float> rel_table;
  TestTensor relk_table;
  std::vector<float> relk_query_bias;

  void Build(uint64_t seed) {
    const Shape& s = shape;
    auto dims = [&](int64_t h, int64_t l, int64_t d) -> std::vector<int64_t> {
      if (layout == Layout::kBHLD) return {s.b, h, l, d};
      return {s.b, l, h, d};
    };
    q = TestTensor::Random(dtype, dims(s.hq, s.lq, s.d), seed, -2.0f, 2.0f);
    k = TestTensor::Random(dtype, dims(s.hkv, s.lk, s.d), seed + 1, -2.0f,
                           2.0f);
    v = TestTensor::Random(dtype, dims(s.hkv, s.lk, s.dv), seed + 2);
    const bool all = mask == MaskKind::kAll;
    const bool capped = mask == MaskKind::kSoftcapSinks;
    const bool rel_causal = mask == MaskKind::kRelativeBiasCausal;
    if (mask == MaskKind::kKeyLengths || all || capped || rel_causal) {
      for (int64_t b = 0; b < s.b; ++b) {
        // Covers 0 (a fully masked batch entry), partial and full lengths.
        key_lengths.push_back(static_cast<int32_t>(
            b == 0 ? s.lk - s.lk / 3 : (b == 1 ? 0 : s.lk)));
      }
    }
    if (mask == MaskKind::kBoolMask || all) {
      explicit_mask =
          TestTensor::Random(DType::kBool, {s.b, 1, s.lq, s.lk}, seed + 3);
      // Random() sets lo + (hi-lo)*u in [-1, 1): nonzero almost everywhere;
      // make about a quarter of the keys masked instead.
      TestTensor u = TestTensor::Random(DType::kFloat32, {s.b, 1, s.lq, s.lk},
                                        seed + 4, 0.0f, 1.0f);
      for (int64_t i = 0; i < u.size(); ++i) {
        explicit_mask.Set(i, u.at(i) < 0.25f ? 0.0f : 1.0f);
      }
    } else if (mask == MaskKind::kFloatMask) {
      explicit_mask = TestTensor::Random(DType::kFloat32, {s.hq, s.lq, s.lk},
                                         seed + 5, -1.0f, 1.0f);
      for (int64_t i = 0; i < explicit_mask.size(); i += 7)
        explicit_mask.Set(i, -kInf);
    }
    if (mask == MaskKind::kAlibi || all || capped || rel_causal) {
      for (int64_t h = 0; h < s.hq; ++h) {
        alibi.push_back(std::pow(2.0f, -8.0f * (h + 1) / s.hq));
      }
    }
    // Scores here reach about ±15: a cap of 4 bends most of them.
    if (mask == MaskKind::kSoftcap || capped) softcap = 4.0f;
    if (mask == MaskKind::kSinks || capped) {
      // From a sink that takes most of the weight to one that takes little.
      for (int64_t h = 0; h < s.hq; ++h) sinks.push_back(3.0f - 2.5f * h);
    }
    if (mask == MaskKind::kRelativeBias || rel_causal) {
      // 12 buckets (6 a side bidirectional: 3 exact, then logarithmic up to
      // distance 20): the shapes here reach all of them.
      const TestTensor t = TestTensor::Random(DType::kFloat32, {s.hq, 12},
                                              seed + 6, -2.0f, 2.0f);
      rel_table = t.ToFloats();
    }
    if (mask == MaskKind::kRelativeKeys) {
      // 21 rows, distance 0 at row 8: distances -8 .. 12, clipped beyond.
      const bool shared = s.hq % 2 == 1;
      relk_table = TestTensor::Random(
          DType::kFloat32, {shared ? 1 : s.hq, 21, s.d}, seed + 7, -1.0f, 1.0f);
      if (!shared) {
        relk_query_bias = TestTensor::Random(DType::kFloat32, {s.hq, s.d},
                                             seed + 8, -1.0f, 1.0f)
                              .ToFloats();
      }
    }
  }

  AttentionInputs Inputs(KernelPath path) const {
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = v.view();
    in.layout = layout;
    in.kernel = path;
    in.scale = scale;
    MaskSpec& m = in.mask;
    const bool all = mask == MaskKind::kAll;
    if (mask == MaskKind::kCausalTopLeft ||
        mask == MaskKind::kCausalBottomRight || all ||
        mask == MaskKind::kSoftcapSinks ||
        mask == MaskKind::kRelativeBiasCausal ||
        mask == MaskKind::kSinkWindow) {
      m.causal = true;
      m.alignment = mask == MaskKind::kCausalTopLeft
                        ? CausalAlignment::kTopLeft
                        : CausalAlignment::kBottomRight;
    }
    if (mask == MaskKind::kWindow) {
      m.window_left = 5;
      m.window_right = 3;
    }
    if (all) {
      m.window_left = 20;
      m.sink_tokens = 4;
    }
    if (mask == MaskKind::kSinkWindow) {
      m.window_left = 6;
      m.sink_tokens = 3;
    }
    if (mask == MaskKind::kRelativeKeys) {
      m.window_left = 30;
      m.window_right = 12;
      RelativeKeysSpec r;
      r.table = relk_table.view();
      r.zero_row = 8;
      r.query_bias = relk_query_bias;
      m.relative_keys = r;
    }
    m.key_lengths = key_lengths;
    if (explicit_mask.size() > 0) m.explicit_mask = explicit_mask.view();
    m.alibi_slopes = alibi;
    in.softcap = softcap;
    in.sinks = sinks;
    if (!rel_table.empty()) {
      RelativeBiasSpec r;
      r.table = rel_table;
      r.num_buckets = 12;
      r.max_distance = 20;
      r.bidirectional = mask == MaskKind::kRelativeBias;
      m.relative_bias = r;
    }
    return in;
  }

  std::vector<int64_t> OutputShape() const {
    const Shape& s = shape;
    if (layout == Layout::kBHLD) return {s.b, s.hq, s.lq, s.dv};
    return {s.b, s.lq, s.hq, s.dv};
  }
};

float Tolerance(DType dtype) {
  return dtype == DType::kFloat32 ? 1e-5f : 2e-2f;
}

// Runs the engine and the reference on `c` and compares output (and weights,
// and with `row_stats` each row's entropy and largest weight).
void ExpectMatchesReference(AttentionEngine& engine, const Case& c,
                            KernelPath path, bool row_stats = false) {
  const bool weights = path == KernelPath::kMaterialized;
  const AttentionInputs in = c.Inputs(path);
  const Shape& s = c.shape;

  TestTensor out(c.out_dtype, c.OutputShape());
  // Poison the outputs: every element must be written.
  for (int64_t i = 0; i < out.size(); ++i) out.Set(i, std::nanf(""));
  TestTensor w(DType::kFloat32, {s.b, s.hq, s.lq, s.lk});
  for (int64_t i = 0; i < w.size(); ++i) w.Set(i, std::nanf(""));
  AttentionOutputs outputs{out.mutable_view(), std::nullopt};
  if (weights) outputs.weights = w.mutable_view();
  const std::vector<int64_t> stats_shape = {s.b, s.hq, s.lq};
  TestTensor entropy(DType::kFloat32, stats_shape);
  TestTensor max_weight(DType::kFloat32, stats_shape);
  TestTensor ref_entropy(DType::kFloat32, stats_shape);
  TestTensor ref_max_weight(DType::kFloat32, stats_shape);
  if (row_stats) {
    for (int64_t i = 0; i < entropy.size(); ++i) {
      entropy.Set(i, std::nanf(""));
      max_weight.Set(i, std::nanf(""));
    }
    outputs.entropy = entropy.mutable_view();
    outputs.max_weight = max_weight.mutable_view();
  }
  ASSERT_TRUE(engine.Run(in, outputs).ok()) << engine.Run(in, outputs);

  TestTensor ref_out(DType::kFloat32, c.OutputShape());
  TestTensor ref_w(DType::kFloat32, {s.b, s.hq, s.lq, s.lk});
  AttentionOutputs ref_outputs{ref_out.mutable_view(), std::nullopt};
  if (weights) ref_outputs.weights = ref_w.mutable_view();
  if (row_stats) {
    ref_outputs.entropy = ref_entropy.mutable_view();
    ref_outputs.max_weight = ref_max_weight.mutable_view();
  }
  ASSERT_TRUE(ReferenceAttention(in, ref_outputs).ok());

  const float tol =
      Tolerance(c.dtype == DType::kFloat32 ? c.out_dtype : c.dtype);
  int reported = 0;
  for (int64_t i = 0; i < out.size(); ++i) {
    const float ref = ref_out.at(i);
    const float got = out.at(i);
    // Rounding the reference to the output dtype is part of the expected error.
    const float bound = tol * (1.0f + std::fabs(ref));
    if (!(std::fabs(got - ref) <= bound) && reported++ < 5) {
      ADD_FAILURE() << "output[" << i << "] = " << got << ", reference " << ref
                    << ", |err| " << std::fabs(got - ref) << " > " << bound;
    }
  }
  if (row_stats) {
    // Entropy is up to ln(Lk) nats, computed from f32 scores.
    const float stol = c.dtype == DType::kFloat32 ? 2e-5f : 2e-3f;
    for (int64_t i = 0; i < entropy.size(); ++i) {
      for (const auto& [name, got, ref] :
           {std::tuple("entropy", entropy.at(i), ref_entropy.at(i)),
            std::tuple("max_weight", max_weight.at(i), ref_max_weight.at(i))}) {
        if (!(std::fabs(got - ref) <= stol * (1.0f + std::fabs(ref))) &&
            reported++ < 5) {
          ADD_FAILURE() << name << "[" << i << "] = " << got << ", reference "
                        << ref;
        }
      }
    }
  }
  if (!weights) return;
  const float wtol = Tolerance(c.dtype);
  for (int64_t row = 0; row < s.b * s.hq * s.lq; ++row) {
    // A row's weights sum to 1, or with a sink to the reference's sum (its
    // share left to the sink).
    double sum = 0.0, ref_sum = 0.0;
    bool ref_zero = true;
    for (int64_t j = 0; j < s.lk; ++j) {
      const int64_t i = row * s.lk + j;
      const float ref = ref_w.at(i);
      const float got = w.at(i);
      sum += got;
      ref_sum += ref;
      ref_zero = ref_zero && ref == 0.0f;
      if (!(std::fabs(got - ref) <= wtol * (1.0f + std::fabs(ref))) &&
          reported++ < 5) {
        ADD_FAILURE() << "weights[" << i << "] = " << got << ", reference "
                      << ref;
      }
    }
    if (ref_zero) {
      for (int64_t j = 0; j < s.lk; ++j) {
        EXPECT_EQ(w.at(row * s.lk + j), 0.0f) << "fully masked row " << row;
      }
    } else if (s.lk > 0) {
      EXPECT_NEAR(sum, c.sinks.empty() ? 1.0 : ref_sum, 1e-4)
          << "weights row " << row;
      if (!c.sinks.empty()) {
        EXPECT_LT(ref_sum, 1.0) << "weights row " << row;
      }
    }
  }
}

std::unique_ptr<AttentionEngine> MakeEngine(Isa isa, int q_block = 0,
                                            int k_block = 512,
                                            int threads = 2) {
  EngineOptions options;
  options.max_isa = CapIsa(isa);
  options.q_block = q_block;
  options.k_block = k_block;
  options.num_threads = threads;
  auto engine = AttentionEngine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::string PathName(KernelPath p) {
  switch (p) {
    case KernelPath::kFlash:
      return "Flash";
    case KernelPath::kMaterialized:
      return "Materialized";
    case KernelPath::kDecode:
      return "Decode";
    case KernelPath::kLinear:
      return "Linear";
    case KernelPath::kLsh:
      return "Lsh";
    case KernelPath::kAuto:
      return "Auto";
  }
  return "?";
}

std::string DTypeLabel(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
    case DType::kBool:
      return "Bool";
    case DType::kInt8:
      return "Int8";
  }
  return "?";
}

// The mask sweep: a small odd shape with GQA, small tiles so that several q and
// k blocks are crossed, skipped and partially masked.
using MaskParam = std::tuple<DType, Layout, MaskKind, KernelPath, Isa, bool>;

class EngineMaskTest : public ::testing::TestWithParam<MaskParam> {};

TEST_P(EngineMaskTest, MatchesReference) {
  const auto [dtype, layout, mask, path, isa, small_tiles] = GetParam();
  auto engine = small_tiles ? MakeEngine(isa, 8, 16) : MakeEngine(isa);
  ASSERT_NE(engine, nullptr);
  for (const Shape& shape :
       {Shape{3, 4, 2, 37, 45, 24, 16}, Shape{2, 3, 3, 45, 37, 17, 20}}) {
    Case c;
    c.shape = shape;
    c.dtype = dtype;
    c.out_dtype = dtype;
    c.layout = layout;
    c.mask = mask;
    c.Build(static_cast<uint64_t>(shape.lq * 131 + static_cast<int>(mask)));
    SCOPED_TRACE(absl::StrCat("Lq=", shape.lq, " Lk=", shape.lk));
    // Row statistics with the small tiles (where every row's softmax spans
    // several key blocks and splits); the default tiles without them (on an
    // AMX CPU, the tile path, which keeps none).
    ExpectMatchesReference(*engine, c, path, /*row_stats=*/small_tiles);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, EngineMaskTest,
    ::testing::Combine(
        ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
        ::testing::Values(Layout::kBHLD, Layout::kBLHD),
        ::testing::Values(MaskKind::kNone, MaskKind::kCausalTopLeft,
                          MaskKind::kCausalBottomRight, MaskKind::kWindow,
                          MaskKind::kKeyLengths, MaskKind::kBoolMask,
                          MaskKind::kFloatMask, MaskKind::kAlibi,
                          MaskKind::kAll, MaskKind::kSoftcap, MaskKind::kSinks,
                          MaskKind::kSoftcapSinks, MaskKind::kRelativeBias,
                          MaskKind::kRelativeBiasCausal, MaskKind::kSinkWindow,
                          MaskKind::kRelativeKeys),
        ::testing::Values(KernelPath::kFlash, KernelPath::kMaterialized,
                          KernelPath::kDecode),
        ::testing::ValuesIn(::attnserve::testing::MachineIsas()),
        ::testing::Bool()),
    [](const ::testing::TestParamInfo<MaskParam>& info) {
      const MaskParam& p = info.param;
      return absl::StrCat(DTypeLabel(std::get<0>(p)),
                          std::get<1>(p) == Layout::kBHLD ? "BHLD" : "BLHD",
                          MaskName(std::get<2>(p)), PathName(std::get<3>(p)),
                          ::attnserve::testing::IsaLabel(std::get<4>(p)),
                          std::get<5>(p) ? "SmallTiles" : "");
    });

// The shape sweep: ones, odd sizes, every head dimension class, Lq != Lk both
// ways, GQA and MQA, each through every path.
using ShapeParam = std::tuple<Shape, DType, MaskKind, KernelPath>;

class EngineShapeTest : public ::testing::TestWithParam<ShapeParam> {};

TEST_P(EngineShapeTest, MatchesReference) {
  const auto [shape, dtype, mask, path] = GetParam();
  auto engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  Case c;
  c.shape = shape;
  c.dtype = dtype;
  // bf16/f16 inputs with f32 output: the selectable output dtype.
  c.out_dtype = DType::kFloat32;
  c.mask = mask;
  c.Build(7);
  // Row statistics with f32 inputs (bf16 ones keep the AMX tile path, which
  // has none, on a CPU with AMX).
  ExpectMatchesReference(*engine, c, path,
                         /*row_stats=*/dtype == DType::kFloat32);
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, EngineShapeTest,
    ::testing::Combine(
        ::testing::Values(
            Shape{1, 1, 1, 1, 1, 1, 1}, Shape{1, 2, 1, 7, 7, 3, 3},
            Shape{2, 4, 1, 129, 77, 64, 64}, Shape{1, 2, 2, 1000, 129, 80, 80},
            Shape{1, 4, 2, 129, 1000, 128, 128},
            Shape{1, 8, 2, 1, 1000, 256, 256}, Shape{1, 2, 1, 7, 1000, 64, 32},
            // MLA with absorbed weights: one latent kv head, D 576, Dv 512.
            Shape{1, 16, 1, 1, 700, 576, 512},
            Shape{1, 4, 1, 33, 200, 576, 512}),
        ::testing::Values(DType::kFloat32, DType::kBFloat16),
        ::testing::Values(MaskKind::kNone, MaskKind::kCausalBottomRight,
                          MaskKind::kAll),
        ::testing::Values(KernelPath::kFlash, KernelPath::kMaterialized,
                          KernelPath::kDecode)),
    [](const ::testing::TestParamInfo<ShapeParam>& info) {
      const Shape& s = std::get<0>(info.param);
      return absl::StrCat(
          "B", s.b, "Hq", s.hq, "Hkv", s.hkv, "Lq", s.lq, "Lk", s.lk, "D", s.d,
          "Dv", s.dv, DTypeLabel(std::get<1>(info.param)),
          MaskName(std::get<2>(info.param)), PathName(std::get<3>(info.param)));
    });

// Ragged edges (kernel_common.h, "Tile shapes"): every length 1..300, so that
// every residue of the query block, the row group and the key granule ends a
// tile, self-attention (causal and not) and cross-attention, both layouts,
// GQA, padded keys; and tile sizes off the granule (q_block 40, k_block 96).
// Flash at every length, the materialized kernel at two in three, decode at
// one in ten.
class EngineRaggedTest
    : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(EngineRaggedTest, EveryLengthTo300MatchesReference) {
  const auto [dtype, odd_tiles] = GetParam();
  auto engine =
      odd_tiles ? MakeEngine(Isa::kAuto, 40, 96) : MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  for (int64_t l = 1; l <= 300; ++l) {
    Case c;
    // Self-attention on odd L, cross (Lk = 301 - L) on even L.
    c.shape = Shape{1, 2, 1, l, l % 2 == 1 ? l : 301 - l, 16, 16};
    c.dtype = dtype;
    c.out_dtype = DType::kFloat32;
    c.layout = l % 4 < 2 ? Layout::kBHLD : Layout::kBLHD;
    const MaskKind masks[] = {MaskKind::kCausalTopLeft, MaskKind::kNone,
                              MaskKind::kCausalBottomRight,
                              MaskKind::kKeyLengths};
    c.mask = masks[l % 4];
    c.Build(static_cast<uint64_t>(l));
    SCOPED_TRACE(absl::StrCat("Lq=", c.shape.lq, " Lk=", c.shape.lk,
                              " mask=", MaskName(c.mask)));
    ExpectMatchesReference(*engine, c, KernelPath::kFlash);
    if (l % 10 == 0) ExpectMatchesReference(*engine, c, KernelPath::kDecode);
    if (l % 3 != 0) {
      ExpectMatchesReference(*engine, c, KernelPath::kMaterialized);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, EngineRaggedTest,
    ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<DType, bool>>& info) {
      return absl::StrCat(DTypeLabel(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "OddTiles" : "");
    });

// After Prepare, flash calls of any length create no product primitive, on
// this engine or another (the cache is the process's), whatever the mask; nor
// do calls that return the weights (the materialized kernel; regression: its
// products wrote into the weights rows, a primitive per Lk).
TEST(EngineTest, NewLengthsCreateNoPrimitiveAfterPrepare) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const Layout layout : {Layout::kBHLD, Layout::kBLHD}) {
      auto engine = MakeEngine(Isa::kAuto);
      auto other = MakeEngine(Isa::kAuto, 0, 512, 1);
      ASSERT_NE(engine, nullptr);
      ASSERT_NE(other, nullptr);
      Case like;
      like.shape = Shape{1, 4, 2, 1, 1, 64, 64};
      like.dtype = dtype;
      like.layout = layout;
      like.Build(1);
      ASSERT_TRUE(engine->Prepare(like.Inputs(KernelPath::kAuto)).ok());
      absl::StatusOr<MatmulCache*> cache = MatmulCache::Shared();
      ASSERT_TRUE(cache.ok());
      const int64_t created = (*cache)->created();
      for (int64_t l = 1; l <= 1100; l += l < 200 ? 1 : 37) {
        for (const MaskKind mask : {MaskKind::kCausalTopLeft, MaskKind::kNone,
                                    MaskKind::kKeyLengths}) {
          Case c;
          c.shape = Shape{1, 4, 2, l, l % 3 == 0 ? l + 50 : l, 64, 64};
          c.dtype = dtype;
          c.layout = layout;
          c.mask = mask;
          c.Build(static_cast<uint64_t>(l));
          TestTensor out(dtype, c.OutputShape());
          AttentionOutputs outputs{out.mutable_view(), std::nullopt};
          AttentionEngine& e = l % 2 == 0 ? *engine : *other;
          ASSERT_TRUE(e.Run(c.Inputs(KernelPath::kFlash), outputs).ok());
          if (l % 7 == 0 || l > 200) {
            TestTensor weights(DType::kFloat32,
                               {c.shape.b, c.shape.hq, c.shape.lq, c.shape.lk});
            AttentionOutputs with_weights{out.mutable_view(),
                                          weights.mutable_view()};
            ASSERT_TRUE(
                e.Run(c.Inputs(KernelPath::kMaterialized), with_weights).ok());
          }
        }
        ASSERT_EQ((*cache)->created(), created)
            << "L = " << l << " created a primitive (" << DTypeLabel(dtype)
            << (layout == Layout::kBHLD ? " BHLD" : " BLHD") << ")";
      }
    }
  }
}

// The AMX tile products (Isa::kAmx, bf16 flash with head dims multiples of
// 32 and 16): lengths 1..300 against the reference, self and cross,
// causal both ways, padded keys, both layouts, GQA, head dims 32 to 128, the
// default tiles and q_block 48 / k_block 96 (AMX-sized) and k_block 80 (not:
// oneDNN's products). Then that the tiles really run: a call of a shape no
// product primitive exists for creates none on kAmx, while kAvx512 (oneDNN's
// products) creates some for the same call. On a CPU without AMX the engine
// must refuse kAmx; a run capped at AVX2 has no AMX path to test.
TEST(EngineAmxTest, LengthsTo300MatchReferenceOnTiles) {
  if (CapIsa(Isa::kAmx) != Isa::kAmx) {
    // The AVX2-capped run: the same kind of call on the capped path.
    auto engine = MakeEngine(Isa::kAmx, 256);
    ASSERT_NE(engine, nullptr);
    ASSERT_EQ(engine->isa(), Isa::kAvx2);
    Case c;
    c.shape = Shape{2, 2, 1, 300, 300, 64, 64};
    c.dtype = DType::kBFloat16;
    c.mask = MaskKind::kCausalTopLeft;
    c.Build(3);
    ExpectMatchesReference(*engine, c, KernelPath::kFlash);
    return;
  }
  const std::vector<Isa> isas = ::attnserve::testing::MachineIsas();
  if (std::find(isas.begin(), isas.end(), Isa::kAmx) == isas.end()) {
    EngineOptions options;
    options.max_isa = Isa::kAmx;
    EXPECT_EQ(AttentionEngine::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  // q_block 256 and 80: row sets of several 64-row groups, which the causal
  // diagonal and windows multiply each only as far as its own last key. The
  // kAvx512 run keeps oneDNN's bf16 products (which every other bf16 sweep
  // hands to the tiles on this CPU) tested at the same shapes.
  const struct {
    Isa isa;
    int q_block, k_block;
  } tiles[] = {{Isa::kAmx, 0, 512}, {Isa::kAmx, 256, 512},
               {Isa::kAmx, 80, 96}, {Isa::kAmx, 48, 96},
               {Isa::kAmx, 0, 80},  {Isa::kAvx512, 256, 512}};
  const int64_t dims[][2] = {{64, 64}, {32, 16}, {128, 48}, {96, 64}};
  for (const auto& t : tiles) {
    auto engine = MakeEngine(t.isa, t.q_block, t.k_block);
    ASSERT_NE(engine, nullptr);
    ASSERT_EQ(engine->isa(), t.isa);
    // Every length through the first row groups and key granules, then
    // every 5th (every 7th with the small tiles).
    for (int64_t l = 1; l <= 300;
         l += t.q_block == 0 && t.k_block == 512 && l < 70 ? 1
              : t.q_block == 0 && t.k_block == 512         ? 5
                                                           : 7) {
      Case c;
      const int64_t* d = dims[l % 4];
      // Batch 2 on even lengths: key_lengths then gives its second sequence
      // no key at all.
      c.shape = Shape{l % 2 == 0 ? 2 : 1,
                      l % 3 == 0 ? 4 : 2,
                      2,
                      l,
                      l % 2 == 1 ? l : 301 - l,
                      d[0],
                      d[1]};
      c.dtype = DType::kBFloat16;
      c.out_dtype = l % 5 == 0 ? DType::kFloat32 : DType::kBFloat16;
      c.layout = l % 4 < 2 ? Layout::kBHLD : Layout::kBLHD;
      const MaskKind masks[] = {MaskKind::kCausalTopLeft,
                                MaskKind::kNone,
                                MaskKind::kCausalBottomRight,
                                MaskKind::kKeyLengths,
                                MaskKind::kWindow,
                                MaskKind::kAll};
      c.mask = masks[l % 6];
      c.Build(static_cast<uint64_t>(l + 1000));
      SCOPED_TRACE(absl::StrCat(IsaName(t.isa), " q_block=", t.q_block,
                                " k_block=", t.k_block, " Lq=", c.shape.lq,
                                " Lk=", c.shape.lk, " D=", d[0], " Dv=", d[1],
                                " mask=", MaskName(c.mask)));
      ExpectMatchesReference(*engine, c, KernelPath::kFlash);
    }
  }

  // Several key blocks with scores spread far apart (scale 8 or -3 over
  // inputs in [-2, 2]): a later block's scores exceed a row's running max by
  // more than the lazy max allows, and the row is redone with its block's max.
  for (const float scale : {8.0f, -3.0f}) {
    auto engine = MakeEngine(Isa::kAmx, 64, 96);
    ASSERT_NE(engine, nullptr);
    for (const MaskKind mask : {MaskKind::kNone, MaskKind::kCausalBottomRight,
                                MaskKind::kKeyLengths}) {
      Case c;
      c.shape = Shape{2, 2, 1, 130, 300, 64, 64};
      c.dtype = DType::kBFloat16;
      c.mask = mask;
      c.scale = scale;
      c.Build(77);
      SCOPED_TRACE(absl::StrCat("scale=", scale, " mask=", MaskName(mask)));
      ExpectMatchesReference(*engine, c, KernelPath::kFlash);
    }
  }

  absl::StatusOr<MatmulCache*> cache = MatmulCache::Shared();
  ASSERT_TRUE(cache.ok());
  Case c;
  c.shape = Shape{1, 2, 1, 333, 555, 160, 208};  // dims used nowhere else
  c.dtype = DType::kBFloat16;
  c.out_dtype = DType::kBFloat16;
  c.mask = MaskKind::kCausalBottomRight;
  c.Build(5);
  const int64_t created = (*cache)->created();
  auto amx = MakeEngine(Isa::kAmx);
  ASSERT_NE(amx, nullptr);
  ExpectMatchesReference(*amx, c, KernelPath::kFlash);
  EXPECT_EQ((*cache)->created(), created);
  auto avx512 = MakeEngine(Isa::kAvx512);
  ASSERT_NE(avx512, nullptr);
  ExpectMatchesReference(*avx512, c, KernelPath::kFlash);
  EXPECT_GT((*cache)->created(), created);
}

TEST(EngineTest, DegenerateShapes) {
  auto engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  for (const Shape& shape :
       {Shape{0, 2, 1, 4, 4, 8, 8}, Shape{1, 2, 1, 0, 4, 8, 8},
        Shape{1, 0, 1, 4, 4, 8, 8}}) {
    Case c;
    c.shape = shape;
    c.Build(1);
    for (KernelPath path :
         {KernelPath::kFlash, KernelPath::kMaterialized, KernelPath::kDecode}) {
      ExpectMatchesReference(*engine, c, path);
    }
  }
  // Lk = 0: every row is fully masked, the output is zeros.
  Case c;
  c.shape = Shape{2, 2, 1, 5, 0, 8, 6};
  c.Build(2);
  for (KernelPath path :
       {KernelPath::kFlash, KernelPath::kMaterialized, KernelPath::kDecode}) {
    TestTensor out(DType::kFloat32, c.OutputShape());
    out.Fill(std::nanf(""));
    TestTensor w(DType::kFloat32, {2, 2, 5, 0});
    AttentionOutputs outputs{out.mutable_view(), std::nullopt};
    if (path == KernelPath::kMaterialized) outputs.weights = w.mutable_view();
    ASSERT_TRUE(engine->Run(c.Inputs(path), outputs).ok());
    for (int64_t i = 0; i < out.size(); ++i) EXPECT_EQ(out.at(i), 0.0f);
  }
}

// Regression: the AVX2 softmax padded ragged rows with -inf before scaling, so
// a scale of 0 (hosted additive scoring passes its scores as a float mask with
// scale 0) gave NaN (-inf * 0) and a negative scale gave +inf maxima.
TEST(EngineTest, ZeroAndNegativeScalesMatchTheReference) {
  std::vector<Isa> isas = ::attnserve::testing::MachineIsas();
  isas.push_back(Isa::kAuto);
  for (Isa isa : isas) {
    auto engine = MakeEngine(isa);
    ASSERT_NE(engine, nullptr);
    for (float scale : {0.0f, -0.7f}) {
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kFloatMask}) {
        Case c;
        c.shape = Shape{1, 2, 1, 5, 13, 8, 8};
        c.mask = mask;
        c.scale = scale;
        c.Build(7);
        SCOPED_TRACE(absl::StrCat("isa ", IsaName(engine->isa()), " scale ",
                                  scale, " mask ", static_cast<int>(mask)));
        for (KernelPath path : {KernelPath::kFlash, KernelPath::kMaterialized,
                                KernelPath::kDecode}) {
          ExpectMatchesReference(*engine, c, path);
        }
      }
    }
  }
}

TEST(EngineTest, FullyMaskedRowsAreExactlyZero) {
  auto engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  Case c;
  c.shape = Shape{1, 2, 2, 6, 9, 16, 16};
  c.mask = MaskKind::kFloatMask;
  c.Build(3);
  // Row 2 of head 1 masked with -inf everywhere.
  for (int64_t j = 0; j < 9; ++j) c.explicit_mask.Set({1, 2, j}, -kInf);
  for (KernelPath path :
       {KernelPath::kFlash, KernelPath::kMaterialized, KernelPath::kDecode}) {
    TestTensor out(DType::kFloat32, c.OutputShape());
    TestTensor w(DType::kFloat32, {1, 2, 6, 9});
    w.Fill(std::nanf(""));
    AttentionOutputs outputs{out.mutable_view(), std::nullopt};
    if (path == KernelPath::kMaterialized) outputs.weights = w.mutable_view();
    ASSERT_TRUE(engine->Run(c.Inputs(path), outputs).ok());
    for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(out.at({0, 1, 2, d}), 0.0f);
    if (path == KernelPath::kMaterialized) {
      for (int64_t j = 0; j < 9; ++j) EXPECT_EQ(w.at({0, 1, 2, j}), 0.0f);
    }
  }
}

TEST(EngineTest, ReadsStridedAndUnalignedInputs) {
  auto engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  Case c;
  c.shape = Shape{2, 2, 1, 33, 40, 16, 16};
  c.mask = MaskKind::kCausalBottomRight;
  c.Build(5);
  TestTensor expected(DType::kFloat32, c.OutputShape());
  ASSERT_TRUE(ReferenceAttention(c.Inputs(KernelPath::kFlash),
                                 {expected.mutable_view(), std::nullopt})
                  .ok());

  // The query as a slice (every other row of a wider buffer, one byte off
  // alignment).
  const int64_t rows = 2 * 2 * 33;
  std::vector<char> storage(rows * 2 * 16 * sizeof(float) + 1);
  char* base = storage.data() + 1;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(base + r * 2 * 16 * sizeof(float),
                static_cast<const char*>(c.q.data()) + r * 16 * sizeof(float),
                16 * sizeof(float));
  }
  AttentionInputs in = c.Inputs(KernelPath::kFlash);
  in.query.data = base;
  in.query.strides = {2 * 33 * 32, 33 * 32, 32, 1};
  for (KernelPath path : {KernelPath::kFlash, KernelPath::kDecode}) {
    in.kernel = path;
    TestTensor out(DType::kFloat32, c.OutputShape());
    ASSERT_TRUE(engine->Run(in, {out.mutable_view(), std::nullopt}).ok());
    for (int64_t i = 0; i < out.size(); ++i) {
      EXPECT_NEAR(out.at(i), expected.at(i),
                  1e-5f * (1 + std::fabs(expected.at(i))));
    }
  }
}

TEST(EngineTest, ConcurrentRunsMatchSequentialRuns) {
  auto engine = MakeEngine(Isa::kAuto, 0, 512, 1);
  ASSERT_NE(engine, nullptr);
  std::vector<Case> cases(4);
  std::vector<TestTensor> expected;
  for (size_t i = 0; i < cases.size(); ++i) {
    cases[i].shape = Shape{1, 2, 1, 40 + int64_t(i) * 9, 70, 32, 32};
    cases[i].mask = MaskKind::kCausalTopLeft;
    cases[i].Build(i);
    expected.emplace_back(DType::kFloat32, cases[i].OutputShape());
    ASSERT_TRUE(engine
                    ->Run(cases[i].Inputs(KernelPath::kAuto),
                          {expected.back().mutable_view(), std::nullopt})
                    .ok());
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(cases.size(), 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 20; ++rep) {
        TestTensor out(DType::kFloat32, cases[i].OutputShape());
        const absl::Status s = engine->Run(cases[i].Inputs(KernelPath::kAuto),
                                           {out.mutable_view(), std::nullopt});
        if (!s.ok() || std::memcmp(out.data(), expected[i].data(),
                                   out.size() * sizeof(float)) != 0) {
          ++mismatches[i];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(mismatches[i], 0) << "case " << i;
}

TEST(EngineTest, KernelMustMatchWeightsRequest) {
  auto engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  Case c;
  c.shape = Shape{1, 1, 1, 4, 4, 8, 8};
  c.Build(1);
  TestTensor out(DType::kFloat32, c.OutputShape());
  TestTensor w(DType::kFloat32, {1, 1, 4, 4});
  EXPECT_THAT(
      engine->Run(c.Inputs(KernelPath::kFlash),
                  {out.mutable_view(), w.mutable_view()}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("only the materialized kernel returns weights")));
  EXPECT_THAT(
      engine->Run(c.Inputs(KernelPath::kMaterialized),
                  {out.mutable_view(), std::nullopt}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("materialized kernel needs a weights output")));
}

TEST(EngineTest, CreateRejectsBadOptions) {
  EngineOptions options;
  options.num_threads = -1;
  EXPECT_THAT(
      AttentionEngine::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_threads")));
  options = EngineOptions();
  options.k_block = 0;
  EXPECT_THAT(
      AttentionEngine::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k_block")));
  options = EngineOptions();
  options.q_block = -3;
  EXPECT_THAT(
      AttentionEngine::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("q_block")));
  options = EngineOptions();
  options.serial_below_flops = -1;
  EXPECT_THAT(AttentionEngine::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("serial_below_flops: must be >= 0, got -1")));
}

// Below serial_below_flops a call runs on the calling thread alone; its
// results are the team's, bit for bit (every item is computed alone either
// way), for each kernel.
TEST(EngineTest, SerialSmallCallsMatchTheTeamBitForBit) {
  EngineOptions team_options;
  team_options.num_threads = 2;
  EngineOptions serial_options = team_options;
  serial_options.serial_below_flops = 1e12;
  auto team = AttentionEngine::Create(team_options);
  auto serial = AttentionEngine::Create(serial_options);
  ASSERT_TRUE(team.ok() && serial.ok());
  for (KernelPath path :
       {KernelPath::kFlash, KernelPath::kMaterialized, KernelPath::kDecode}) {
    SCOPED_TRACE(KernelPathName(path));
    const int64_t lq = path == KernelPath::kDecode ? 2 : 40, lk = 70;
    const TestTensor q = TestTensor::Random(DType::kFloat32, {2, 4, lq, 32}, 7);
    const TestTensor k = TestTensor::Random(DType::kFloat32, {2, 2, lk, 32}, 8);
    const TestTensor v = TestTensor::Random(DType::kFloat32, {2, 2, lk, 32}, 9);
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = v.view();
    in.kernel = path;
    in.mask.causal = true;
    const bool weights = path == KernelPath::kMaterialized;
    TestTensor out_team(DType::kFloat32, {2, 4, lq, 32});
    TestTensor out_serial(DType::kFloat32, {2, 4, lq, 32});
    TestTensor w_team(DType::kFloat32, {2, 4, lq, lk});
    TestTensor w_serial(DType::kFloat32, {2, 4, lq, lk});
    AttentionOutputs team_out{out_team.mutable_view(), std::nullopt};
    AttentionOutputs serial_out{out_serial.mutable_view(), std::nullopt};
    if (weights) {
      team_out.weights = w_team.mutable_view();
      serial_out.weights = w_serial.mutable_view();
    }
    ASSERT_TRUE((*team)->Run(in, team_out).ok());
    ASSERT_TRUE((*serial)->Run(in, serial_out).ok());
    const size_t bytes = static_cast<size_t>(out_team.size()) * sizeof(float);
    if (path == KernelPath::kDecode) {
      // The decode kernel splits keys by thread count: the same values
      // within float rounding, not the same bits.
      for (int64_t i = 0; i < out_team.size(); ++i) {
        EXPECT_NEAR(out_team.at(i), out_serial.at(i), 1e-5f);
      }
    } else {
      EXPECT_EQ(std::memcmp(out_team.data(), out_serial.data(), bytes), 0);
    }
    if (weights) {
      EXPECT_EQ(std::memcmp(w_team.data(), w_serial.data(),
                            static_cast<size_t>(w_team.size()) * sizeof(float)),
                0);
    }
  }
}

TEST(EngineTest, ReportsItsConfiguration) {
  // The lowest ISA this CPU runs (AVX2 on x86-64).
  const Isa lowest = ::attnserve::testing::MachineIsas().back();
  auto engine = MakeEngine(lowest, 0, 512, 3);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->isa(), lowest);
  EXPECT_EQ(engine->num_threads(), 3);
  EXPECT_EQ(OneDnnVersion().substr(0, 2), "2.");
}

// RunBatch computes each plan as its own Run would, whatever its kernel: a
// flash, a materialized (weights) and a linear call of different shapes.
TEST(EngineBatchTest, EachPlanAsItsOwnRun) {
  auto engine = AttentionEngine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  struct Call {
    TestTensor q, k, v, out, weights;
    AttentionInputs in;
    AttentionPlan plan;
    bool with_weights;
  };
  std::vector<Call> calls(3);
  const int64_t lens[3] = {40, 9, 33};
  for (int c = 0; c < 3; ++c) {
    Call& call = calls[c];
    const int64_t l = lens[c];
    call.q = TestTensor::Random(DType::kFloat32, {2, 2, l, 16}, 10 * c + 1);
    call.k = TestTensor::Random(DType::kFloat32, {2, 1, l + 3, 16}, 10 * c + 2);
    call.v = TestTensor::Random(DType::kFloat32, {2, 1, l + 3, 8}, 10 * c + 3);
    call.in.query = call.q.view();
    call.in.key = call.k.view();
    call.in.value = call.v.view();
    call.in.mask.causal = c == 0;
    if (c == 2) call.in.method = AttentionMethod::kLinear;
    call.with_weights = c == 1;
    auto plan = (*engine)->Validate(call.in, call.with_weights);
    ASSERT_TRUE(plan.ok()) << plan.status();
    call.plan = *std::move(plan);
    call.out = TestTensor(DType::kFloat32, {2, 2, l, 8});
    call.weights = TestTensor(DType::kFloat32, {2, 2, l, l + 3});
  }
  EXPECT_EQ(calls[0].plan.kernel, KernelPath::kFlash);
  EXPECT_EQ(calls[1].plan.kernel, KernelPath::kMaterialized);
  EXPECT_EQ(calls[2].plan.kernel, KernelPath::kLinear);
  auto outputs_of = [](Call& call, TestTensor* out, TestTensor* weights) {
    AttentionOutputs o;
    o.output = out->mutable_view();
    if (call.with_weights) o.weights = weights->mutable_view();
    return o;
  };
  std::vector<const AttentionPlan*> plans;
  std::vector<AttentionOutputs> outputs;
  std::vector<TestTensor> alone_out, alone_weights;
  for (Call& call : calls) {
    alone_out.push_back(call.out);
    alone_weights.push_back(call.weights);
  }
  for (size_t c = 0; c < calls.size(); ++c) {
    ASSERT_TRUE((*engine)
                    ->Run(calls[c].plan, outputs_of(calls[c], &alone_out[c],
                                                    &alone_weights[c]))
                    .ok());
    plans.push_back(&calls[c].plan);
    outputs.push_back(outputs_of(calls[c], &calls[c].out, &calls[c].weights));
  }
  ASSERT_TRUE((*engine)->RunBatch(plans, outputs).ok());
  for (size_t c = 0; c < calls.size(); ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(std::memcmp(calls[c].out.data(), alone_out[c].data(),
                          calls[c].out.size() * sizeof(float)),
              0);
    EXPECT_EQ(std::memcmp(calls[c].weights.data(), alone_weights[c].data(),
                          calls[c].weights.size() * sizeof(float)),
              0);
  }

  // Refused before anything runs, naming the call.
  outputs[2].weights = calls[1].weights.mutable_view();
  const absl::Status status = (*engine)->RunBatch(plans, outputs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("calls[2]: weights"));
  EXPECT_EQ((*engine)
                ->RunBatch(plans, absl::MakeConstSpan(outputs).subspan(1))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve
