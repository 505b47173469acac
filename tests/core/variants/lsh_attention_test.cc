// LSH attention (AttentionMethod::kLsh): the engine's kernel against the
// float64 oracle over random and chosen shapes on every ISA path, the
// one-bucket/one-chunk case against exact shared-QK attention, the rotation
// procedure as documented, determinism, and every malformed parameter.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/reference.h"
#include "core/variants/lsh.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::MachineIsas;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::Eq;

std::unique_ptr<AttentionEngine> MakeEngine(Isa isa, int threads = 0) {
  EngineOptions options;
  options.max_isa = CapIsa(isa);
  options.num_threads = threads;
  absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
      AttentionEngine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

struct LshCase {
  int64_t b = 1, h = 1, l = 8, d = 4, dv = 4;
  DType dtype = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  Layout layout = Layout::kBHLD;
  bool causal = false;
  bool key_lengths = false;
  int64_t hashes = 1, buckets = 2, chunk = 4;
  uint64_t seed = 1;
  bool weights = false;
  bool zero_rows = false;  // some queries are all zeros

  std::string Name() const {
    return absl::StrCat("B", b, "H", h, "L", l, "D", d, "Dv", dv, "_",
                        DTypeName(dtype), "to", DTypeName(out_dtype), "_",
                        layout == Layout::kBHLD ? "BHLD" : "BLHD",
                        causal ? "_causal" : "", key_lengths ? "_lens" : "",
                        "_r", hashes, "nb", buckets, "c", chunk,
                        weights ? "_weights" : "", zero_rows ? "_zeros" : "");
  }
  std::vector<int64_t> Dims(int64_t last) const {
    if (layout == Layout::kBHLD) return {b, h, l, last};
    return {b, l, h, last};
  }
  LshSpec Spec() const { return {hashes, buckets, chunk, seed}; }
};

// A case's tensors, with the query drawn so that no position's bucket is
// within float rounding of a tie (see NearTie).
struct LshInputs {
  TestTensor q, v;
  std::vector<int32_t> key_lengths;

  AttentionInputs Inputs(const LshCase& c) const {
    AttentionInputs in;
    in.query = q.view();
    in.value = v.view();
    in.layout = c.layout;
    in.method = AttentionMethod::kLsh;
    in.lsh = c.Spec();
    in.mask.causal = c.causal;
    in.mask.key_lengths = key_lengths;
    return in;
  }
};

// Query row (b, h, i) of the case's tensor, as the values its dtype holds.
std::vector<double> QueryRow(const LshCase& c, const TestTensor& q, int64_t b,
                             int64_t h, int64_t i) {
  std::vector<double> x(c.d);
  for (int64_t d = 0; d < c.d; ++d) {
    x[d] = c.layout == Layout::kBHLD ? q.at({b, h, i, d}) : q.at({b, i, h, d});
  }
  return x;
}

// True when some nonzero query's two largest hash values [xR, -xR] in some
// round are closer than 1e-4 |x|: the kernel hashes in float, the oracle in
// double, and only such near-ties can put a position in different buckets
// in the two. (All-zero queries tie exactly, to bucket 0, in both.)
bool NearTie(const LshCase& c, const TestTensor& q) {
  if (c.buckets == 1) return false;
  const std::vector<double> rot = LshRotations(c.Spec(), c.d);
  const int64_t half = c.buckets / 2;
  for (int64_t b = 0; b < c.b; ++b) {
    for (int64_t h = 0; h < c.h; ++h) {
      for (int64_t i = 0; i < c.l; ++i) {
        const std::vector<double> x = QueryRow(c, q, b, h, i);
        double norm = 0.0;
        for (double e : x) norm += e * e;
        norm = std::sqrt(norm);
        if (norm == 0.0) continue;
        for (int64_t r = 0; r < c.hashes; ++r) {
          std::vector<double> values;
          for (int64_t col = 0; col < half; ++col) {
            double dot = 0.0;
            for (int64_t d = 0; d < c.d; ++d) {
              dot += x[d] * rot[(r * c.d + d) * half + col];
            }
            values.push_back(dot);
            values.push_back(-dot);
          }
          std::partial_sort(values.begin(), values.begin() + 2, values.end(),
                            std::greater<double>());
          if (values[0] - values[1] < 1e-4 * norm) return true;
        }
      }
    }
  }
  return false;
}

LshInputs MakeInputs(const LshCase& c) {
  LshInputs in;
  for (uint64_t attempt = 0;; ++attempt) {
    in.q = TestTensor::Random(c.dtype, c.Dims(c.d), c.seed * 7919 + attempt,
                              -2.0f, 2.0f);
    if (c.zero_rows) {
      for (int64_t row = 0; row < c.b * c.h * c.l; row += 5) {
        for (int64_t d = 0; d < c.d; ++d) in.q.Set(row * c.d + d, 0.0f);
      }
    }
    if (!NearTie(c, in.q)) break;
    if (attempt == 50) {
      ADD_FAILURE() << "no input without a near-tie in 50 draws";
      break;
    }
  }
  in.v = TestTensor::Random(c.dtype, c.Dims(c.dv), c.seed * 104729 + 3);
  if (c.key_lengths) {
    for (int64_t b = 0; b < c.b; ++b) {
      // A fully masked entry, a partial one, a full one.
      const int64_t len = b % 3 == 0 ? c.l - c.l / 3 : (b % 3 == 1 ? 0 : c.l);
      in.key_lengths.push_back(static_cast<int32_t>(len));
    }
  }
  return in;
}

// Output tolerance relative to 1 + |ref|: float32 throughout vs float64, or
// a 16-bit input/output dtype (measured on this sweep: below 1e-6 and 2e-3).
float Tolerance(const LshCase& c) {
  if (c.dtype != DType::kFloat32 || c.out_dtype != DType::kFloat32) {
    return 1e-2f;
  }
  return 1e-5f;
}

// Runs the engine and the oracle on `c` and compares output and weights.
void ExpectMatchesReference(AttentionEngine& engine, const LshCase& c) {
  const LshInputs data = MakeInputs(c);
  const AttentionInputs in = data.Inputs(c);
  const std::vector<int64_t> out_dims = c.Dims(c.dv);

  TestTensor out(c.out_dtype, out_dims);
  for (int64_t i = 0; i < out.size(); ++i) out.Set(i, std::nanf(""));
  TestTensor w(DType::kFloat32, {c.b, c.h, c.l, c.l});
  for (int64_t i = 0; i < w.size(); ++i) w.Set(i, std::nanf(""));
  AttentionOutputs outputs{out.mutable_view(), std::nullopt};
  if (c.weights) outputs.weights = w.mutable_view();
  const absl::Status st = engine.Run(in, outputs);
  ASSERT_TRUE(st.ok()) << st;

  TestTensor ref(DType::kFloat32, out_dims);
  TestTensor ref_w(DType::kFloat32, {c.b, c.h, c.l, c.l});
  AttentionOutputs ref_outputs{ref.mutable_view(), std::nullopt};
  if (c.weights) ref_outputs.weights = ref_w.mutable_view();
  const absl::Status ref_st = ReferenceAttention(in, ref_outputs);
  ASSERT_TRUE(ref_st.ok()) << ref_st;

  const float tol = Tolerance(c);
  int reported = 0;
  for (int64_t i = 0; i < out.size(); ++i) {
    const float bound = tol * (1.0f + std::fabs(ref.at(i)));
    if (!(std::fabs(out.at(i) - ref.at(i)) <= bound) && reported++ < 5) {
      ADD_FAILURE() << "output[" << i << "] = " << out.at(i) << ", reference "
                    << ref.at(i) << " (bound " << bound << ")";
    }
  }
  if (!c.weights) return;
  // Absolute; measured below 4e-7 (f32) and 5e-4 (bf16 products round the
  // normalised keys to bf16).
  const float wtol = c.dtype == DType::kFloat32 ? 2e-6f : 2e-3f;
  for (int64_t i = 0; i < w.size(); ++i) {
    if (!(std::fabs(w.at(i) - ref_w.at(i)) <= wtol) && reported++ < 10) {
      ADD_FAILURE() << "weights[" << i << "] = " << w.at(i) << ", reference "
                    << ref_w.at(i);
    }
  }
}

// Cases chosen for the kernel's edges: chunks that do not divide L, chunk 1,
// chunks past L, chunks wider than a key tile (512) and a query block (128),
// more positions than a hashing block (256), many rounds, 4096 buckets (one
// round per hashing product), more buckets than positions, zero queries.
std::vector<LshCase> ChosenCases() {
  std::vector<LshCase> cases;
  auto add = [&](LshCase c) { cases.push_back(c); };
  add({1, 1, 10, 4, 4, DType::kFloat32, DType::kFloat32, Layout::kBHLD});
  {
    LshCase c;
    c.l = 37, c.d = 16, c.dv = 8, c.hashes = 2, c.buckets = 4, c.chunk = 5;
    add(c);
    c.causal = true;
    add(c);
    c.key_lengths = true, c.b = 3;
    add(c);
    c.weights = true;
    add(c);
    c.layout = Layout::kBLHD, c.h = 2;
    add(c);
  }
  {
    LshCase c;
    c.l = 23, c.d = 8, c.dv = 3, c.hashes = 3, c.buckets = 8, c.chunk = 1;
    add(c);
    c.causal = true, c.weights = true;
    add(c);
  }
  {
    LshCase c;
    c.l = 50, c.d = 8, c.dv = 8, c.hashes = 2, c.buckets = 6, c.chunk = 64;
    add(c);
    c.causal = true, c.key_lengths = true, c.b = 2, c.weights = true;
    add(c);
  }
  {
    LshCase c;
    c.l = 1300, c.d = 16, c.dv = 16, c.hashes = 2, c.buckets = 4;
    c.chunk = 600;  // 1200 candidates: three key tiles; 600 rows: 5 blocks
    add(c);
    c.causal = true, c.key_lengths = true, c.b = 2, c.layout = Layout::kBLHD;
    add(c);
  }
  {
    LshCase c;
    c.l = 700, c.h = 2, c.d = 32, c.dv = 16, c.hashes = 4, c.buckets = 32;
    c.chunk = 48;
    add(c);
    c.dtype = DType::kBFloat16, c.out_dtype = DType::kBFloat16;
    add(c);
    c.dtype = DType::kFloat16, c.out_dtype = DType::kFloat32, c.causal = true;
    add(c);
    c.dtype = DType::kFloat32, c.out_dtype = DType::kFloat16;
    add(c);
  }
  {
    LshCase c;
    c.l = 40, c.d = 4, c.dv = 5, c.hashes = 64, c.buckets = 2, c.chunk = 3;
    c.weights = true;
    add(c);
  }
  {
    LshCase c;
    c.l = 60, c.d = 3, c.dv = 2, c.hashes = 3, c.buckets = 4096, c.chunk = 7;
    c.causal = true;
    add(c);
  }
  {
    LshCase c;
    c.l = 31, c.d = 8, c.dv = 8, c.hashes = 2, c.buckets = 8, c.chunk = 4;
    c.zero_rows = true, c.weights = true;
    add(c);
    c.causal = true, c.dtype = DType::kBFloat16;
    add(c);
  }
  {
    LshCase c;
    c.l = 1, c.hashes = 2, c.buckets = 2, c.chunk = 1;
    add(c);
    c.key_lengths = true, c.b = 2, c.weights = true;
    add(c);
  }
  return cases;
}

// Random shapes, dtypes, layouts, masks and parameters from a fixed seed.
std::vector<LshCase> RandomCases(int count) {
  base::SplitMix64 rng(20240612);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
  const int64_t buckets[] = {1, 2, 4, 8, 10, 16, 64};
  std::vector<LshCase> cases;
  for (int n = 0; n < count; ++n) {
    LshCase c;
    c.b = 1 + rng.Below(2);
    c.h = 1 + rng.Below(3);
    c.l = 1 + rng.Below(160);
    c.d = 1 + rng.Below(48);
    c.dv = 1 + rng.Below(40);
    c.dtype = dtypes[rng.Below(3)];
    c.out_dtype = rng.OneIn(2) ? c.dtype : dtypes[rng.Below(3)];
    c.layout = rng.OneIn(2) ? Layout::kBHLD : Layout::kBLHD;
    c.causal = rng.OneIn(2);
    c.key_lengths = rng.OneIn(3);
    c.hashes = 1 + rng.Below(4);
    c.buckets = buckets[rng.Below(7)];
    c.chunk = rng.OneIn(5) ? c.l + rng.Below(10) : 1 + rng.Below(40);
    c.seed = rng.Next();
    c.weights = rng.OneIn(3);
    cases.push_back(c);
  }
  return cases;
}

class LshAttentionSweepTest : public ::testing::TestWithParam<Isa> {};

TEST_P(LshAttentionSweepTest, ChosenCasesMatchReference) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  for (const LshCase& c : ChosenCases()) {
    SCOPED_TRACE(c.Name());
    ExpectMatchesReference(*engine, c);
  }
}

