#include "model/packed_matmul.h"

#include <omp.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/convert.h"
#include "core/dnnl_context.h"
#include "dnnl.hpp"

namespace attnserve::model {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
constexpr dnnl::memory::dim kRuntime = DNNL_RUNTIME_DIM_VAL;

absl::Status DnnlError(absl::string_view what, const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, ": ", e.what()));
}

}  // namespace

struct PackedMatmul::Impl {
  PackedMatmulSpec spec;
  bool bf16_product = false;
  std::string implementation;
  dnnl::engine engine;  // DnnlEngine()
  // oneDNN fixes a primitive's thread count when it is created (the gemm
  // matmul keeps omp_get_max_threads() of that moment), so there is one
  // primitive per thread count the callers run with, all on the same packed
  // weights.
  struct Product {
    dnnl::matmul prim;
    dnnl::memory::desc scratch_md;
  };
  dnnl::memory::desc weights_md;
  mutable absl::Mutex mu;
  mutable std::map<int, std::shared_ptr<const Product>> products
      ABSL_GUARDED_BY(mu);
  dnnl::memory weights;
  dnnl::memory bias;
  bool has_bias = false;
  std::vector<float> bias_data;

  dt src_type() const { return bf16_product ? dt::bf16 : dt::f32; }

  // The product for `threads` OpenMP threads, created on first use. A
  // primitive whose weights layout differs from the packed one (not seen with
  // oneDNN 2.6) is not used: the one-thread product serves instead.
  absl::StatusOr<std::shared_ptr<const Product>> ForThreads(int threads) const {
    {
      absl::MutexLock lock(&mu);
      auto it = products.find(threads);
      if (it != products.end()) return it->second;
    }
    std::shared_ptr<const Product> made;
    try {
      const ScopedOmpThreads scoped(threads);
      const dnnl::matmul::primitive_desc pd = Describe(src_type());
      if (pd.weights_desc() == weights_md) {
        made = std::make_shared<const Product>(
            Product{dnnl::matmul(pd), pd.scratchpad_desc()});
      }
    } catch (const dnnl::error& e) {
      return DnnlError("matmul creation", e);
    }
    absl::MutexLock lock(&mu);
    if (made == nullptr) return products.at(1);
    return products.emplace(threads, std::move(made)).first->second;
  }

  // The primitive for x [rows, k] of `type`; throws dnnl::error.
  dnnl::matmul::primitive_desc Describe(dt type) const {
    const dnnl::memory::desc src({kRuntime, spec.k}, type, dims{spec.lda, 1});
    const dnnl::memory::desc wei({spec.k, spec.n}, type,
                                 dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst({kRuntime, spec.n}, dt::f32,
                                 dims{spec.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (has_bias) {
      const dnnl::memory::desc b({1, spec.n}, dt::f32, dims{spec.n, 1});
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, b, dst),
                                          attr, engine);
    }
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr,
                                        engine);
  }
};

