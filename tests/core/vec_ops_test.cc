// The flash kernels' softmax passes (VecOps::scaled_max, scaled_exp_sum_f32,
// scaled_exp_entropy_f32, scaled_exp_sum_bf16) and the paged decode's products
// over stored rows (kv_scores, kv_accumulate, dequant_int8) of every table this
// CPU can run, against double arithmetic: row lengths around the vector widths,
// intervals empty, clipped and partial, with and without a bias (holding -inf),
// positive, negative and zero scales.

#include "core/vec_ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/convert.h"
#include "gtest/gtest.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Table {
  std::string name;
  const VecOps* ops;
};

// Every table this CPU runs (the AVX-512 ISA's two: with and without its
// extensions).
std::vector<Table> MachineTables() {
  std::vector<Table> tables;
  for (const Isa isa : RunnableIsas()) {
    switch (isa) {
#if defined(__x86_64__)
      case Isa::kAvx512:
        tables.push_back({"avx512", &Avx512VecOps()});
        tables.push_back({"avx512f", &Avx512FVecOps()});
        break;
      case Isa::kAvx2:
        tables.push_back({"avx2", &Avx2VecOps()});
        break;
#elif defined(__aarch64__)
      case Isa::kSve:
        tables.push_back({"sve", &SveVecOps()});
        break;
      case Isa::kNeon:
        tables.push_back({"neon", &NeonVecOps()});
        break;
#endif
      default:  // kAmx: the AVX-512 tables
        break;
    }
  }
  return tables;
}

TEST(VecOpsTest, ThisCpuRunsATableAndResolvesItsIsas) {
  ASSERT_FALSE(MachineTables().empty()) << "no table runs on this CPU";
  const std::vector<Isa> isas = RunnableIsas();
  EXPECT_EQ(DetectIsa(), isas.front());
  absl::StatusOr<Isa> best = ResolveIsa(Isa::kAuto);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, isas.front());
  for (const Isa isa : isas) {
    absl::StatusOr<Isa> resolved = ResolveIsa(isa);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(*resolved, isa);
  }
  // The other architecture's ISA is refused, naming the option.
#if defined(__x86_64__)
  const Isa foreign = Isa::kNeon;
#else
  const Isa foreign = Isa::kAvx2;
#endif
  // Where the test's runner says which ISA this CPU has, that is the best.
  if (const char* expected = std::getenv("ATTNSERVE_TEST_EXPECT_ISA")) {
    EXPECT_EQ(IsaName(DetectIsa()), expected);
  }
  absl::StatusOr<Isa> refused = ResolveIsa(foreign);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("max_isa"), std::string::npos)
      << refused.status();
}

// One row: raw scores, an optional bias and the interval.
struct Row {
  std::vector<float> s, bias;
  float scale = 0.125f;
  int64_t lo = 0, hi = 0;
  bool use_bias = false;

  int64_t n() const { return static_cast<int64_t>(s.size()); }
  const float* bias_ptr() const { return use_bias ? bias.data() : nullptr; }
  // t[c] as the kernels compute it, in f32 (s · scale rounded once, with the
  // bias added in the same rounding), -inf outside the clipped interval.
  double T(int64_t c) const {
    if (c < std::max<int64_t>(lo, 0) || c >= std::min(hi, n())) {
      return -std::numeric_limits<double>::infinity();
    }
    const double t = static_cast<double>(s[c]) * scale;
    return static_cast<float>(use_bias ? t + bias[c] : t);
  }
  double Max() const {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < n(); ++c) m = std::max(m, T(c));
    return m;
  }
};

