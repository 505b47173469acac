// Block-sparse layouts (MaskSpec::block_sparse): the layout table against its
// definition, the engine's flash and materialized kernels against the
// reference over random shapes and layouts combined with every other mask
// part, a full layout against dense attention, and every malformed field.

#include "core/block_sparse.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

std::shared_ptr<const BlockLayout> BuildOk(const BlockSparseSpec& spec,
                                           int64_t lq, int64_t lk,
                                           int64_t offset = 0) {
  auto layout = BlockLayout::Build(spec, lq, lk, offset);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? *layout : nullptr;
}

TEST(BlockLayoutTest, LocalBandFollowsTheDiagonalBlock) {
  BlockSparseSpec spec;
  spec.block_size = 4;
  spec.local_left = 1;
  // 10 query rows (3 blocks) at the bottom right of 26 keys (7 blocks): d(0)
  // = 16, o = 4.
  auto l = BuildOk(spec, 10, 26, 16);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->q_blocks(), 3);
  EXPECT_EQ(l->k_blocks(), 7);
  for (int64_t qb = 0; qb < 3; ++qb) {
    for (int64_t kb = 0; kb < 7; ++kb) {
      const bool expected = kb == qb + 4 || kb == qb + 3;
      EXPECT_EQ(l->Kept(qb, kb), expected) << qb << "," << kb;
    }
  }
}

TEST(BlockLayoutTest, StridedAndFixedPatterns) {
  BlockSparseSpec spec;
  spec.block_size = 2;
  spec.stride = 3;
  auto strided = BuildOk(spec, 16, 16);
  spec.stride_pattern = StridePattern::kFixed;
  auto fixed = BuildOk(spec, 16, 16);
  ASSERT_NE(strided, nullptr);
  ASSERT_NE(fixed, nullptr);
  for (int64_t qb = 0; qb < 8; ++qb) {
    for (int64_t kb = 0; kb < 8; ++kb) {
      EXPECT_EQ(strided->Kept(qb, kb), (qb - kb) % 3 == 0) << qb << "," << kb;
      EXPECT_EQ(fixed->Kept(qb, kb), kb % 3 == 2) << qb << "," << kb;
    }
  }
}

TEST(BlockLayoutTest, RandomBlocksAreDistinctDeterministicAndSeeded) {
  BlockSparseSpec spec;
  spec.block_size = 8;
  spec.random_blocks = 3;
  spec.seed = 42;
  auto a = BuildOk(spec, 128, 256);
  auto b = BuildOk(spec, 128, 256);
  spec.seed = 43;
  auto c = BuildOk(spec, 128, 256);
  ASSERT_TRUE(a && b && c);
  bool differs = false;
  for (int64_t qb = 0; qb < a->q_blocks(); ++qb) {
    int kept = 0;
    for (int64_t kb = 0; kb < a->k_blocks(); ++kb) {
      kept += a->Kept(qb, kb);
      EXPECT_EQ(a->Kept(qb, kb), b->Kept(qb, kb));
      differs |= a->Kept(qb, kb) != c->Kept(qb, kb);
    }
    EXPECT_EQ(kept, 3) << "query block " << qb;
  }
  EXPECT_TRUE(differs) << "seeds 42 and 43 drew the same blocks";
  // More draws than blocks keep every block.
  spec.random_blocks = 100;
  auto all = BuildOk(spec, 16, 16);
  ASSERT_NE(all, nullptr);
  EXPECT_DOUBLE_EQ(all->density(), 1.0);
}

