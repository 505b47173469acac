// attnserve_session_bench: attention over KV-cache sessions — the paged decode
// kernel (AttentionEngine::RunPaged over blocks made by kvcache::SessionCache,
// as the server holds them) against a memory copy of the same bytes in the
// same run, the memory a session holds against its tokens, and the memory of
// sessions that share a prompt (a kvcache::SessionStore sharing full blocks).
// See docs/benchmarks.md, "Sessions".

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
#include "absl/time/time.h"
#include "base/malloc_policy.h"
#include "bench/machine.h"
#include "bench/timing.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/status_macros.h"
#include "kvcache/block_pool.h"
#include "kvcache/session_cache.h"
#include "kvcache/session_store.h"

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

// Sessions that start with the same prompt and go on with tokens of their own
// (a system prompt, a few-shot header), in a store as the server holds them:
// with --kv_share_blocks they hold one copy of the prompt's full blocks.
struct SharedPrefixCase {
  int sessions = 64;
  int64_t prefix = 2048, tail = 256;
  int64_t hq = 32, hkv = 8, d = 128;
  DType dtype = DType::kFloat32;
};

// Rows [t0, t0 + n) of a session's keys (sign 1) or values (-1): the same
// for every session before `prefix`, the session's own after it; no two rows
// alike otherwise.
std::vector<float> PromptRows(int64_t t0, int64_t n, int64_t width,
                              int64_t prefix, int session, float sign) {
  std::vector<float> rows(static_cast<size_t>(n * width));
  for (int64_t t = 0; t < n; ++t) {
    const uint64_t seed = t0 + t < prefix ? 0 : uint64_t(session) + 1;
    for (int64_t i = 0; i < width; ++i) {
      // splitmix64 of (seed, token, element).
      uint64_t x = (seed << 48) ^ (uint64_t(t0 + t) << 20) ^ uint64_t(i);
      x += 0x9E3779B97F4A7C15ull;
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      x ^= x >> 31;
      rows[static_cast<size_t>(t * width + i)] =
          sign * (float(x >> 40) / float(1 << 24) - 0.5f);
    }
  }
  return rows;
}

