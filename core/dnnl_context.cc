#include "core/dnnl_context.h"

#include <omp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dnnl.hpp"

namespace attnserve {
namespace {

absl::Status DnnlError(const char* what, const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what()));
}

// bf16 products are used only where oneDNN has a real kernel for them. The
// probe is a 64³ product shaped like the attention tiles (B given as n×k,
// accumulating into C).
bool ProbeBf16Matmul() {
  absl::StatusOr<const dnnl::engine*> engine = DnnlEngine();
  if (!engine.ok()) return false;
  using dt = dnnl::memory::data_type;
  try {
    const dnnl::memory::desc a({64, 64}, dt::bf16, {64, 1});
    const dnnl::memory::desc b({64, 64}, dt::bf16, {1, 64});
    const dnnl::memory::desc c({64, 64}, dt::f32, {64, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr,
                                          **engine);
    return std::string(pd.impl_info_str()).find("ref") == std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

absl::StatusOr<const dnnl::engine*> DnnlEngine() {
  static absl::Mutex mu;
  // Leaked: streams of threads that exit after main() still refer to it.
  static dnnl::engine* engine = nullptr;
  absl::MutexLock lock(&mu);
  if (engine == nullptr) {
    try {
      engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    } catch (const dnnl::error& e) {
      return DnnlError("engine creation", e);
    }
  }
  return engine;
}

absl::StatusOr<dnnl::stream*> ThreadDnnlStream() {
  thread_local std::unique_ptr<dnnl::stream> stream;
  if (stream == nullptr) {
    absl::StatusOr<const dnnl::engine*> engine = DnnlEngine();
    if (!engine.ok()) return engine.status();
    try {
      stream = std::make_unique<dnnl::stream>(**engine);
    } catch (const dnnl::error& e) {
      return DnnlError("stream creation", e);
    }
  }
  return stream.get();
}

bool HasBf16Matmul() {
  static const bool has = ProbeBf16Matmul();
  return has;
}

ScopedOmpThreads::ScopedOmpThreads(int threads)
    : saved_(omp_get_max_threads()) {
  if (threads > 0) omp_set_num_threads(threads);
}

ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(saved_); }

}  // namespace attnserve
