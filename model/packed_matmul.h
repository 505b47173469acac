#ifndef ATTNSERVE_MODEL_PACKED_MATMUL_H_
#define ATTNSERVE_MODEL_PACKED_MATMUL_H_

// Internal: a product with fixed weights, y = x·W (+ b), whose weights are
// reordered once, at creation, into the layout oneDNN prefers, and whose row
// count is given per call (one primitive serves every request size).
// dnnl.hpp stays in packed_matmul.cc.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace attnserve::model {

struct PackedMatmulSpec {
  // x is [M, k] (row stride lda), y is [M, n] (row stride ldc); M per call.
  int64_t k = 0;
  int64_t n = 0;
  int64_t lda = 0;  // 0 = k
  int64_t ldc = 0;  // 0 = n
  // The weights are given as [n, k] (PyTorch's Linear, used transposed), or
  // with weights_kn as [k, n]. Row-major f32, copied at creation.
  bool weights_kn = false;
  // x and W as bf16 (y stays f32): x must then be bf16 bits, and the weights
  // are rounded to bf16. Where oneDNN has no bf16 product on this CPU, the
  // product runs in f32 on the same rounded values (x is widened per call),
  // which gives the same numbers up to the order of accumulation.
  bool bf16 = false;
};

class PackedMatmul {
 public:
  // `weights` as the spec says; `bias` null or [n] f32. InvalidArgument for
  // dimensions below 1 or strides below k/n; Internal when oneDNN fails.
  static absl::StatusOr<std::unique_ptr<PackedMatmul>> Create(
      const PackedMatmulSpec& spec, const float* weights, const float* bias);
  ~PackedMatmul();
  PackedMatmul(const PackedMatmul&) = delete;
  PackedMatmul& operator=(const PackedMatmul&) = delete;

  // y[m] = x[m]·W + b for m in [0, rows). x: f32 rows, or bf16 bits when the
  // spec says bf16. Thread-safe; uses the calling thread's OpenMP thread
  // count (omp_set_num_threads): the first call with a count other than 1 and
  // the creating thread's creates the primitive for it. Internal when oneDNN
  // fails.
  absl::Status Run(const void* x, int64_t rows, float* y) const;

  // The implementation oneDNN picked, e.g. "gemm:jit", "brg:avx512_core".
  const std::string& implementation() const;
  // True when the product runs on bf16 operands.
  bool bf16_product() const;

 private:
  struct Impl;
  explicit PackedMatmul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_PACKED_MATMUL_H_