// The case's line of figures.
absl::StatusOr<std::string> RunSharedPrefix(const SharedPrefixCase& c,
                                            int block_tokens, int threads,
                                            const RepPolicy& policy) {
  kvcache::SessionShape shape;
  shape.num_layers = 1;
  shape.num_kv_heads = static_cast<int>(c.hkv);
  shape.head_dim = static_cast<int>(c.d);
  shape.value_dim = static_cast<int>(c.d);
  shape.dtype = c.dtype;
  shape.max_tokens = c.prefix + c.tail;
  const int64_t width = c.hkv * c.d;
  const int64_t chunk = 512;
  // The prompt's rows, made once (they count before the store's memory).
  std::vector<std::vector<float>> prompt_keys, prompt_values;
  for (int64_t t = 0; t < c.prefix; t += chunk) {
    const int64_t n = std::min(chunk, c.prefix - t);
    prompt_keys.push_back(PromptRows(t, n, width, c.prefix, 0, 1.0f));
    prompt_values.push_back(PromptRows(t, n, width, c.prefix, 0, -1.0f));
  }
  ASSIGN_OR_RETURN(const ResidentMemory before, ReadResidentMemory());
  kvcache::StoreOptions options;
  options.budget_bytes = int64_t{16} << 30;
  options.block_tokens = block_tokens;
  options.share_blocks = true;
  options.sweep_interval = absl::ZeroDuration();
  options.default_ttl = absl::Hours(1);
  ASSIGN_OR_RETURN(std::unique_ptr<kvcache::SessionStore> store,
                   kvcache::SessionStore::Create(options));
  const auto append = [&](const std::string& id, int64_t t0,
                          const std::vector<float>& k,
                          const std::vector<float>& v) {
    const int64_t n = static_cast<int64_t>(k.size()) / width;
    return store
        ->Append(id, 0, t0,
                 MakeTensorView(k.data(), DType::kFloat32, {n, c.hkv, c.d}),
                 MakeTensorView(v.data(), DType::kFloat32, {n, c.hkv, c.d}))
        .status();
  };
  std::vector<kvcache::AttendPart> parts;
  for (int s = 0; s < c.sessions; ++s) {
    const std::string id = absl::StrCat("prompt-", s);
    RETURN_IF_ERROR(store->CreateSession(id, shape, {}).status());
    for (size_t i = 0; i < prompt_keys.size(); ++i) {
      RETURN_IF_ERROR(append(id, static_cast<int64_t>(i) * chunk,
                             prompt_keys[i], prompt_values[i]));
    }
    RETURN_IF_ERROR(append(
        id, c.prefix, PromptRows(c.prefix, c.tail, width, c.prefix, s, 1.0f),
        PromptRows(c.prefix, c.tail, width, c.prefix, s, -1.0f)));
    parts.push_back({id, std::nullopt, std::nullopt, std::nullopt});
  }
  ASSIGN_OR_RETURN(const ResidentMemory after, ReadResidentMemory());
  const int64_t per_token = kvcache::BytesPerToken(shape);
  const int64_t one_copy = (c.prefix + c.sessions * c.tail) * per_token;
  const int64_t referenced = c.sessions * (c.prefix + c.tail) * per_token;
  const int64_t used = store->Stats().used_bytes;
  // At most one partly filled block per session beyond the tokens.
  const int64_t slack = c.sessions * kvcache::BlockBytes(shape, block_tokens);
  if (used < one_copy || used > one_copy + slack) {
    return absl::InternalError(absl::StrCat(
        "the store holds ", used, " bytes for ", one_copy,
        " bytes of one prompt and the tails (", referenced, " referenced)"));
  }

  // One decode step of every session in one call, over the shared blocks.
  ASSIGN_OR_RETURN(std::vector<kvcache::PinnedPart> pinned,
                   store->AppendAndPin(0, parts));
  std::vector<float> q(static_cast<size_t>(c.hq * c.d), 0.01f);
  std::vector<std::vector<float>> outputs(c.sessions,
                                          std::vector<float>(q.size()));
  PagedAttentionInputs in;
  in.q_heads = c.hq;
  in.kv_heads = c.hkv;
  in.head_dim = c.d;
  in.value_dim = c.d;
  in.block_tokens = block_tokens;
  in.kv_dtype = c.dtype;
  std::vector<PagedSequence> sequences(c.sessions);
  for (int s = 0; s < c.sessions; ++s) {
    PagedSequence& seq = sequences[s];
    seq.query = MakeTensorView(q.data(), DType::kFloat32, {1, c.hq, c.d});
    seq.kv.blocks = pinned[s].layer.data;
    seq.kv.tokens = pinned[s].layer.tokens;
    seq.output = MakeMutableTensorView(outputs[s].data(), DType::kFloat32,
                                       {1, c.hq, c.d});
  }
  in.sequences = sequences;
  EngineOptions engine_options;
  engine_options.num_threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<AttentionEngine> engine,
                   AttentionEngine::Create(engine_options));
  ASSIGN_OR_RETURN(const Timing t,
                   TimeMedian(policy, [&] { return engine->RunPaged(in); }));
  constexpr double kMib = 1048576.0;
  const double resident_mib = (after.rss_kib - before.rss_kib) / 1024.0;
  return absl::StrFormat(
      "shared_prefix_%dx%d+%d_h%dkv%d_d%d_%s referenced_MiB=%.1f "
      "one_prompt_and_tails_MiB=%.1f store_MiB=%.1f "
      "resident_MiB=%.1f resident_ratio=%.3f step_us=%.1f threads=%d",
      c.sessions, c.prefix, c.tail, c.hq, c.hkv, c.d, DTypeName(c.dtype),
      referenced / kMib, one_copy / kMib, used / kMib, resident_mib,
      resident_mib * kMib / one_copy, t.median_us, threads);
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
  // First, while the process holds no freed memory that would hide its
  // resident size; printed after the table.
  std::string shared_prefix;
  if (absl::StrContains("shared_prefix", absl::GetFlag(FLAGS_filter))) {
    absl::StatusOr<std::string> line =
        RunSharedPrefix(SharedPrefixCase(), block_tokens, 1, policy);
    if (!line.ok()) {
      std::fprintf(stderr, "shared_prefix: %s\n",
                   line.status().ToString().c_str());
      return 1;
    }
    shared_prefix = *line;
  }
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
  if (!shared_prefix.empty()) std::printf("%s\n", shared_prefix.c_str());
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
  // The server's heap settings: freed blocks stay in the process, so the
  // resident memory of the shared-prefix case is what a server keeps.
  const absl::Status heap = attnserve::base::ApplyMallocPolicy();
  if (!heap.ok()) {
    std::fprintf(stderr, "attnserve_session_bench: %s\n",
                 heap.ToString().c_str());
    return 1;
  }
  return attnserve::bench::Run();
}