TEST_P(LshAttentionSweepTest, RandomCasesMatchReference) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  for (const LshCase& c : RandomCases(40)) {
    SCOPED_TRACE(c.Name());
    ExpectMatchesReference(*engine, c);
  }
}

INSTANTIATE_TEST_SUITE_P(Lsh, LshAttentionSweepTest,
                         ::testing::ValuesIn(MachineIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

// One bucket and chunk_size >= L put every position in one chunk: LSH
// attention is then exact shared-QK attention (keys = the normalised
// queries, no self-attention unless nothing else is allowed), whatever the
// number of rounds, which all agree.
TEST(LshAttentionTest, OneBucketOneChunkIsFullSharedQkAttention) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  for (const bool causal : {false, true}) {
    for (const bool lens : {false, true}) {
      for (const Layout layout : {Layout::kBHLD, Layout::kBLHD}) {
        LshCase c;
        c.b = 3, c.h = 2, c.l = 45, c.d = 16, c.dv = 12;
        c.layout = layout;
        c.causal = causal, c.key_lengths = lens;
        c.buckets = 1, c.hashes = causal ? 3 : 1;
        c.chunk = lens ? 45 : 100;
        SCOPED_TRACE(c.Name());
        const LshInputs data = MakeInputs(c);

        // Exact attention: key = q / |q| (in float), a bool mask without the
        // diagonal except where a row allows nothing else.
        TestTensor key(DType::kFloat32, c.Dims(c.d));
        for (int64_t row = 0; row < c.b * c.h * c.l; ++row) {
          double norm = 0.0;
          for (int64_t d = 0; d < c.d; ++d) {
            norm += double(data.q.at(row * c.d + d)) * data.q.at(row * c.d + d);
          }
          const float inv =
              norm > 0.0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
          for (int64_t d = 0; d < c.d; ++d) {
            key.Set(row * c.d + d, data.q.at(row * c.d + d) * inv);
          }
        }
        TestTensor mask(DType::kBool, {c.b, 1, c.l, c.l});
        for (int64_t b = 0; b < c.b; ++b) {
          const int64_t kl = lens ? data.key_lengths[b] : c.l;
          for (int64_t i = 0; i < c.l; ++i) {
            const int64_t others =
                std::min(kl, causal ? i + 1 : c.l) - (i < kl ? 1 : 0);
            for (int64_t j = 0; j < c.l; ++j) {
              mask.Set({b, 0, i, j}, j != i || others == 0 ? 1.0f : 0.0f);
            }
          }
        }
        AttentionInputs exact = data.Inputs(c);
        exact.method = AttentionMethod::kSoftmax;
        exact.key = key.view();
        exact.mask.explicit_mask = mask.view();

        for (const bool weights : {false, true}) {
          TestTensor out(DType::kFloat32, c.Dims(c.dv));
          TestTensor want(DType::kFloat32, c.Dims(c.dv));
          TestTensor w(DType::kFloat32, {c.b, c.h, c.l, c.l});
          TestTensor want_w(DType::kFloat32, {c.b, c.h, c.l, c.l});
          AttentionOutputs lsh_out{out.mutable_view(), std::nullopt};
          AttentionOutputs exact_out{want.mutable_view(), std::nullopt};
          if (weights) {
            lsh_out.weights = w.mutable_view();
            exact_out.weights = want_w.mutable_view();
          }
          ASSERT_TRUE(engine->Run(data.Inputs(c), lsh_out).ok());
          const absl::Status st = engine->Run(exact, exact_out);
          ASSERT_TRUE(st.ok()) << st;
          for (int64_t i = 0; i < out.size(); ++i) {
            ASSERT_NEAR(out.at(i), want.at(i),
                        2e-5 * (1 + std::fabs(want.at(i))))
                << "output[" << i << "]";
          }
          for (int64_t i = 0; i < w.size(); ++i) {
            ASSERT_NEAR(w.at(i), want_w.at(i), 1e-5) << "weights[" << i << "]";
          }
        }
      }
    }
  }
}

// Small cases worked out by hand: nothing else allowed means attending
// oneself; nothing allowed at all means zeros.
TEST(LshAttentionTest, SelfOnlyWhenNothingElseIsAllowed) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  LshCase c;
  c.b = 2, c.l = 3, c.d = 2, c.dv = 2, c.buckets = 1, c.chunk = 4;
  c.causal = true;
  LshInputs data = MakeInputs(c);
  data.key_lengths = {3, 1};
  TestTensor out(DType::kFloat32, c.Dims(c.dv));
  ASSERT_TRUE(
      engine->Run(data.Inputs(c), {out.mutable_view(), std::nullopt}).ok());
  for (int64_t d = 0; d < c.dv; ++d) {
    // Row 0 (causal) has only itself; row 1 only key 0 (itself excluded).
    EXPECT_FLOAT_EQ(out.at({0, 0, 0, d}), data.v.at({0, 0, 0, d}));
    EXPECT_FLOAT_EQ(out.at({0, 0, 1, d}), data.v.at({0, 0, 0, d}));
    // key_lengths 1: every row attends key 0 only.
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_FLOAT_EQ(out.at({1, 0, i, d}), data.v.at({1, 0, 0, d}));
    }
  }
  data.key_lengths = {0, 0};
  ASSERT_TRUE(
      engine->Run(data.Inputs(c), {out.mutable_view(), std::nullopt}).ok());
  for (int64_t i = 0; i < out.size(); ++i) EXPECT_EQ(out.at(i), 0.0f);
}