PackedMatmul::PackedMatmul(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
PackedMatmul::~PackedMatmul() = default;

absl::StatusOr<std::unique_ptr<PackedMatmul>> PackedMatmul::Create(
    const PackedMatmulSpec& spec_in, const float* weights, const float* bias) {
  PackedMatmulSpec spec = spec_in;
  if (spec.lda == 0) spec.lda = spec.k;
  if (spec.ldc == 0) spec.ldc = spec.n;
  if (spec.k < 1 || spec.n < 1 || spec.lda < spec.k || spec.ldc < spec.n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PackedMatmul: need k, n >= 1, lda >= k, ldc >= n; got k=", spec.k,
        " n=", spec.n, " lda=", spec.lda, " ldc=", spec.ldc));
  }
  absl::StatusOr<const dnnl::engine*> engine = DnnlEngine();
  if (!engine.ok()) return engine.status();
  absl::StatusOr<dnnl::stream*> stream = ThreadDnnlStream();
  if (!stream.ok()) return stream.status();
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->has_bias = bias != nullptr;
  impl->engine = **engine;
  try {
    // Created for one thread (a layer's warm-up and one-thread workers), and
    // below for the loading thread's count.
    const ScopedOmpThreads one_thread(1);
    dnnl::matmul::primitive_desc pd;
    bool have = false;
    if (spec.bf16 && HasBf16Matmul()) {
      try {
        pd = impl->Describe(dt::bf16);
        have = true;
      } catch (const dnnl::error&) {
        have = false;
      }
      impl->bf16_product = have;
    }
    if (!have) pd = impl->Describe(dt::f32);
    impl->implementation = pd.impl_info_str();
    impl->weights_md = pd.weights_desc();
    {
      absl::MutexLock lock(&impl->mu);
      impl->products.emplace(
          1, std::make_shared<const Impl::Product>(
                 Impl::Product{dnnl::matmul(pd), pd.scratchpad_desc()}));
    }

    // The weights as given, in the product's type (bf16-rounded for a bf16
    // model either way), then reordered once into the primitive's layout.
    const size_t count = static_cast<size_t>(spec.k * spec.n);
    const dims strides = spec.weights_kn ? dims{spec.n, 1} : dims{1, spec.k};
    std::vector<uint16_t> bf16_weights;
    std::vector<float> rounded;
    const void* user_data = weights;
    if (impl->bf16_product) {
      bf16_weights.resize(count);
      ConvertFromFloat(weights, bf16_weights.data(), DType::kBFloat16, count);
      user_data = bf16_weights.data();
    } else if (spec.bf16) {
      rounded.resize(count);
      for (size_t i = 0; i < count; ++i) {
        rounded[i] = BFloat16ToFloat(FloatToBFloat16(weights[i]));
      }
      user_data = rounded.data();
    }
    const dnnl::memory::desc user_md({spec.k, spec.n}, impl->src_type(),
                                     strides);
    dnnl::memory user(user_md, impl->engine, const_cast<void*>(user_data));
    impl->weights = dnnl::memory(pd.weights_desc(), impl->engine);
    // On one thread (one_thread above): a team's idle threads would spin on
    // the cores for a while after it, just as a server that has loaded its
    // models takes its first calls.
    dnnl::reorder(user, impl->weights).execute(**stream, user, impl->weights);
    (*stream)->wait();
    if (bias != nullptr) {
      impl->bias_data.assign(bias, bias + spec.n);
      impl->bias = dnnl::memory(
          dnnl::memory::desc({1, spec.n}, dt::f32, dims{spec.n, 1}),
          impl->engine, impl->bias_data.data());
    }
  } catch (const dnnl::error& e) {
    return DnnlError("matmul creation", e);
  }
  // The loading thread's count too (a server's default, cores / workers, is
  // often it).
  const int threads = omp_get_max_threads();
  if (threads > 1) {
    absl::StatusOr<std::shared_ptr<const Impl::Product>> product =
        impl->ForThreads(threads);
    if (!product.ok()) return product.status();
  }
  return std::unique_ptr<PackedMatmul>(new PackedMatmul(std::move(impl)));
}

absl::Status PackedMatmul::Run(const void* x, int64_t rows, float* y) const {
  if (rows <= 0) return absl::OkStatus();
  const PackedMatmulSpec& spec = impl_->spec;
  // Grow-only per-thread buffers: a worker runs the same few shapes over and
  // over. A request larger than kKeptWidenedFloats widens into a buffer of its
  // own, so one huge call does not pin its size in every worker for good.
  constexpr size_t kKeptWidenedFloats = size_t{16} << 20;  // 64 MiB
  thread_local std::vector<float> kept_widened;
  thread_local std::vector<uint8_t> scratch;
  std::vector<float> own_widened;
  if (spec.bf16 && !impl_->bf16_product) {
    // bf16 bits in, an f32 product on the same values.
    const size_t need = static_cast<size_t>(rows * spec.lda);
    std::vector<float>& widened =
        need <= kKeptWidenedFloats ? kept_widened : own_widened;
    if (widened.size() < need) widened.resize(need);
    const auto* bits = static_cast<const uint16_t*>(x);
    for (int64_t r = 0; r < rows; ++r) {
      ConvertToFloat(bits + r * spec.lda, DType::kBFloat16,
                     widened.data() + r * spec.lda,
                     static_cast<size_t>(spec.k));
    }
    x = widened.data();
  }
  absl::StatusOr<dnnl::stream*> stream = ThreadDnnlStream();
  if (!stream.ok()) return stream.status();
  absl::StatusOr<std::shared_ptr<const Impl::Product>> product =
      impl_->ForThreads(omp_get_max_threads());
  if (!product.ok()) return product.status();
  const Impl::Product& p = **product;
  try {
    dnnl::memory src(dnnl::memory::desc({rows, spec.k}, impl_->src_type(),
                                        dims{spec.lda, 1}),
                     impl_->engine, const_cast<void*>(x));
    dnnl::memory dst(
        dnnl::memory::desc({rows, spec.n}, dt::f32, dims{spec.ldc, 1}),
        impl_->engine, y);
    if (scratch.size() < p.scratch_md.get_size()) {
      scratch.resize(p.scratch_md.get_size());
    }
    dnnl::memory scratchpad(p.scratch_md, impl_->engine, scratch.data());
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_WEIGHTS, impl_->weights},
        {DNNL_ARG_DST, dst},
        {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (impl_->has_bias) args.emplace(DNNL_ARG_BIAS, impl_->bias);
    p.prim.execute(**stream, args);
    (*stream)->wait();
  } catch (const dnnl::error& e) {
    return DnnlError("matmul", e);
  }
  return absl::OkStatus();
}

const std::string& PackedMatmul::implementation() const {
  return impl_->implementation;
}

bool PackedMatmul::bf16_product() const { return impl_->bf16_product; }

}  // namespace attnserve::model