std::vector<Row> Rows() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  std::vector<Row> rows;
  for (const int64_t n : {1, 7, 8, 15, 16, 17, 33, 64, 100, 512}) {
    for (const float scale : {0.125f, -0.3f, 0.0f, 1.7f}) {
      for (const bool use_bias : {false, true}) {
        // Whole, empty, clipped on both sides, inside, one element, past
        // either end (a chunk of a row outside the row's interval).
        const std::vector<std::pair<int64_t, int64_t>> intervals = {
            {0, n},     {3, 3},         {-5, n + 9}, {n / 3, n - n / 4},
            {n - 1, n}, {n + 3, n + 9}, {-9, -2}};
        for (const auto& [lo, hi] : intervals) {
          Row r;
          r.s.resize(n);
          r.bias.resize(n);
          for (auto& x : r.s) x = u(rng);
          for (int64_t c = 0; c < n; ++c) {
            r.bias[c] = c % 5 == 2 ? kNegInf : u(rng) * 0.5f;
          }
          r.scale = scale;
          r.lo = lo;
          r.hi = hi;
          r.use_bias = use_bias;
          rows.push_back(std::move(r));
        }
      }
    }
  }
  // Large scores: around 500 (the bf16 exp folds the max into its
  // multiply-add), 3000 (it subtracts first) and 1e22 (products of huge
  // inputs: no exponent may come out positive, or exp overflows).
  for (const float magnitude : {500.0f, 3000.0f, 1e22f}) {
    for (const int64_t n : {17, 100, 512}) {
      for (const bool use_bias : {false, true}) {
        Row r;
        r.s.resize(n);
        r.bias.resize(n);
        for (auto& x : r.s) x = magnitude * (1.0f + u(rng) / 100.0f);
        for (int64_t c = 0; c < n; ++c) {
          r.bias[c] = c % 5 == 2 ? kNegInf : u(rng) * 0.5f;
        }
        r.scale = 0.37f;
        r.lo = n / 5;
        r.hi = n;
        r.use_bias = use_bias;
        rows.push_back(std::move(r));
      }
    }
  }
  return rows;
}

TEST(VecOpsTest, ScaledMaxIsTheIntervalsMaximumAndReadsOnly) {
  for (const Table& t : MachineTables()) {
    for (const Row& r : Rows()) {
      const std::vector<float> before = r.s;
      const float got = t.ops->scaled_max(r.s.data(), r.n(), r.scale, r.lo,
                                          r.hi, r.bias_ptr());
      const double want = r.Max();
      if (std::isinf(want)) {
        EXPECT_EQ(got, kNegInf) << t.name << " n=" << r.n();
      } else {
        EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want)))
            << t.name << " n=" << r.n() << " lo=" << r.lo << " hi=" << r.hi;
      }
      EXPECT_EQ(r.s, before) << t.name;
    }
  }
}

// Checks the p and the sum of one exp pass against exp(t - max) in double;
// `rel` bounds each p's relative error, plus the rounding of t - max to f32
// (2^-24 of |t - max| in the exponent).
template <typename P, typename Value>
void CheckExpPass(const std::string& name, const Row& r, float row_max,
                  const std::vector<P>& p, float sum, Value value, double rel,
                  double sum_rel) {
  double want_sum = 0.0;
  for (int64_t c = 0; c < r.n(); ++c) {
    const double t = r.T(c);
    const double want = std::isinf(t) ? 0.0 : std::exp(t - row_max);
    want_sum += want;
    const double got = value(p[c]);
    if (want == 0.0) {
      EXPECT_EQ(got, 0.0) << name << " c=" << c;
      continue;
    }
    const double bound = (rel + std::fabs(t - row_max) * 0x1p-24) * want;
    EXPECT_NEAR(got, want, bound + 1e-30) << name << " c=" << c;
  }
  EXPECT_NEAR(sum, want_sum, sum_rel * want_sum + 1e-30) << name;
}

TEST(VecOpsTest, ScaledExpSumMatchesExpOfTheScaledScores) {
  for (const Table& t : MachineTables()) {
    for (const Row& r : Rows()) {
      const float row_max = t.ops->scaled_max(r.s.data(), r.n(), r.scale, r.lo,
                                              r.hi, r.bias_ptr());
      if (row_max == kNegInf) continue;  // the kernels skip such rows
      const std::string name =
          t.name + " n=" + std::to_string(r.n()) +
          " lo=" + std::to_string(r.lo) + " hi=" + std::to_string(r.hi) +
          " scale=" + std::to_string(r.scale) + (r.use_bias ? " bias" : "");
      // f32 in place, as the f32 kernels call it.
      std::vector<float> p32 = r.s;
      const float sum32 =
          t.ops->scaled_exp_sum_f32(p32.data(), r.n(), r.scale, r.lo, r.hi,
                                    r.bias_ptr(), row_max, p32.data());
      CheckExpPass(
          name + " f32", r, row_max, p32, sum32,
          [](float x) { return static_cast<double>(x); }, 1e-6, 5e-6);
      // bf16: within one rounding of bf16 (2^-8 relative); the sum is of the
      // unrounded p, whose exp may be the cheaper one (4e-6, and up to 1.3e-4
      // near a max of 1024).
      std::vector<uint16_t> p16(r.n() + 3, 0xBEEF);
      const float sum16 =
          t.ops->scaled_exp_sum_bf16(r.s.data(), r.n(), r.scale, r.lo, r.hi,
                                     r.bias_ptr(), row_max, p16.data());
      CheckExpPass(
          name + " bf16", r, row_max, p16, sum16,
          [](uint16_t h) { return static_cast<double>(BFloat16ToFloat(h)); },
          1.0 / 256, 2e-4);
      // Nothing past n is written.
      for (int64_t c = r.n(); c < r.n() + 3; ++c) EXPECT_EQ(p16[c], 0xBEEF);
    }
  }
}

