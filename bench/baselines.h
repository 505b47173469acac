#ifndef ATTNSERVE_BENCH_BASELINES_H_
#define ATTNSERVE_BENCH_BASELINES_H_

// What the kernel's times are divided by, measured in the same process: the
// oneDNN GEMM rate, the unfused oneDNN attention and a memory copy. oneDNN runs
// on OpenMP: each function runs it on `threads` threads (omp_set_num_threads
// before creating primitives) and restores the previous setting when it
// returns.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bench/cases.h"
#include "bench/timing.h"
#include "core/tensor.h"

namespace attnserve::bench {

// The dtype the GEMM rate of `dtype` is measured in: oneDNN 2.6 has no f16
// matmul on CPUs without AVX512-FP16, so f16 is compared with f32; bf16 is
// compared with bf16 where oneDNN has a bf16 matmul (AVX-512), else with f32
// (as the engine then widens bf16 to f32 products).
DType GemmDType(DType dtype);

// Median GFLOP/s of an M = N = K = 2048 oneDNN matmul: GemmDType(dtype) sources
// in plain row-major layouts, f32 destination, `threads` OpenMP threads. The
// primitive is created and run once before timing. With `packed_b`, B is in
// the layout the primitive prefers (format_tag::any, reordered once before
// timing, as the projections' weights are): the GEMM's best case.
absl::StatusOr<double> GemmGflops(DType dtype, int threads,
                                  const RepPolicy& policy,
                                  bool packed_b = false);

// Why the unfused baseline is not run for `spec` (decode, or a score buffer
// above 2 GiB), or nullopt.
std::optional<std::string> UnfusedSkipReason(const CaseSpec& spec);

struct UnfusedResult {
  Timing timing;
  // What was run: primitives, dtypes, the implementations oneDNN chose.
  std::string note;
  // Largest |unfused - buffers.out| over the output, so a broken kernel cannot
  // post a fast time unnoticed. Meaningful when buffers.out holds the kernel's
  // result.
  double max_abs_diff = 0;
};

// Times attention as separate oneDNN primitives, as in oneDNN's SDPA example:
// matmul S = Q·Kᵀ (scale as an output scale), for causal cases a binary add of
// a [1, Lq, Lk] mask into S, softmax over the last axis of S, matmul O = P·V,
// each batched over B·Hq as 3-D tensors. bf16 runs bf16 matmuls with f32 scores
// and softmax_v2 writing bf16 P; f16 inputs are widened to f32 and GQA K/V
// heads repeated before timing. Primitives and buffers are created once,
// outside the timed region.
absl::StatusOr<UnfusedResult> TimeUnfused(const CaseBuffers& buffers,
                                          int threads, const RepPolicy& policy);

// Median GB/s (bytes copied / time) of memcpy of the case's K and V into
// another buffer, split across `threads` OpenMP threads.
absl::StatusOr<double> CopyGbps(const CaseBuffers& buffers, int threads,
                                const RepPolicy& policy);

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_BASELINES_H_
