#include "core/matmul.h"

#include <cstring>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/dnnl_context.h"
#include "dnnl.hpp"

namespace attnserve {
namespace {

using dt = dnnl::memory::data_type;

struct Primitive {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md, scratch_md;
  std::string impl;
};

absl::Status DnnlError(const char* what, const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what()));
}

}  // namespace

struct MatmulCache::Impl {
  Impl(const dnnl::engine& engine, size_t capacity)
      : engine(engine), capacity(capacity) {}

  absl::StatusOr<std::shared_ptr<const Primitive>> Get(const MatmulShape& s) {
    {
      absl::MutexLock lock(&mu);
      auto it = map.find(s);
      if (it != map.end()) return it->second;
    }
    // Created outside the lock: creation takes 0.2-2 ms and other shapes should
    // not wait for it. Two threads may race to create the same shape; one wins.
    auto created = Make(s);
    if (!created.ok()) return created.status();
    absl::MutexLock lock(&mu);
    ++created_count;
    auto [it, inserted] = map.emplace(s, *std::move(created));
    if (inserted) {
      order.push_back(s);
      if (map.size() > capacity) {
        for (size_t i = 0, drop = capacity / 2; i < drop; ++i) {
          map.erase(order.front());
          order.pop_front();
        }
      }
    }
    return it->second;
  }