// LshRotations against the procedure as docs/long_sequences.md states it,
// written out again here.
TEST(LshAttentionTest, RotationsFollowTheDocumentedProcedure) {
  const LshSpec spec{3, 10, 1, 0x1234abcdull};
  const int64_t dim = 7;  // 7 * 5 = 35 normals per round: odd
  const std::vector<double> got = LshRotations(spec, dim);
  ASSERT_EQ(got.size(), 3u * 7 * 5);
  base::SplitMix64 stream(spec.seed);
  std::vector<double> want;
  while (want.size() < got.size()) {
    const uint64_t a = stream.Next();
    const uint64_t b = stream.Next();
    const double u1 = (static_cast<double>(a >> 11) + 1.0) / 9007199254740992.0;
    const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    want.push_back(r * std::cos(2.0 * M_PI * u2));
    want.push_back(r * std::sin(2.0 * M_PI * u2));
  }
  for (size_t n = 0; n < got.size(); ++n) {
    EXPECT_EQ(got[n], want[n]) << "normal " << n;
  }
  // Round r's matrix does not depend on how many rounds follow.
  const std::vector<double> one = LshRotations({1, 10, 1, spec.seed}, dim);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), got.begin()));
  EXPECT_TRUE(LshRotations({4, 1, 1, spec.seed}, dim).empty());

  // Standard normals.
  const std::vector<double> many = LshRotations({64, 4096, 1, 7}, 4);
  double mean = 0.0, var = 0.0;
  for (double x : many) mean += x;
  mean /= many.size();
  for (double x : many) var += (x - mean) * (x - mean);
  var /= many.size();
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
}