TEST(VecOpsTest, ScaledExpEntropyIsTheF32PassAndTheSumOfPTimesTMinusMax) {
  for (const Table& t : MachineTables()) {
    for (const Row& r : Rows()) {
      const float row_max = t.ops->scaled_max(r.s.data(), r.n(), r.scale, r.lo,
                                              r.hi, r.bias_ptr());
      if (row_max == kNegInf) continue;
      const std::string name =
          t.name + " n=" + std::to_string(r.n()) +
          " lo=" + std::to_string(r.lo) + " hi=" + std::to_string(r.hi) +
          " scale=" + std::to_string(r.scale) + (r.use_bias ? " bias" : "");
      std::vector<float> p = r.s;
      float u = 1.0f;
      const float sum =
          t.ops->scaled_exp_entropy_f32(p.data(), r.n(), r.scale, r.lo, r.hi,
                                        r.bias_ptr(), row_max, p.data(), &u);
      CheckExpPass(
          name, r, row_max, p, sum,
          [](float x) { return static_cast<double>(x); }, 1e-6, 5e-6);
      // Σ exp(t - max)·(t - max): masked keys (t = -inf) add nothing; each
      // term within its p's error, and |t - max| rounded in f32.
      double want = 0.0, bound = 0.0;
      for (int64_t c = 0; c < r.n(); ++c) {
        const double x = r.T(c) - row_max;
        if (std::isinf(x)) continue;
        want += std::exp(x) * x;
        bound += std::exp(x) * std::fabs(x) * (2e-6 + std::fabs(x) * 0x1p-23);
      }
      EXPECT_NEAR(u, want, bound + 1e-6 * std::fabs(want) + 1e-30) << name;
    }
  }
}

// Every bf16 p is the nearest bf16 of exp(t - max) up to the cheaper exp's
// error: rounding the double exp gives the same pattern or a neighbour only
// where the exact value lies within 4e-6 of a rounding boundary.
TEST(VecOpsTest, Bf16ProbabilitiesAreRoundedToNearest) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-30.0f, 0.0f);
  std::vector<float> s(4096);
  for (auto& x : s) x = u(rng);
  s[100] = 0.0f;  // the maximum
  for (const Table& t : MachineTables()) {
    std::vector<uint16_t> p(s.size());
    t.ops->scaled_exp_sum_bf16(s.data(), static_cast<int64_t>(s.size()), 1.0f,
                               0, static_cast<int64_t>(s.size()), nullptr, 0.0f,
                               p.data());
    int off_by_one = 0;
    for (size_t c = 0; c < s.size(); ++c) {
      const double want = std::exp(static_cast<double>(s[c]));
      const uint16_t nearest = FloatToBFloat16(static_cast<float>(want));
      if (p[c] == nearest) continue;
      ASSERT_EQ(std::abs(int{p[c]} - int{nearest}), 1) << t.name << " " << c;
      // The exact value is then within 4e-6 (relative) of the midpoint.
      const double mid =
          0.5 * (BFloat16ToFloat(p[c]) + BFloat16ToFloat(nearest));
      EXPECT_NEAR(want, mid, 4e-6 * want) << t.name << " " << c;
      ++off_by_one;
    }
    // About 2 · 4e-6 / 2^-8 = 0.2 % of the values can be that close.
    EXPECT_LE(off_by_one, 24) << t.name;
  }
}

