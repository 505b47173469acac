#ifndef ATTNSERVE_BENCH_CASES_H_
#define ATTNSERVE_BENCH_CASES_H_

// The kernel benchmark's cases and the buffers one case runs on.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/attention.h"
#include "core/tensor.h"

namespace attnserve::bench {

// What a case measures beyond the kernel's time.
enum class CaseKind {
  kTimed,    // median time, GFLOP/s against the GEMM rate, the unfused baseline
  kPeakRss,  // extra resident memory of one Run, measured in a child process
};

struct CaseSpec {
  std::string name;  // derived from the fields by MakeCase
  CaseKind kind = CaseKind::kTimed;
  DType dtype = DType::kFloat32;
  KernelPath path = KernelPath::kFlash;  // kMaterialized requests the weights
  int64_t b = 1, hq = 1, hkv = 1, lq = 1, lk = 1, d = 64;
  bool causal = false;
  // Gemma 2's logit soft-cap (50) and gpt-oss's attention sinks (one logit
  // per head), together: the forms' cost against the plain case.
  bool softcap_sinks = false;
  // T5's relative bias (32 buckets, distance 128, bidirectional).
  bool relative_bias = false;
  // Transformer-XL's relative position keys: a table per head of a row per
  // distance up to Lk, with a query bias.
  bool relative_keys = false;
  // Each row's weight entropy and largest weight as outputs (no weights).
  bool weight_stats = false;
  // A sliding window of `window` keys left of the diagonal (0 = none), and
  // with it the first sink_tokens keys kept (StreamingLLM).
  int64_t window = 0;
  int64_t sink_tokens = 0;
  bool quick = false;  // part of --quick
  // kPeakRss cases run on this many threads whatever --threads says.
  int fixed_threads = 0;
};

// The dimensions of the case (Dv = D).
AttentionShape ShapeOf(const CaseSpec& spec);

// Every case of the benchmark, in run order.
std::vector<CaseSpec> AllCases();

// Bytes of memory aligned to 64 bytes, uninitialized until filled.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

// The inputs and outputs of one case, dense BHLD: q [B,Hq,Lq,D], k and v
// [B,Hkv,Lk,D], output [B,Hq,Lq,D] in the case's dtype, and the f32 weights
// [B,Hq,Lq,Lk] for the materialized path. Inputs are uniform in [-1, 1] from a
// fixed seed; every output page is touched.
struct CaseBuffers {
  explicit CaseBuffers(const CaseSpec& spec);

  AttentionInputs inputs() const;
  AttentionOutputs outputs();
  size_t kv_bytes() const { return k.size() + v.size(); }
  size_t total_bytes() const {
    return q.size() + k.size() + v.size() + out.size() + weights.size();
  }

  CaseSpec spec;
  AlignedBuffer q, k, v, out, weights;
  AlignedBuffer entropy, max_weight;  // f32 [B, Hq, Lq] with weight_stats
  std::vector<float> sinks;           // [Hq] with softcap_sinks
  std::vector<float> rel_table;       // [Hq, 32] with relative_bias
  // [Hq, Lk, D] and [Hq, D] with relative_keys.
  std::vector<float> relk_table, relk_bias;
};

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_CASES_H_