  absl::StatusOr<std::shared_ptr<const Primitive>> Make(const MatmulShape& s) {
    // oneDNN fixes a primitive's thread count when it is created (brgemm keeps
    // omp_get_max_threads() of that moment). Products run on the calling
    // thread inside the kernels' parallel regions, so create every primitive
    // for one thread, wherever it is created (a layer's warm-up runs outside
    // any region; created for two threads, each tile would start a team).
    const ScopedOmpThreads one_thread(1);
    try {
      const dt ab = s.ab_dtype == DType::kBFloat16 ? dt::bf16 : dt::f32;
      auto p = std::make_shared<Primitive>();
      p->a_md = dnnl::memory::desc({s.m, s.k}, ab, {s.lda, 1});
      p->b_md = s.b_is_nk ? dnnl::memory::desc({s.k, s.n}, ab, {1, s.ldb})
                          : dnnl::memory::desc({s.k, s.n}, ab, {s.ldb, 1});
      p->c_md = dnnl::memory::desc({s.m, s.n}, dt::f32, {s.ldc, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (s.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(p->a_md, p->b_md, p->c_md), attr, engine);
      p->scratch_md = pd.scratchpad_desc();
      p->impl = pd.impl_info_str();
      p->prim = dnnl::matmul(pd);
      return std::shared_ptr<const Primitive>(std::move(p));
    } catch (const dnnl::error& e) {
      return DnnlError("matmul creation", e);
    }
  }

  const dnnl::engine engine;  // DnnlEngine()
  const size_t capacity;
  absl::Mutex mu;
  absl::flat_hash_map<MatmulShape, std::shared_ptr<const Primitive>> map
      ABSL_GUARDED_BY(mu);
  std::deque<MatmulShape> order ABSL_GUARDED_BY(mu);
  int64_t created_count ABSL_GUARDED_BY(mu) = 0;
};

struct MatmulRunner::Impl {
  struct Bound {
    std::shared_ptr<const Primitive> p;
    dnnl::memory a, b, c, scratch;
    std::unique_ptr<char[]> scratch_buffer;
    dnnl_exec_arg_t args[4];
  };

  explicit Impl(MatmulCache::Impl* cache)
      : cache(cache), stream(cache->engine) {}

  absl::StatusOr<Bound*> Bind(const MatmulShape& s) {
    auto it = bound.find(s);
    if (it != bound.end()) return it->second.get();
    auto p = cache->Get(s);
    if (!p.ok()) return p.status();
    if (bound.size() >= cache->capacity) bound.clear();
    try {
      auto b = std::make_unique<Bound>();
      b->p = *std::move(p);
      const dnnl::engine& eng = cache->engine;
      b->a = dnnl::memory(b->p->a_md, eng, DNNL_MEMORY_NONE);
      b->b = dnnl::memory(b->p->b_md, eng, DNNL_MEMORY_NONE);
      b->c = dnnl::memory(b->p->c_md, eng, DNNL_MEMORY_NONE);
      const size_t scratch_bytes = b->p->scratch_md.get_size();
      b->scratch_buffer.reset(new char[scratch_bytes > 0 ? scratch_bytes : 1]);
      b->scratch = dnnl::memory(b->p->scratch_md, eng, b->scratch_buffer.get());
      b->args[0] = {DNNL_ARG_SRC, b->a.get()};
      b->args[1] = {DNNL_ARG_WEIGHTS, b->b.get()};
      b->args[2] = {DNNL_ARG_DST, b->c.get()};
      b->args[3] = {DNNL_ARG_SCRATCHPAD, b->scratch.get()};
      Bound* raw = b.get();
      bound.emplace(s, std::move(b));
      return raw;
    } catch (const dnnl::error& e) {
      return DnnlError("memory creation", e);
    }
  }

  MatmulCache::Impl* cache;
  dnnl::stream stream;
  absl::flat_hash_map<MatmulShape, std::unique_ptr<Bound>> bound;
};

MatmulRunner::MatmulRunner(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
MatmulRunner::~MatmulRunner() = default;

absl::Status MatmulRunner::Run(const MatmulShape& shape, const void* a,
                               const void* b, float* c) {
  if (shape.m == 0 || shape.n == 0) return absl::OkStatus();
  auto bound = impl_->Bind(shape);
  if (!bound.ok()) return bound.status();
  Impl::Bound* x = *bound;
  // The C API avoids building an argument map per call; handles are rebound in
  // place.
  dnnl_status_t st =
      dnnl_memory_set_data_handle(x->a.get(), const_cast<void*>(a));
  if (st == dnnl_success) {
    st = dnnl_memory_set_data_handle(x->b.get(), const_cast<void*>(b));
  }
  if (st == dnnl_success) st = dnnl_memory_set_data_handle(x->c.get(), c);
  if (st == dnnl_success) {
    st = dnnl_primitive_execute(x->p->prim.get(), impl_->stream.get(), 4,
                                x->args);
  }
  if (st != dnnl_success) {
    return absl::InternalError(
        absl::StrCat("oneDNN matmul execution failed with status ", st));
  }
  return absl::OkStatus();
}

MatmulCache::MatmulCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MatmulCache::~MatmulCache() = default;

absl::StatusOr<std::unique_ptr<MatmulCache>> MatmulCache::Create(
    size_t capacity) {
  absl::StatusOr<const dnnl::engine*> engine = DnnlEngine();
  if (!engine.ok()) return engine.status();
  std::unique_ptr<MatmulCache> cache(new MatmulCache(
      std::make_unique<Impl>(**engine, capacity < 2 ? 2 : capacity)));
  cache->bf16_supported_ = HasBf16Matmul();
  return cache;
}

absl::StatusOr<MatmulCache*> MatmulCache::Shared() {
  static absl::Mutex mu(absl::kConstInit);
  // Leaked: engines and layers that outlive main() may still use it.
  static MatmulCache* shared ABSL_GUARDED_BY(mu) = nullptr;
  absl::MutexLock lock(&mu);
  if (shared == nullptr) {
    absl::StatusOr<std::unique_ptr<MatmulCache>> cache = Create();
    if (!cache.ok()) return cache.status();
    shared = cache->release();
  }
  return shared;
}

absl::Status MatmulCache::Prepare(const MatmulShape& shape) {
  return impl_->Get(shape).status();
}

int64_t MatmulCache::created() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->created_count;
}

std::unique_ptr<MatmulRunner> MatmulCache::NewRunner() {
  return std::unique_ptr<MatmulRunner>(
      new MatmulRunner(std::make_unique<MatmulRunner::Impl>(impl_.get())));
}

absl::StatusOr<std::string> MatmulCache::ImplementationName(
    const MatmulShape& shape) {
  auto p = impl_->Get(shape);
  if (!p.ok()) return p.status();
  return (*p)->impl;
}

}  // namespace attnserve