// The documented procedure, step by step: one splitmix64 stream from the seed,
// per query block a partial Fisher-Yates shuffle of a fresh 0..nkb-1.
TEST(BlockLayoutTest, RandomBlocksFollowTheDocumentedProcedure) {
  BlockSparseSpec spec;
  spec.block_size = 4;
  spec.random_blocks = 2;
  spec.seed = 7;
  auto l = BuildOk(spec, 20, 36);
  ASSERT_NE(l, nullptr);
  base::SplitMix64 g(7);
  for (int64_t qb = 0; qb < 5; ++qb) {
    std::vector<int64_t> perm(9);
    for (int64_t k = 0; k < 9; ++k) perm[k] = k;
    std::vector<bool> expected(9, false);
    for (int64_t t = 0; t < 2; ++t) {
      const int64_t u = t + static_cast<int64_t>(g.Next() % (9 - t));
      std::swap(perm[t], perm[u]);
      expected[perm[t]] = true;
    }
    for (int64_t kb = 0; kb < 9; ++kb) {
      EXPECT_EQ(l->Kept(qb, kb), expected[kb]) << qb << "," << kb;
    }
  }
}

TEST(BlockLayoutTest, GlobalTokensAndBlockMask) {
  BlockSparseSpec spec;
  spec.block_size = 4;
  TestTensor mask(DType::kBool, {2, 3});
  mask.Set({0, 2}, 1.0f);
  mask.Set({1, 0}, 1.0f);
  spec.block_mask = mask.view();
  const std::vector<int32_t> globals = {1, 9};
  spec.global_tokens = globals;
  auto l = BuildOk(spec, 8, 12);
  ASSERT_NE(l, nullptr);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 12; ++j) {
      const bool block =
          (i / 4 == 0 && j / 4 == 2) || (i / 4 == 1 && j / 4 == 0);
      // Token 9 is global as a key only (Lq = 8).
      const bool global = i == 1 || j == 1 || j == 9;
      EXPECT_EQ(l->Allowed(i, j), block || global) << i << "," << j;
    }
  }
  EXPECT_EQ(l->TileKind(0, 2), BlockLayout::Tile::kKept);
  EXPECT_EQ(l->TileKind(0, 1), BlockLayout::Tile::kPartial);  // row 1
  EXPECT_EQ(l->TileKind(1, 1), BlockLayout::Tile::kSkipped);
  EXPECT_EQ(l->TileKind(1, 2), BlockLayout::Tile::kPartial);  // key 9
}

struct BadSpec {
  std::string name;
  BlockSparseSpec spec;
  std::string message;
};

TEST(BlockLayoutTest, RejectsEveryMalformedField) {
  static const std::vector<int32_t> unsorted = {3, 3};
  static const std::vector<int32_t> out_of_range = {0, 40};
  static TestTensor f32_mask(DType::kFloat32, {4, 4});
  static TestTensor short_mask(DType::kBool, {4, 3});
  std::vector<BadSpec> cases;
  auto base = [] {
    BlockSparseSpec s;
    s.block_size = 8;
    s.local_left = 0;
    return s;
  };
  BadSpec c{"block_size 0", base(),
            "mask.block_sparse.block_size: must be in [1, 4096], got 0"};
  c.spec.block_size = 0;
  cases.push_back(c);
  c = {"block_size 4097", base(),
       "mask.block_sparse.block_size: must be in [1, 4096], got 4097"};
  c.spec.block_size = 4097;
  cases.push_back(c);
  c = {"local_left -1", base(),
       "mask.block_sparse.local_left: must be >= 0, got -1"};
  c.spec.local_left = -1;
  cases.push_back(c);
  c = {"local_right -2", base(),
       "mask.block_sparse.local_right: must be >= 0, got -2"};
  c.spec.local_right = -2;
  cases.push_back(c);
  c = {"stride", base(), "mask.block_sparse.stride: must be >= 0, got -3"};
  c.spec.stride = -3;
  cases.push_back(c);
  c = {"random", base(),
       "mask.block_sparse.random_blocks: must be >= 0, got -1"};
  c.spec.random_blocks = -1;
  cases.push_back(c);
  c = {"unsorted globals", base(),
       "mask.block_sparse.global_tokens[1]: 3 does not exceed the previous "
       "entry 3"};
  c.spec.global_tokens = unsorted;
  cases.push_back(c);
  c = {"global out of range", base(),
       "mask.block_sparse.global_tokens[1]: 40 is out of range [0, max(Lq, "
       "Lk) = 32)"};
  c.spec.global_tokens = out_of_range;
  cases.push_back(c);
  c = {"f32 block mask", base(),
       "mask.block_sparse.block_mask: dtype f32 is not supported (expected "
       "bool)"};
  c.spec.block_mask = f32_mask.view();
  cases.push_back(c);
  c = {"block mask shape", base(),
       "mask.block_sparse.block_mask: shape [4, 3] does not match [4, 4]"};
  c.spec.block_mask = short_mask.view();
  cases.push_back(c);
  c = {"empty layout", BlockSparseSpec{},
       "mask.block_sparse: the layout has no component"};
  c.spec.block_size = 8;
  cases.push_back(c);
  c = {"too many blocks", base(), "more than 16777216; use larger blocks"};
  c.spec.block_size = 1;
  for (const BadSpec& bad : cases) {
    auto l = BlockLayout::Build(bad.spec, 32, 32, 0);
    ASSERT_FALSE(l.ok()) << bad.name;
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.name;
    EXPECT_THAT(std::string(l.status().message()), HasSubstr(bad.message))
        << bad.name;
  }
  auto huge = BlockLayout::Build(c.spec, 8192, 8192, 0);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr(c.message));
}