TEST(LshAttentionTest, DeterministicForASeedAndThreadCount) {
  LshCase c;
  c.b = 2, c.h = 2, c.l = 300, c.d = 16, c.dv = 16;
  c.hashes = 2, c.buckets = 16, c.chunk = 16, c.causal = true;
  const LshInputs data = MakeInputs(c);
  auto run = [&](AttentionEngine& engine, uint64_t seed) {
    AttentionInputs in = data.Inputs(c);
    in.lsh.seed = seed;
    TestTensor out(DType::kFloat32, c.Dims(c.dv));
    EXPECT_TRUE(engine.Run(in, {out.mutable_view(), std::nullopt}).ok());
    return out.ToFloats();
  };
  std::unique_ptr<AttentionEngine> one = MakeEngine(Isa::kAuto, 1);
  std::unique_ptr<AttentionEngine> two = MakeEngine(Isa::kAuto, 2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const std::vector<float> first = run(*two, c.seed);
  EXPECT_EQ(run(*two, c.seed), first);
  EXPECT_EQ(run(*one, c.seed), first);

  const std::vector<float> other = run(*two, c.seed + 1);
  double diff = 0.0;
  for (size_t i = 0; i < first.size(); ++i) {
    diff = std::max<double>(diff, std::fabs(first[i] - other[i]));
  }
  EXPECT_GT(diff, 1e-2) << "another seed hashes differently";
}

// Calls on several engines at once share the kernel's process-wide buffers
// and primitives; each must still get its own result.
TEST(LshAttentionTest, ConcurrentCallsMatchSerialOnes) {
  LshCase c;
  c.b = 1, c.h = 4, c.l = 500, c.d = 32, c.dv = 16;
  c.hashes = 3, c.buckets = 8, c.chunk = 32;
  const LshInputs data = MakeInputs(c);
  std::unique_ptr<AttentionEngine> engine = MakeEngine(Isa::kAuto, 1);
  ASSERT_NE(engine, nullptr);
  std::vector<std::vector<float>> serial;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    AttentionInputs in = data.Inputs(c);
    in.lsh.seed = seed;
    TestTensor out(DType::kFloat32, c.Dims(c.dv));
    ASSERT_TRUE(engine->Run(in, {out.mutable_view(), std::nullopt}).ok());
    serial.push_back(out.ToFloats());
  }
  std::vector<std::unique_ptr<AttentionEngine>> engines;
  std::vector<TestTensor> outs;
  for (int t = 0; t < 4; ++t) {
    engines.push_back(MakeEngine(Isa::kAuto, 1));
    outs.emplace_back(DType::kFloat32, c.Dims(c.dv));
  }
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5 && status[t].ok(); ++rep) {
        AttentionInputs in = data.Inputs(c);
        in.lsh.seed = static_cast<uint64_t>(t);
        status[t] = engines[t]->Run(in, {outs[t].mutable_view(), std::nullopt});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_TRUE(status[t].ok()) << status[t];
    EXPECT_EQ(outs[t].ToFloats(), serial[t]) << "thread " << t;
  }
}