TEST(VecOpsTest, NaNScoresGiveNaNProbabilities) {
  for (const Table& t : MachineTables()) {
    std::vector<float> s(20, 1.0f);
    s[17] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint16_t> p16(s.size());
    const float sum = t.ops->scaled_exp_sum_bf16(s.data(), 20, 1.0f, 0, 20,
                                                 nullptr, 1.0f, p16.data());
    EXPECT_TRUE(std::isnan(sum)) << t.name;
    EXPECT_TRUE(std::isnan(BFloat16ToFloat(p16[17]))) << t.name;
    EXPECT_EQ(BFloat16ToFloat(p16[3]), 1.0f) << t.name;
    std::vector<float> p32(s.size());
    EXPECT_TRUE(std::isnan(t.ops->scaled_exp_sum_f32(
        s.data(), 20, 1.0f, 0, 20, nullptr, 1.0f, p32.data())))
        << t.name;
    EXPECT_TRUE(std::isnan(p32[17])) << t.name;
  }
}

// Rows of `n` × `dim` random values stored as `dtype` (int8: quantized, with
// a scale per row), and the values they read back as.
struct StoredRows {
  std::vector<char> bytes;
  std::vector<float> scales;  // int8 only
  std::vector<double> values;

  StoredRows(DType dtype, int64_t n, int64_t dim, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    const size_t es = DTypeSize(dtype);
    bytes.resize(static_cast<size_t>(n * dim) * es);
    values.resize(static_cast<size_t>(n * dim));
    std::vector<float> row(static_cast<size_t>(dim));
    for (int64_t t = 0; t < n; ++t) {
      for (float& x : row) x = u(rng);
      char* at = bytes.data() + t * dim * es;
      if (dtype == DType::kInt8) {
        int8_t* q = reinterpret_cast<int8_t*>(at);
        scales.push_back(QuantizeInt8(row.data(), dim, q));
        for (int64_t c = 0; c < dim; ++c) {
          values[t * dim + c] = double{q[c]} * scales.back();
        }
      } else {
        ConvertFromFloat(row.data(), at, dtype, static_cast<size_t>(dim));
        for (int64_t c = 0; c < dim; ++c) {
          values[t * dim + c] = LoadAsFloat(at, dtype, c);
        }
      }
    }
  }
  const float* scale_ptr() const {
    return scales.empty() ? nullptr : scales.data();
  }
  int64_t dim() const { return static_cast<int64_t>(values.size()) / n(); }
  int64_t n() const { return static_cast<int64_t>(scales.size()); }
  int8_t stored(int64_t t, int64_t c) const {
    return reinterpret_cast<const int8_t*>(bytes.data())[t * dim() + c];
  }

  // The bounds vec_ops.h gives for int8 rows (0 for the others): a score of
  // query row r against key t when the row is rounded to 16-bit integers...
  double QueryRounding(const std::vector<float>& q, int64_t r, int64_t ldq,
                       int64_t t) const {
    if (scales.empty()) return 0;
    double max_q = 0, sum_k = 0;
    for (int64_t c = 0; c < dim(); ++c) {
      max_q = std::max(max_q, std::fabs(double{q[r * ldq + c]}));
      sum_k += std::abs(stored(t, c));
    }
    return max_q / 65534 * sum_k * scales[t];
  }
  // ...and a sum of column c over the n values when row r's weights p ·
  // scale are (one run: n is at most 256 here).
  double WeightRounding(const std::vector<float>& p, int64_t r, int64_t ldp,
                        int64_t c) const {
    if (scales.empty()) return 0;
    double max_w = 0, sum_v = 0;
    for (int64_t t = 0; t < n(); ++t) {
      max_w = std::max(max_w, std::fabs(double{p[r * ldp + t]} * scales[t]));
      sum_v += std::abs(stored(t, c));
    }
    return max_w / 65534 * sum_v;
  }
};

