// attnserve_block_sparse_bench: block-sparse attention (Mask.block_sparse)
// against dense flash attention of the same shape in the same run: the time
// ratio, the share of blocks the layout keeps, and the relative L2 error of
// the output against exact attention on the same inputs. See
// docs/benchmarks.md, "Long-sequence variants".

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "base/random.h"
#include "bench/machine.h"
#include "core/attention.h"
#include "core/convert.h"

ABSL_FLAG(bool, quick, false, "L = 4096 and fewer reps (seconds in all)");
ABSL_FLAG(int64_t, length, 16384, "Lq = Lk");
ABSL_FLAG(int64_t, block, 128, "block_size of the layouts");
ABSL_FLAG(int, rounds, 7, "alternating dense/sparse rounds per case");

namespace attnserve::bench {
namespace {

struct LayoutCase {
  std::string name;
  BlockSparseSpec spec;
  std::vector<int32_t> globals;
};

std::vector<LayoutCase> Layouts(int64_t block) {
  std::vector<LayoutCase> cases;
  LayoutCase strided{"strided_every_8", {}, {}};
  strided.spec.block_size = block;
  strided.spec.stride = 8;
  cases.push_back(strided);
  LayoutCase bigbird{"local7_random8_global1", {}, {0}};
  bigbird.spec.block_size = block;
  bigbird.spec.local_left = 3;
  bigbird.spec.local_right = 3;
  bigbird.spec.random_blocks = 8;
  bigbird.spec.seed = 1;
  cases.push_back(bigbird);
  LayoutCase fixed{"fixed_8_local_4", {}, {}};
  fixed.spec.block_size = block;
  fixed.spec.stride = 8;
  fixed.spec.stride_pattern = StridePattern::kFixed;
  fixed.spec.local_left = 3;
  fixed.spec.local_right = 4;
  cases.push_back(fixed);
  return cases;
}

double RelativeL2(const std::vector<float>& got,
                  const std::vector<float>& exact) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += double(got[i] - exact[i]) * (got[i] - exact[i]);
    den += double(exact[i]) * exact[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Microseconds of one call of `fn`.
template <typename Fn>
absl::StatusOr<double> TimeOnce(const Fn& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status st = fn();
  if (!st.ok()) return st;
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int64_t length = quick ? 4096 : absl::GetFlag(FLAGS_length);
  const int64_t b = 1, h = 4, d = 64;
  const int64_t block = absl::GetFlag(FLAGS_block);
  // Dense and sparse calls alternate, one of each per round, so that load
  // changes on a shared machine reach both; the ratio is of the medians.
  const int rounds = quick ? 3 : absl::GetFlag(FLAGS_rounds);
  const CpuTimes start = ReadCpuTimes();
  std::printf(
      "attnserve_block_sparse_bench: %s; %d threads; B%ld H%ld L%ld D%ld, "
      "block %ld; load %s\n",
      CpuModel().c_str(), omp_get_max_threads(), long(b), long(h), long(length),
      long(d), long(block), LoadAverage().c_str());
  std::printf("%-24s %-5s %-6s %8s %12s %12s %8s %10s\n", "layout", "dtype",
              "causal", "kept", "dense_us", "sparse_us", "ratio", "rel_l2");
  auto engine = AttentionEngine::Create(EngineOptions{});
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  const int64_t n = b * h * length * d;
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    // Queries and keys with positional structure (sinusoidal encodings plus
    // noise), so that exact attention is mostly local as in a trained model;
    // uniform random ones would make it nearly uniform over all keys.
    std::vector<float> values(static_cast<size_t>(3 * n));
    base::SplitMix64 rng(7);
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t row = 0; row < b * h * length; ++row) {
        const double pos = double(row % length);
        for (int64_t c = 0; c < d; ++c) {
          const double freq = std::pow(10000.0, -double(c / 2 * 2) / d);
          const double pe =
              c % 2 == 0 ? std::sin(pos * freq) : std::cos(pos * freq);
          values[t * n + row * d + c] =
              static_cast<float>(1.5 * pe) + rng.Uniform(-0.5f, 0.5f);
        }
      }
    }
    for (int64_t i = 2 * n; i < 3 * n; ++i)
      values[i] = rng.Uniform(-1.0f, 1.0f);
    std::vector<char> qkv(values.size() * DTypeSize(dtype));
    ConvertFromFloat(values.data(), qkv.data(), dtype, values.size());
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
    AttentionInputs in;
    in.query = MakeTensorView(qkv.data(), dtype, {b, h, length, d});
    in.key = MakeTensorView(qkv.data() + bytes, dtype, {b, h, length, d});
    in.value = MakeTensorView(qkv.data() + 2 * bytes, dtype, {b, h, length, d});
    std::vector<float> dense(static_cast<size_t>(n)), sparse(dense.size());
    const AttentionOutputs dense_out{
        MakeMutableTensorView(dense.data(), DType::kFloat32, {b, h, length, d}),
        std::nullopt};
    const AttentionOutputs sparse_out{
        MakeMutableTensorView(sparse.data(), DType::kFloat32,
                              {b, h, length, d}),
        std::nullopt};
    for (const bool causal : {false, true}) {
      for (LayoutCase& c : Layouts(block)) {
        AttentionInputs dense_in = in;
        dense_in.mask = MaskSpec{};
        dense_in.mask.causal = causal;
        AttentionInputs sparse_in = dense_in;
        c.spec.global_tokens = c.globals;
        sparse_in.mask.block_sparse = c.spec;
        absl::StatusOr<AttentionPlan> plan = (*engine)->Validate(sparse_in);
        const auto dense_call = [&] {
          return (*engine)->Run(dense_in, dense_out);
        };
        const auto sparse_call = [&] {
          return (*engine)->Run(sparse_in, sparse_out);
        };
        // Warm-up: primitives, page faults.
        absl::Status st = plan.status();
        if (st.ok()) st = dense_call();
        if (st.ok()) st = sparse_call();
        std::vector<double> dense_us, sparse_us;
        for (int r = 0; r < rounds && st.ok(); ++r) {
          absl::StatusOr<double> t = TimeOnce(dense_call);
          if (!t.ok()) {
            st = t.status();
            break;
          }
          dense_us.push_back(*t);
          t = TimeOnce(sparse_call);
          if (!t.ok()) {
            st = t.status();
            break;
          }
          sparse_us.push_back(*t);
        }
        if (!st.ok()) {
          std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                       st.ToString().c_str());
          return 1;
        }
        const double dense_median = Median(dense_us);
        const double sparse_median = Median(sparse_us);
        std::printf("%-24s %-5s %-6s %8.4f %12.0f %12.0f %8.3f %10.4f\n",
                    c.name.c_str(), DTypeName(dtype).data(),
                    causal ? "yes" : "no",
                    plan->shape.flops / plan->shape.dense_flops(), dense_median,
                    sparse_median, sparse_median / dense_median,
                    RelativeL2(sparse, dense));
      }
    }
  }
  PrintRunCheck(start);
  return 0;
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return attnserve::bench::Run();
}