TEST(LshAttentionTest, EmptyShapesGiveEmptyOutputs) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{0, 2, 5, 4}, {1, 2, 0, 4}}) {
    TestTensor q(DType::kFloat32, dims);
    TestTensor v(DType::kFloat32, dims);
    TestTensor out(DType::kFloat32, dims);
    AttentionInputs in;
    in.query = q.view();
    in.value = v.view();
    in.method = AttentionMethod::kLsh;
    in.lsh = {2, 4, 2, 0};
    EXPECT_EQ(engine->Run(in, {out.mutable_view(), std::nullopt}),
              absl::OkStatus());
    EXPECT_EQ(ReferenceAttention(in, {out.mutable_view(), std::nullopt}),
              absl::OkStatus());
  }
}

// Every malformed request: the exact code and message, from Validate, Run
// and the reference alike.
TEST(LshAttentionTest, MalformedParametersAreRejected) {
  std::unique_ptr<AttentionEngine> engine = MakeEngine(Isa::kAuto);
  ASSERT_NE(engine, nullptr);
  const TestTensor q = TestTensor::Random(DType::kFloat32, {1, 2, 8, 4}, 1);
  const TestTensor v = TestTensor::Random(DType::kFloat32, {1, 2, 8, 4}, 2);
  const TestTensor v_heads =
      TestTensor::Random(DType::kFloat32, {1, 1, 8, 4}, 3);
  const TestTensor mask(DType::kBool, {8, 8});
  const std::vector<float> slopes = {0.5f, 0.25f};
  TestTensor out(DType::kFloat32, {1, 2, 8, 4});
  auto base = [&]() {
    AttentionInputs in;
    in.query = q.view();
    in.value = v.view();
    in.method = AttentionMethod::kLsh;
    in.lsh = {2, 4, 4, 0};
    return in;
  };
  const std::string why =
      " is not supported by LSH attention, which attends within hash chunks "
      "(only causal and key_lengths apply)";
  struct Bad {
    std::string name;
    AttentionInputs in;
    std::string message;
  };
  std::vector<Bad> bad;
  for (int64_t n : {0, 65}) {
    AttentionInputs in = base();
    in.lsh.num_hashes = n;
    bad.push_back(
        {absl::StrCat("hashes", n), in,
         absl::StrCat("lsh.num_hashes: must be in [1, 64], got ", n)});
  }
  for (int64_t n : {0, 3, 4098, -2}) {
    AttentionInputs in = base();
    in.lsh.num_buckets = n;
    bad.push_back(
        {absl::StrCat("buckets", n), in,
         absl::StrCat("lsh.num_buckets: must be 1 or even in [2, 4096], got ",
                      n)});
  }
  for (int64_t n : {0, 65537}) {
    AttentionInputs in = base();
    in.lsh.chunk_size = n;
    bad.push_back(
        {absl::StrCat("chunk", n), in,
         absl::StrCat("lsh.chunk_size: must be in [1, 65536], got ", n)});
  }
  {
    AttentionInputs in = base();
    in.key = q.view();
    bad.push_back({"key", in,
                   "key: LSH attention shares queries and keys (Reformer's "
                   "shared-QK); send no key"});
  }
  {
    AttentionInputs in = base();
    in.value = v_heads.view();
    bad.push_back({"value heads", in,
                   "value: LSH attention takes its keys from the queries, so "
                   "value needs the query's batch, heads and length: expected "
                   "[1, 2, 8, 4], got [1, 1, 8, 4]"});
  }
  {
    AttentionInputs in = base();
    in.mask.window_left = 2;
    bad.push_back({"window", in,
                   "mask.window_left/window_right: a sliding window" + why});
  }
  {
    AttentionInputs in = base();
    in.mask.explicit_mask = mask.view();
    bad.push_back({"mask", in, "mask.explicit_mask: an explicit mask" + why});
  }
  {
    AttentionInputs in = base();
    in.mask.alibi_slopes = slopes;
    bad.push_back({"alibi", in, "mask.alibi_slopes: ALiBi" + why});
  }
  {
    AttentionInputs in = base();
    BlockSparseSpec layout;
    layout.block_size = 4;
    layout.local_left = 0;
    in.mask.block_sparse = layout;
    bad.push_back(
        {"block sparse", in, "mask.block_sparse: a block-sparse layout" + why});
  }
  {
    AttentionInputs in = base();
    in.softcap = 30.0f;
    bad.push_back({"softcap", in, "softcap: logit soft-capping" + why});
  }
  {
    AttentionInputs in = base();
    in.sinks = slopes;
    bad.push_back({"sinks", in, "sinks: attention sinks" + why});
  }
  const std::vector<float> table(slopes.size() * 4, 0.5f);
  {
    AttentionInputs in = base();
    RelativeBiasSpec rel;
    rel.table = table;
    rel.num_buckets = 4;
    rel.max_distance = 8;
    in.mask.relative_bias = rel;
    bad.push_back({"relative bias", in,
                   "mask.relative_bias: a relative position bias" + why});
  }
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    const auto matches =
        StatusIs(absl::StatusCode::kInvalidArgument, Eq(b.message));
    EXPECT_THAT(engine->Validate(b.in).status(), matches);
    EXPECT_THAT(engine->Run(b.in, {out.mutable_view(), std::nullopt}), matches);
    EXPECT_THAT(ReferenceAttention(b.in, {out.mutable_view(), std::nullopt}),
                matches);
  }
}

}  // namespace
}  // namespace attnserve
