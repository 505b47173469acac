#ifndef ATTNSERVE_CORE_MATMUL_H_
#define ATTNSERVE_CORE_MATMUL_H_

// Internal: oneDNN matmul primitives cached by shape, and a per-thread runner
// that keeps its memory objects bound so a tile product costs one execute call.
// dnnl.hpp stays in matmul.cc.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace attnserve {

// C[m×n] (=|+=) A[m×k] · B[k×n], row-major with leading dimensions in elements.
// A and B are f32 or bf16 (same type); C is f32. When b_is_nk, B is given as an
// n×k matrix (rows of keys) and used transposed.
//
// A primitive is created for exactly these dimensions and leading dimensions
// (oneDNN's fast brgemm matmul takes no run-time dimensions): the kernels keep
// the shapes they ask for to a fixed set per head size and layout, whatever
// Lq and Lk (kernel_common.h, "Tile shapes").
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool b_is_nk = false;
  DType ab_dtype = DType::kFloat32;
  bool accumulate = false;

  bool operator==(const MatmulShape& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb &&
           ldc == o.ldc && b_is_nk == o.b_is_nk && ab_dtype == o.ab_dtype &&
           accumulate == o.accumulate;
  }
  template <typename H>
  friend H AbslHashValue(H h, const MatmulShape& s) {
    return H::combine(std::move(h), s.m, s.n, s.k, s.lda, s.ldb, s.ldc,
                      s.b_is_nk, s.ab_dtype, s.accumulate);
  }
};

class MatmulCache;

// Executes products on the calling thread. Not thread-safe: one per thread.
class MatmulRunner {
 public:
  ~MatmulRunner();
  MatmulRunner(const MatmulRunner&) = delete;
  MatmulRunner& operator=(const MatmulRunner&) = delete;

  // Computes the product; the primitive is created on first use of a shape.
  // Internal on a oneDNN failure.
  absl::Status Run(const MatmulShape& shape, const void* a, const void* b,
                   float* c);

 private:
  friend class MatmulCache;
  struct Impl;
  explicit MatmulRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A primitive cache. Thread-safe. Holds at most `capacity` primitives; past
// that the least recently created half is dropped (runners keep what they
// use).
class MatmulCache {
 public:
  static absl::StatusOr<std::unique_ptr<MatmulCache>> Create(
      size_t capacity = 2048);
  // The process's cache, which every engine uses (created on first use, never
  // destroyed): primitives created for one engine, or by a hosted layer's
  // warm-up, serve all of them. Internal when oneDNN's engine cannot be
  // created.
  static absl::StatusOr<MatmulCache*> Shared();
  ~MatmulCache();
  MatmulCache(const MatmulCache&) = delete;
  MatmulCache& operator=(const MatmulCache&) = delete;

  std::unique_ptr<MatmulRunner> NewRunner();

  // HasBf16Matmul() (dnnl_context.h), for the engine's kernels.
  bool bf16_supported() const { return bf16_supported_; }
  // The implementation oneDNN picked for a shape, e.g. "brg:avx512_core".
  absl::StatusOr<std::string> ImplementationName(const MatmulShape& shape);
  // Creates the primitive of `shape` now unless it is cached (warm-up).
  // Internal on a oneDNN failure.
  absl::Status Prepare(const MatmulShape& shape);
  // Primitives this cache has created so far (tests: a sweep of new lengths
  // after warm-up must create none).
  int64_t created() const;

 private:
  struct Impl;
  explicit MatmulCache(std::unique_ptr<Impl> impl);
  friend struct MatmulRunner::Impl;
  std::unique_ptr<Impl> impl_;
  bool bf16_supported_ = false;
};

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_MATMUL_H_