// ---- The engine against the reference.

struct SparseCase {
  int64_t b = 1, hq = 2, hkv = 1, lq = 37, lk = 45, d = 16, dv = 8;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kBHLD;
  BlockSparseSpec spec;
  std::vector<int32_t> globals;
  std::optional<TestTensor> block_mask;
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::kTopLeft;
  std::optional<int64_t> window_left;
  std::vector<int32_t> key_lengths;
  std::optional<TestTensor> explicit_mask;
  std::vector<float> alibi;
  // T5's bias (6 buckets, distance 10), a soft-cap and sinks.
  std::vector<float> rel_table;
  bool rel_bidirectional = false;
  std::optional<float> softcap;
  std::vector<float> sinks;
  std::string name;

  std::vector<int64_t> Dims(int64_t h, int64_t l, int64_t dim) const {
    return layout == Layout::kBHLD ? std::vector<int64_t>{b, h, l, dim}
                                   : std::vector<int64_t>{b, l, h, dim};
  }
};

// Draws a case from `seed`: shape, dtype, layout, a layout of one to four
// components, and other mask parts.
SparseCase DrawCase(uint64_t seed) {
  base::SplitMix64 g(seed);
  SparseCase c;
  c.b = 1 + g.Below(2);
  c.hkv = 1 + g.Below(2);
  c.hq = c.hkv * (1 + g.Below(3));
  c.lq = 1 + g.Below(70);
  c.lk = 1 + g.Below(90);
  c.d = 8 * (1 + g.Below(4));
  c.dv = 8 * (1 + g.Below(3));
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  c.dtype = dtypes[g.Below(3)];
  c.layout = g.OneIn(2) ? Layout::kBHLD : Layout::kBLHD;
  const int64_t sizes[] = {1, 3, 4, 8, 16, 32};
  BlockSparseSpec& s = c.spec;
  s.block_size = sizes[g.Below(6)];
  const int64_t nqb = (c.lq + s.block_size - 1) / s.block_size;
  const int64_t nkb = (c.lk + s.block_size - 1) / s.block_size;
  bool any = false;
  while (!any) {
    if (g.OneIn(2)) {
      s.local_left = g.Below(3);
      if (g.OneIn(2)) s.local_right = g.Below(2);
      any = true;
    }
    if (g.OneIn(3)) {
      s.stride = 1 + g.Below(4);
      s.stride_pattern =
          g.OneIn(2) ? StridePattern::kStrided : StridePattern::kFixed;
      any = true;
    }
    if (g.OneIn(3)) {
      s.random_blocks = g.Below(4);
      s.seed = g.Next();
      any = s.random_blocks > 0 || any;
    }
    if (g.OneIn(4)) {
      for (int64_t t = g.Below(4); t < std::max(c.lq, c.lk);
           t += 5 + g.Below(30))
        c.globals.push_back(static_cast<int32_t>(t));
      any = any || !c.globals.empty();
    }
    if (g.OneIn(4)) {
      TestTensor m(DType::kBool, {nqb, nkb});
      for (int64_t i = 0; i < m.size(); ++i) m.Set(i, g.OneIn(3) ? 1.0f : 0.0f);
      c.block_mask = std::move(m);
      any = true;
    }
  }
  c.causal = g.OneIn(2);
  c.alignment =
      g.OneIn(2) ? CausalAlignment::kTopLeft : CausalAlignment::kBottomRight;
  if (g.OneIn(4)) c.window_left = g.Below(20);
  if (g.OneIn(3)) {
    for (int64_t i = 0; i < c.b; ++i)
      c.key_lengths.push_back(static_cast<int32_t>(g.Below(c.lk + 1)));
  }
  if (g.OneIn(4)) {
    TestTensor m(DType::kBool, {c.lq, c.lk});
    for (int64_t i = 0; i < m.size(); ++i) m.Set(i, g.OneIn(5) ? 0.0f : 1.0f);
    c.explicit_mask = std::move(m);
  }
  if (g.OneIn(4)) {
    for (int64_t h = 0; h < c.hq; ++h) c.alibi.push_back(0.05f * (h + 1));
  }
  if (g.OneIn(3)) {
    for (int64_t e = 0; e < c.hq * 6; ++e) {
      c.rel_table.push_back(0.2f * static_cast<float>(g.Below(11)) - 1.0f);
    }
    c.rel_bidirectional = g.OneIn(2);
  }
  if (g.OneIn(4)) c.softcap = 0.75f;
  if (g.OneIn(4)) {
    for (int64_t h = 0; h < c.hq; ++h) c.sinks.push_back(1.0f - 0.5f * h);
  }
  c.name = absl::StrCat("seed ", seed, ": B", c.b, " Hq", c.hq, " Hkv", c.hkv,
                        " Lq", c.lq, " Lk", c.lk, " D", c.d, " Dv", c.dv, " ",
                        DTypeName(c.dtype), " bs", s.block_size);
  return c;
}

