// attnserve_session_bench: attention over KV-cache sessions — the paged decode
// kernel (AttentionEngine::RunPaged over blocks made by kvcache::SessionCache,
// as the server holds them) against a memory copy of the same bytes in the
// same run, and the memory a session holds against its tokens. See
// docs/benchmarks.md, "Sessions".

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/status_macros.h"
#include "kvcache/block_pool.h"
#include "kvcache/session_cache.h"

ABSL_FLAG(bool, quick, false, "fewer reps (a few seconds in all)");
ABSL_FLAG(std::string, filter, "", "Run only cases whose name contains this.");
ABSL_FLAG(int, block_tokens, 128,
          "tokens per block, as the server's --kv_block_tokens");

namespace attnserve::bench {
namespace {

struct SessionCase {
  std::string name;
  int sessions;
  int64_t tokens;
  int64_t hq, hkv, d;
  DType dtype;
  int threads;
  int64_t dv = 0;  // the value dimension; 0 = d

  int64_t value_dim() const { return dv > 0 ? dv : d; }
};

// `sessions` caches of `tokens` random tokens, and the queries of one step.
struct Caches {
  kvcache::BlockPool pool{int64_t{16} << 30};
  std::vector<std::unique_ptr<kvcache::SessionCache>> caches;
  std::vector<kvcache::PinnedLayer> pinned;
  std::vector<std::vector<char>> queries;
  std::vector<std::vector<float>> outputs;
  std::vector<PagedSequence> sequences;
  int64_t kv_bytes = 0;
};

absl::Status Fill(const SessionCase& c, int block_tokens, Caches* out) {
  kvcache::SessionShape shape;
  shape.num_layers = 1;
  shape.num_kv_heads = static_cast<int>(c.hkv);
  shape.head_dim = static_cast<int>(c.d);
  shape.value_dim = static_cast<int>(c.value_dim());
  shape.dtype = c.dtype;
  shape.max_tokens = c.tokens;
  const int64_t chunk = 512;
  std::vector<float> k(static_cast<size_t>(chunk * c.hkv * c.d));
  for (size_t i = 0; i < k.size(); ++i) k[i] = float(i % 97) / 97.0f - 0.5f;
  std::vector<float> v(static_cast<size_t>(chunk * c.hkv * c.value_dim()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 89) / 89.0f - 0.5f;
  for (int s = 0; s < c.sessions; ++s) {
    auto cache = std::make_unique<kvcache::SessionCache>(shape, block_tokens);
    for (int64_t t = 0; t < c.tokens; t += chunk) {
      const int64_t n = std::min(chunk, c.tokens - t);
      const TensorView keys =
          MakeTensorView(k.data(), DType::kFloat32, {n, c.hkv, c.d});
      const TensorView values =
          MakeTensorView(v.data(), DType::kFloat32, {n, c.hkv, c.value_dim()});
      RETURN_IF_ERROR(
          cache
              ->Append(0, t, keys, values,
                       [&](int64_t bytes) { return out->pool.Allocate(bytes); })
              .status());
    }
    out->pinned.push_back(cache->Pin(0));
    out->caches.push_back(std::move(cache));
  }
  out->kv_bytes =
      int64_t{c.sessions} * c.tokens * kvcache::BytesPerToken(shape);
  // An int8 cache takes f32 queries.
  const DType qtype = PagedOperandDType(c.dtype);
  const size_t es = DTypeSize(qtype);
  out->queries.resize(c.sessions);
  out->outputs.resize(c.sessions);
  out->sequences.resize(c.sessions);
  for (int s = 0; s < c.sessions; ++s) {
    std::vector<float> q(static_cast<size_t>(c.hq * c.d), 0.01f * s);
    out->queries[s].resize(q.size() * es);
    ConvertFromFloat(q.data(), out->queries[s].data(), qtype, q.size());
    out->outputs[s].resize(static_cast<size_t>(c.hq * c.value_dim()));
    PagedSequence& seq = out->sequences[s];
    seq.query = MakeTensorView(out->queries[s].data(), qtype, {1, c.hq, c.d});
    seq.kv.blocks = out->pinned[s].data;
    seq.kv.tokens = out->pinned[s].tokens;
    seq.output = MakeMutableTensorView(out->outputs[s].data(), DType::kFloat32,
                                       {1, c.hq, c.value_dim()});
  }
  return absl::OkStatus();
}

// GB/s of copying `bytes` (in blocks the size of the kernel's reads) on
// `threads` OpenMP threads.
absl::StatusOr<double> CopyGbps(int64_t bytes, int threads,
                                const RepPolicy& policy) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(from.size());
  const int64_t piece = 1 << 20;
  const int64_t pieces = (bytes + piece - 1) / piece;
  // A named function: a pragma cannot stand inside a macro's arguments.
  const auto copy = [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t n = std::min(piece, bytes - i * piece);
      std::memcpy(to.data() + i * piece, from.data() + i * piece, n);
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(const Timing t, TimeMedian(policy, copy));
  return bytes / t.median_us / 1e3;
}

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int block_tokens = absl::GetFlag(FLAGS_block_tokens);
  RepPolicy policy;
  policy.min_seconds = quick ? 0.1 : 0.5;
  policy.min_reps = quick ? 3 : 7;
  const std::vector<SessionCase> cases = {
      // The tiny step whose cost is mostly fixed (the RPC benchmarks' shape).
      {"decode_1x256_h4kv1_d64_f32", 1, 256, 4, 1, 64, DType::kFloat32, 1},
      {"decode_1x8192_h32kv8_d128_f32", 1, 8192, 32, 8, 128, DType::kFloat32,
       1},
      {"decode_1x8192_h32kv8_d128_f32", 1, 8192, 32, 8, 128, DType::kFloat32,
       2},
      {"decode_1x8192_h32kv8_d128_bf16", 1, 8192, 32, 8, 128, DType::kBFloat16,
       1},
      {"decode_1x8192_h32kv8_d128_bf16", 1, 8192, 32, 8, 128, DType::kBFloat16,
       2},
      {"decode_1x8192_h32kv8_d128_int8", 1, 8192, 32, 8, 128, DType::kInt8, 1},
      {"decode_1x8192_h32kv8_d128_int8", 1, 8192, 32, 8, 128, DType::kInt8, 2},
      {"decode_64x2048_h32kv8_d128_f32", 64, 2048, 32, 8, 128, DType::kFloat32,
       1},
      {"decode_64x2048_h32kv8_d128_f32", 64, 2048, 32, 8, 128, DType::kFloat32,
       2},
      // MLA with absorbed weights (DeepSeek-V2/V3): one latent kv head, keys
      // of 576, values of 512, the 16 query heads of one tensor-parallel
      // shard.
      {"decode_1x8192_mla_h16_d576v512_bf16", 1, 8192, 16, 1, 576,
       DType::kBFloat16, 1, 512},
      {"decode_1x8192_mla_h16_d576v512_bf16", 1, 8192, 16, 1, 576,
       DType::kBFloat16, 2, 512},
  };
  const CpuTimes start = ReadCpuTimes();
  std::printf("attnserve_session_bench: %s; block_tokens %d; load %s\n",
              CpuModel().c_str(), block_tokens, LoadAverage().c_str());
  std::printf("%-32s %3s %10s %9s %9s %6s %12s\n", "case", "thr", "median_us",
              "kv_GB/s", "copy_GB/s", "ratio", "kv_MiB");
  double one_thread_us_64 = 0, two_thread_us_64 = 0;
  for (const SessionCase& c : cases) {
    if (!absl::StrContains(c.name, absl::GetFlag(FLAGS_filter))) continue;
    Caches caches;
    absl::Status st = Fill(c, block_tokens, &caches);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), st.ToString().c_str());
      return 1;
    }
    EngineOptions options;
    options.num_threads = c.threads;
    auto engine = AttentionEngine::Create(options);
    if (!engine.ok()) return 1;
    PagedAttentionInputs in;
    in.q_heads = c.hq;
    in.kv_heads = c.hkv;
    in.head_dim = c.d;
    in.value_dim = c.value_dim();
    in.block_tokens = block_tokens;
    in.kv_dtype = c.dtype;
    in.sequences = caches.sequences;
    absl::StatusOr<Timing> t =
        TimeMedian(policy, [&] { return (*engine)->RunPaged(in); });
    absl::StatusOr<double> copy = CopyGbps(caches.kv_bytes, c.threads, policy);
    if (!t.ok() || !copy.ok()) {
      std::fprintf(stderr, "%s failed\n", c.name.c_str());
      return 1;
    }
    const double gbps = caches.kv_bytes / t->median_us / 1e3;
    std::printf("%-32s %3d %10.1f %9.2f %9.2f %6.3f %12.1f\n", c.name.c_str(),
                c.threads, t->median_us, gbps, *copy, gbps / *copy,
                caches.kv_bytes / 1048576.0);
    if (c.sessions == 64) {
      (c.threads == 1 ? one_thread_us_64 : two_thread_us_64) = t->median_us;
    }
    // Memory held against the tokens: at most one partial block per
    // (session, layer) beyond tokens × bytes per token.
    const int64_t used = caches.pool.used_bytes();
    if (used < caches.kv_bytes ||
        used >
            caches.kv_bytes + int64_t{c.sessions} *
                                  kvcache::BlockBytes(caches.caches[0]->shape(),
                                                      block_tokens)) {
      std::fprintf(stderr, "%s: %ld bytes used for %ld bytes of tokens\n",
                   c.name.c_str(), long(used), long(caches.kv_bytes));
      return 1;
    }
  }
  if (two_thread_us_64 > 0) {
    std::printf("summary_64x2048_two_thread_speedup %.3f\n",
                one_thread_us_64 / two_thread_us_64);
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
