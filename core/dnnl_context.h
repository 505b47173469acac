#ifndef ATTNSERVE_CORE_DNNL_CONTEXT_H_
#define ATTNSERVE_CORE_DNNL_CONTEXT_H_

// Internal to core and model/: the one place that creates oneDNN's engine and
// decides whether bf16 products are worth running, so that core's attention
// products and model/'s projections agree on both. oneDNN types are only
// declared here; dnnl.hpp stays in .cc files.

#include "absl/status/statusor.h"

namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace attnserve {

// The process's oneDNN CPU engine, created on first use and never destroyed;
// every product of every thread runs on it. Internal when oneDNN cannot create
// it (a later call tries again). Thread-safe.
absl::StatusOr<const dnnl::engine*> DnnlEngine();

// The calling thread's stream on DnnlEngine(), created on the thread's first
// call and destroyed when the thread exits. CPU primitives execute
// synchronously on the thread that submits them, so one stream per thread is
// all the products need. Internal when oneDNN fails. Use it on the calling
// thread only.
absl::StatusOr<dnnl::stream*> ThreadDnnlStream();

// True when bf16 × bf16 → f32 matmuls run on an optimized oneDNN kernel on
// this CPU (within ONEDNN_MAX_CPU_ISA); false when only the reference kernel
// has them, which is far slower than widening to f32, or when oneDNN fails.
// Probed once per process, on the first call. Thread-safe.
bool HasBf16Matmul();

// Sets the calling thread's OpenMP thread count (omp_set_num_threads: the
// team size of its parallel regions, which is also the number of threads the
// oneDNN primitives it executes use) for the object's lifetime, and restores
// the previous count on destruction. `threads` < 1 leaves the count as it is.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  const int saved_;
};

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_DNNL_CONTEXT_H_