void ExpectEngineMatchesReference(const SparseCase& c, Isa isa,
                                  KernelPath path) {
  SCOPED_TRACE(c.name);
  const TestTensor q = TestTensor::Random(c.dtype, c.Dims(c.hq, c.lq, c.d), 1);
  const TestTensor k = TestTensor::Random(c.dtype, c.Dims(c.hkv, c.lk, c.d), 2);
  const TestTensor v =
      TestTensor::Random(c.dtype, c.Dims(c.hkv, c.lk, c.dv), 3);
  AttentionInputs in;
  in.query = q.view();
  in.key = k.view();
  in.value = v.view();
  in.layout = c.layout;
  in.kernel = path;
  BlockSparseSpec spec = c.spec;
  spec.global_tokens = c.globals;
  if (c.block_mask) spec.block_mask = c.block_mask->view();
  in.mask.block_sparse = spec;
  in.mask.causal = c.causal;
  in.mask.alignment = c.alignment;
  in.mask.window_left = c.window_left;
  in.mask.key_lengths = c.key_lengths;
  if (c.explicit_mask) in.mask.explicit_mask = c.explicit_mask->view();
  in.mask.alibi_slopes = c.alibi;
  if (!c.rel_table.empty()) {
    RelativeBiasSpec r;
    r.table = c.rel_table;
    r.num_buckets = 6;
    r.max_distance = 10;
    r.bidirectional = c.rel_bidirectional;
    in.mask.relative_bias = r;
  }
  in.softcap = c.softcap;
  in.sinks = c.sinks;

  const bool weights = path == KernelPath::kMaterialized;
  const std::vector<int64_t> out_dims = c.Dims(c.hq, c.lq, c.dv);
  TestTensor out(DType::kFloat32, out_dims), ref(DType::kFloat32, out_dims);
  out.Fill(std::nanf(""));
  TestTensor w(DType::kFloat32, {c.b, c.hq, c.lq, c.lk});
  TestTensor ref_w(DType::kFloat32, {c.b, c.hq, c.lq, c.lk});
  w.Fill(std::nanf(""));
  AttentionOutputs outputs{out.mutable_view(), std::nullopt};
  AttentionOutputs ref_outputs{ref.mutable_view(), std::nullopt};
  if (weights) {
    outputs.weights = w.mutable_view();
    ref_outputs.weights = ref_w.mutable_view();
  }
  EngineOptions options;
  options.max_isa = CapIsa(isa);
  options.num_threads = 2;
  auto engine = AttentionEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const absl::Status st = (*engine)->Run(in, outputs);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(ReferenceAttention(in, ref_outputs).ok());
  const float tol = c.dtype == DType::kFloat32 ? 2e-5f : 2e-2f;
  int reported = 0;
  for (int64_t i = 0; i < out.size(); ++i) {
    if (!(std::fabs(out.at(i) - ref.at(i)) <=
          tol * (1.0f + std::fabs(ref.at(i)))) &&
        reported++ < 5) {
      ADD_FAILURE() << "output[" << i << "] = " << out.at(i) << ", reference "
                    << ref.at(i);
    }
  }
  if (!weights) return;
  for (int64_t i = 0; i < w.size(); ++i) {
    if (!(std::fabs(w.at(i) - ref_w.at(i)) <= tol) && reported++ < 5) {
      ADD_FAILURE() << "weights[" << i << "] = " << w.at(i) << ", reference "
                    << ref_w.at(i);
    }
  }
}