TEST(VecOpsTest, KvProductsReadEveryStoredDTypeAsItsValues) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Table& table : MachineTables()) {
    for (DType dtype :
         {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
      // Dims around the vector widths and the accumulators' column groups;
      // row counts around the row groups; key counts around the 4-key tiles.
      for (const int64_t dim : {1, 7, 16, 20, 32, 64, 72, 96, 128, 136}) {
        for (const int64_t m : {1, 3, 4, 5, 9}) {
          for (const int64_t n : {1, 3, 4, 7, 33}) {
            SCOPED_TRACE(table.name + " " + std::string(DTypeName(dtype)) +
                         " dim " + std::to_string(dim) + " m " +
                         std::to_string(m) + " n " + std::to_string(n));
            const StoredRows kv(dtype, n, dim, rng);
            const int64_t ldq = dim + 3, lds = n + 2, ldacc = dim + 1;
            // A bf16 cache's queries are bf16 (kv_scores may round them).
            std::vector<float> q(static_cast<size_t>(m * ldq));
            for (float& x : q) {
              x = u(rng);
              if (dtype == DType::kBFloat16) {
                x = BFloat16ToFloat(FloatToBFloat16(x));
              }
            }
            std::vector<float> s(static_cast<size_t>(m * lds), -7.0f);
            table.ops->kv_scores(q.data(), ldq, m, dim, kv.bytes.data(), dtype,
                                 kv.scale_ptr(), n, s.data(), lds);
            const std::vector<float> scores = s;
            // With bf16 values kv_accumulate may round the probabilities to
            // bf16: give it bf16 ones, so that every table's sums are exact.
            if (dtype == DType::kBFloat16) {
              for (float& x : s) x = BFloat16ToFloat(FloatToBFloat16(x));
            }
            std::vector<float> acc(static_cast<size_t>(m * ldacc));
            for (float& x : acc) x = u(rng);
            const std::vector<float> before = acc;
            table.ops->kv_accumulate(s.data(), lds, m, kv.bytes.data(), dtype,
                                     kv.scale_ptr(), n, dim, acc.data(), ldacc);
            for (int64_t r = 0; r < m; ++r) {
              for (int64_t t = 0; t < n; ++t) {
                double want = 0;
                for (int64_t c = 0; c < dim; ++c) {
                  want += double{q[r * ldq + c]} * kv.values[t * dim + c];
                }
                ASSERT_NEAR(scores[r * lds + t], want,
                            1e-5 * (1 + dim) + kv.QueryRounding(q, r, ldq, t))
                    << "score r " << r << " t " << t;
              }
              // Past n the scores' row is untouched.
              ASSERT_EQ(scores[r * lds + n], -7.0f);
              for (int64_t c = 0; c < dim; ++c) {
                double want = before[r * ldacc + c];
                for (int64_t t = 0; t < n; ++t) {
                  want += double{s[r * lds + t]} * kv.values[t * dim + c];
                }
                ASSERT_NEAR(acc[r * ldacc + c], want,
                            1e-4 * (1 + n) + kv.WeightRounding(s, r, lds, c))
                    << "acc r " << r << " c " << c;
              }
              // Past dim the row's padding is untouched.
              ASSERT_EQ(acc[r * ldacc + dim], before[r * ldacc + dim]);
            }
          }
        }
      }
    }
  }
}

// Past the shapes above: int8 rows longer than one run of weights (256
// tokens), and non-finite queries and probabilities, which every table
// passes through as the f32 arithmetic would (NaN).
TEST(VecOpsTest, Int8ProductsOverLongRunsAndNonFiniteInputs) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t dim = 64, m = 5, n = 600;
  const StoredRows kv(DType::kInt8, n, dim, rng);
  for (const Table& table : MachineTables()) {
    SCOPED_TRACE(table.name);
    std::vector<float> p(static_cast<size_t>(m * n));
    for (float& x : p) x = u(rng);
    std::vector<float> acc(static_cast<size_t>(m * dim), 0.0f);
    table.ops->kv_accumulate(p.data(), n, m, kv.bytes.data(), DType::kInt8,
                             kv.scale_ptr(), n, dim, acc.data(), dim);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < dim; ++c) {
        double want = 0;
        for (int64_t t = 0; t < n; ++t) {
          want += double{p[r * n + t]} * kv.values[t * dim + c];
        }
        ASSERT_NEAR(acc[r * dim + c], want,
                    1e-4 * (1 + n) + kv.WeightRounding(p, r, n, c))
            << "r " << r << " c " << c;
      }
    }

    std::vector<float> q(static_cast<size_t>(m * dim), 0.5f);
    q[2 * dim + 7] = std::numeric_limits<float>::quiet_NaN();
    // A row too small to round to 16-bit integers (32767 / 1e-35 is inf).
    for (int64_t c = 0; c < dim; ++c) q[3 * dim + c] = 1e-35f;
    std::vector<float> s(static_cast<size_t>(m * n));
    table.ops->kv_scores(q.data(), dim, m, dim, kv.bytes.data(), DType::kInt8,
                         kv.scale_ptr(), n, s.data(), n);
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_TRUE(std::isnan(s[2 * n + t])) << "t " << t;
      ASSERT_TRUE(std::isfinite(s[0 * n + t])) << "t " << t;
      double want = 0, magnitude = 0;
      for (int64_t c = 0; c < dim; ++c) {
        want += double{1e-35f} * kv.values[t * dim + c];
        magnitude += std::fabs(double{1e-35f} * kv.values[t * dim + c]);
      }
      ASSERT_NEAR(s[3 * n + t], want, 1e-6 * magnitude) << "t " << t;
    }

    p[1 * n + 400] = std::numeric_limits<float>::infinity();
    std::fill(acc.begin(), acc.end(), 0.0f);
    table.ops->kv_accumulate(p.data(), n, m, kv.bytes.data(), DType::kInt8,
                             kv.scale_ptr(), n, dim, acc.data(), dim);
    for (int64_t c = 0; c < dim; ++c) {
      // inf times a nonzero value is ±inf; times a zero NaN.
      ASSERT_FALSE(std::isfinite(acc[1 * dim + c])) << "c " << c;
      ASSERT_TRUE(std::isfinite(acc[0 * dim + c])) << "c " << c;
    }
  }
}