class BlockSparseEngineTest : public ::testing::TestWithParam<Isa> {};

TEST_P(BlockSparseEngineTest, FlashMatchesReferenceOverRandomCases) {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    ExpectEngineMatchesReference(DrawCase(seed), GetParam(), KernelPath::kAuto);
  }
}

TEST_P(BlockSparseEngineTest, MaterializedMatchesReferenceOverRandomCases) {
  for (uint64_t seed = 101; seed <= 130; ++seed) {
    ExpectEngineMatchesReference(DrawCase(seed), GetParam(),
                                 KernelPath::kMaterialized);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Isas, BlockSparseEngineTest,
    ::testing::ValuesIn(::attnserve::testing::MachineIsas()),
    [](const ::testing::TestParamInfo<Isa>& info) {
      return std::string(IsaName(info.param));
    });

// A layout that keeps every block gives dense attention exactly as the engine
// computes it without one (the same products, block by block).
TEST(BlockSparseTest, FullLayoutEqualsDense) {
  for (const int64_t bs : {16, 64, 100}) {
    const int64_t lq = 300, lk = 333;
    const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 2, lq, 32}, 4);
    const TestTensor k = TestTensor::Random(DType::kFloat32, {1, 2, lk, 32}, 5);
    const TestTensor v = TestTensor::Random(DType::kFloat32, {1, 2, lk, 16}, 6);
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = v.view();
    in.mask.causal = true;
    in.mask.alignment = CausalAlignment::kBottomRight;
    TestTensor dense(DType::kFloat32, {1, 2, lq, 16});
    TestTensor sparse(DType::kFloat32, {1, 2, lq, 16});
    auto engine = AttentionEngine::Create(EngineOptions{});
    ASSERT_TRUE(engine.ok());
    ASSERT_TRUE((*engine)->Run(in, {dense.mutable_view(), std::nullopt}).ok());
    BlockSparseSpec spec;
    spec.block_size = bs;
    spec.local_left = 1000;
    spec.local_right = 1000;
    in.mask.block_sparse = spec;
    auto plan = (*engine)->Validate(in);
    ASSERT_TRUE(plan.ok());
    EXPECT_DOUBLE_EQ(plan->shape.flops, plan->shape.dense_flops());
    ASSERT_TRUE((*engine)->Run(in, {sparse.mutable_view(), std::nullopt}).ok());
    for (int64_t i = 0; i < dense.size(); ++i) {
      ASSERT_NEAR(sparse.at(i), dense.at(i), 2e-6f) << "bs " << bs << " @" << i;
    }
  }
}

TEST(BlockSparseTest, FlopsCountTheKeptBlocks) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 1, 256, 8}, 1);
  AttentionInputs in;
  in.query = q.view();
  in.key = q.view();
  in.value = q.view();
  BlockSparseSpec spec;
  spec.block_size = 32;
  spec.local_left = 0;  // the diagonal blocks: 8 of 64
  in.mask.block_sparse = spec;
  auto engine = AttentionEngine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok());
  auto plan = (*engine)->Validate(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(plan->shape.flops, plan->shape.dense_flops() / 8);
  EXPECT_EQ(plan->kernel, KernelPath::kFlash);
}

TEST(BlockSparseTest, DecodeKernelIsRefusedAndAutoUsesFlash) {
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 1, 2, 8}, 1);
  const TestTensor k = TestTensor::Random(DType::kFloat32, {1, 1, 2048, 8}, 2);
  AttentionInputs in;
  in.query = q.view();
  in.key = k.view();
  in.value = k.view();
  BlockSparseSpec spec;
  spec.block_size = 64;
  spec.stride = 4;
  in.mask.block_sparse = spec;
  TestTensor out(DType::kFloat32, {1, 1, 2, 8});
  TestTensor ref(DType::kFloat32, {1, 1, 2, 8});
  auto engine = AttentionEngine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->Run(in, {out.mutable_view(), std::nullopt}).ok());
  ASSERT_TRUE(ReferenceAttention(in, {ref.mutable_view(), std::nullopt}).ok());
  for (int64_t i = 0; i < out.size(); ++i)
    EXPECT_NEAR(out.at(i), ref.at(i), 1e-5);
  in.kernel = KernelPath::kDecode;
  const absl::Status st =
      (*engine)->Run(in, {out.mutable_view(), std::nullopt});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("the decode kernel does not take block-sparse"));
}

// No keys or no queries: the layout has no blocks on that side, and the call
// gives zeros (or nothing) like a dense one (found by the fuzzer).
TEST(BlockSparseTest, EmptyKeysOrQueries) {
  BlockSparseSpec spec;
  spec.block_size = 4;
  spec.local_left = 1;
  spec.random_blocks = 2;
  for (const auto& [lq, lk] :
       std::vector<std::pair<int64_t, int64_t>>{{5, 0}, {0, 7}, {0, 0}}) {
    auto layout = BlockLayout::Build(spec, lq, lk, 0);
    ASSERT_TRUE(layout.ok()) << layout.status();
    const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 1, lq, 8}, 1);
    const TestTensor k = TestTensor::Random(DType::kFloat32, {1, 1, lk, 8}, 2);
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = k.view();
    in.mask.block_sparse = spec;
    TestTensor out(DType::kFloat32, {1, 1, lq, 8});
    out.Fill(1.0f);
    auto engine = AttentionEngine::Create(EngineOptions{});
    ASSERT_TRUE(engine.ok());
    ASSERT_TRUE((*engine)->Run(in, {out.mutable_view(), std::nullopt}).ok());
    for (int64_t i = 0; i < out.size(); ++i) EXPECT_EQ(out.at(i), 0.0f);
  }
}

}  // namespace
}  // namespace attnserve