// Soft-capping keeps tanh's relative precision at every magnitude: near 0,
// in the rational fit's range, at its clamp (|t / cap| = 9) and past it, for
// caps from denormal to huge.
TEST(VecOpsTest, SoftCapIsCapTimesTanhWithinItsRelativeError) {
  std::vector<float> raw;
  for (float x = 1e-6f; x < 200.0f; x *= 1.07f) {
    raw.push_back(x);
    raw.push_back(-x);
  }
  raw.push_back(0.0f);
  raw.push_back(9.0f * 4.0f / 0.25f);  // t / cap at the clamp
  raw.push_back(std::numeric_limits<float>::infinity());
  raw.push_back(-std::numeric_limits<float>::infinity());
  raw.push_back(std::numeric_limits<float>::quiet_NaN());
  for (const Table& table : MachineTables()) {
    for (const float scale : {0.25f, -0.5f, 0.0f}) {
      for (const float cap : {4.0f, 1e30f, 1e-30f, 1e-40f}) {
        std::vector<float> s = raw;
        table.ops->soft_cap(s.data(), static_cast<int64_t>(s.size()), scale,
                            cap);
        for (size_t i = 0; i < raw.size(); ++i) {
          SCOPED_TRACE(table.name + " s " + std::to_string(raw[i]) + " scale " +
                       std::to_string(scale) + " cap " + std::to_string(cap));
          const double t = static_cast<float>(double{raw[i]} * scale);
          if (std::isnan(t)) {
            EXPECT_TRUE(std::isnan(s[i]));
            continue;
          }
          // A denormal cap caps like the smallest normal one.
          const double c = std::max<double>(cap, 1.0 / FLT_MAX);
          const double want = cap * std::tanh(t / c);
          EXPECT_NEAR(s[i], want, 4e-7 * std::fabs(want) + 1e-44);
        }
      }
    }
  }
}

TEST(VecOpsTest, AddGatheredAddsEachIndexedEntry) {
  const std::vector<float> table = {0.5f, -1.0f, 2.0f, 8.0f, -3.5f};
  for (const Table& t : MachineTables()) {
    for (const int64_t n : {0, 1, 7, 8, 16, 17, 40}) {
      std::vector<int32_t> index(static_cast<size_t>(n));
      std::vector<float> x(static_cast<size_t>(n + 1), 1.25f);
      for (int64_t c = 0; c < n; ++c)
        index[c] = static_cast<int32_t>((c * 3) % 5);
      t.ops->add_gathered(x.data(), table.data(), index.data(), n);
      for (int64_t c = 0; c < n; ++c) {
        ASSERT_EQ(x[c], 1.25f + table[index[c]]) << t.name << " c " << c;
      }
      ASSERT_EQ(x[n], 1.25f) << t.name << ": past n untouched";
    }
  }
}

TEST(VecOpsTest, DequantInt8IsEachElementTimesTheScale) {
  for (const Table& table : MachineTables()) {
    for (const int64_t n : {1, 7, 8, 16, 17, 40}) {
      std::vector<int8_t> q(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(i * 37 - 127);
      std::vector<float> out(static_cast<size_t>(n + 1), 5.0f);
      table.ops->dequant_int8(q.data(), n, 0.25f, out.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], 0.25f * q[i]) << table.name << " element " << i;
      }
      ASSERT_EQ(out[n], 5.0f) << table.name;
    }
  }
}

}  // namespace
}  // namespace attnserve
