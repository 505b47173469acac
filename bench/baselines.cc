#include "bench/baselines.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/random.h"
#include "core/convert.h"
#include "core/dnnl_context.h"
#include "core/status_macros.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attnserve::bench {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;

constexpr int64_t kGemmSize = 2048;
constexpr double kMaxScoreBytes = 2.0 * (int64_t{1} << 30);

// The process's oneDNN engine (core/dnnl_context.h: the one the measured
// engine runs on) and the calling thread's stream.
struct Dnnl {
  const dnnl::engine* engine;
  dnnl::stream* stream;
};

absl::StatusOr<Dnnl> GetDnnl() {
  ASSIGN_OR_RETURN(const dnnl::engine* engine, DnnlEngine());
  ASSIGN_OR_RETURN(dnnl::stream * stream, ThreadDnnlStream());
  return Dnnl{engine, stream};
}

memory::data_type ToDnnl(DType dtype) {
  return dtype == DType::kBFloat16 ? memory::data_type::bf16
                                   : memory::data_type::f32;
}

// "brg:avx512_core": the implementation oneDNN chose.
std::string Impl(const dnnl::primitive_desc_base& pd) {
  return pd.impl_info_str();
}

absl::Status DnnlError(const dnnl::error& e, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": oneDNN: ", e.what()));
}

// Runs `prims` in order with their arguments and waits.
absl::Status Execute(const std::vector<dnnl::primitive>& prims,
                     const std::vector<std::unordered_map<int, memory>>& args) {
  try {
    ASSIGN_OR_RETURN(const Dnnl d, GetDnnl());
    for (size_t i = 0; i < prims.size(); ++i) {
      prims[i].execute(*d.stream, args[i]);
    }
    d.stream->wait();
  } catch (const dnnl::error& e) {
    return DnnlError(e, "execute");
  }
  return absl::OkStatus();
}

// `src` (`outer` heads of `head_elems` elements) in GemmDType(dtype), each head
// repeated `group` times (GQA K/V). Copies only when it must, into
// `f32_storage` (widened to f32 when GemmDType differs) or `storage` (repeated
// heads).
const void* PrepareOperand(const AlignedBuffer& src, DType dtype, int64_t outer,
                           int64_t head_elems, int64_t group,
                           std::vector<float>* f32_storage,
                           AlignedBuffer* storage) {
  const void* data = src.data();
  const size_t n = src.size() / DTypeSize(dtype);
  if (GemmDType(dtype) != dtype) {
    f32_storage->resize(n);
    ConvertToFloat(data, dtype, f32_storage->data(), n);
    data = f32_storage->data();
  }
  if (group == 1) return data;
  const size_t elem = DTypeSize(GemmDType(dtype));
  const size_t head_bytes = head_elems * elem;
  *storage = AlignedBuffer(outer * group * head_bytes);
  const char* from = static_cast<const char*>(data);
  char* to = static_cast<char*>(storage->data());
  for (int64_t h = 0; h < outer; ++h) {
    for (int64_t g = 0; g < group; ++g) {
      std::memcpy(to + (h * group + g) * head_bytes, from + h * head_bytes,
                  head_bytes);
    }
  }
  return storage->data();
}

}  // namespace

DType GemmDType(DType dtype) {
  return dtype == DType::kBFloat16 && HasBf16Matmul() ? DType::kBFloat16
                                                      : DType::kFloat32;
}

absl::StatusOr<double> GemmGflops(DType dtype, int threads,
                                  const RepPolicy& policy, bool packed_b) {
  const ScopedOmpThreads scoped_threads(threads);
  const DType gemm_dtype = GemmDType(dtype);
  const int64_t n = kGemmSize;
  const size_t elems = n * n;
  AlignedBuffer a(elems * DTypeSize(gemm_dtype));
  AlignedBuffer b(a.size());
  AlignedBuffer c(elems * sizeof(float));
  base::SplitMix64 rng(7);
  std::vector<float> values(elems);
  for (AlignedBuffer* buf : {&a, &b}) {
    for (float& x : values) x = rng.Uniform(-1.0f, 1.0f);
    ConvertFromFloat(values.data(), buf->data(), gemm_dtype, elems);
  }
  std::memset(c.data(), 0, c.size());

  std::vector<dnnl::primitive> prims;
  std::vector<std::unordered_map<int, memory>> args;
  try {
    ASSIGN_OR_RETURN(const Dnnl d, GetDnnl());
    const memory::desc a_md({n, n}, ToDnnl(gemm_dtype), Tag::ab);
    const memory::desc b_md({n, n}, ToDnnl(gemm_dtype),
                            packed_b ? Tag::any : Tag::ab);
    const memory::desc c_md({n, n}, memory::data_type::f32, Tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md),
                                    *d.engine);
    prims.push_back(dnnl::matmul(pd));
    memory b_mem(a_md, *d.engine, b.data());
    if (packed_b && pd.weights_desc() != a_md) {
      memory packed(pd.weights_desc(), *d.engine);
      dnnl::reorder(b_mem, packed).execute(*d.stream, b_mem, packed);
      d.stream->wait();
      b_mem = packed;
    }
    args.push_back({{DNNL_ARG_SRC, memory(a_md, *d.engine, a.data())},
                    {DNNL_ARG_WEIGHTS, b_mem},
                    {DNNL_ARG_DST, memory(c_md, *d.engine, c.data())}});
  } catch (const dnnl::error& e) {
    return DnnlError(e, "GEMM baseline");
  }
  ASSIGN_OR_RETURN(const Timing t,
                   TimeMedian(policy, [&] { return Execute(prims, args); }));
  return 2.0 * n * n * n / (t.median_us * 1e3);
}

std::optional<std::string> UnfusedSkipReason(const CaseSpec& spec) {
  if (spec.path == KernelPath::kDecode) return "decode";
  if (spec.relative_bias) return "T5's relative bias (the baseline has none)";
  if (spec.softcap_sinks)
    return "soft-cap and sinks (the baseline has neither)";
  double bytes = double(spec.b) * spec.hq * spec.lq * spec.lk * sizeof(float);
  if (spec.dtype == DType::kBFloat16) bytes *= 1.5;  // + the bf16 copy of P
  if (bytes > kMaxScoreBytes) return "score buffer above 2 GiB";
  return std::nullopt;
}

absl::StatusOr<UnfusedResult> TimeUnfused(const CaseBuffers& buffers,
                                          int threads,
                                          const RepPolicy& policy) {
  const CaseSpec& s = buffers.spec;
  const ScopedOmpThreads scoped_threads(threads);
  const int64_t bh = s.b * s.hq;
  const int64_t group = s.hq / s.hkv;
  const DType dt = GemmDType(s.dtype);
  const bool bf16 = dt == DType::kBFloat16;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));

  std::vector<float> q32, k32, v32;
  AlignedBuffer k_rep, v_rep, unused;
  const void* q =
      PrepareOperand(buffers.q, s.dtype, bh, s.lq * s.d, 1, &q32, &unused);
  const void* k = PrepareOperand(buffers.k, s.dtype, s.b * s.hkv, s.lk * s.d,
                                 group, &k32, &k_rep);
  const void* v = PrepareOperand(buffers.v, s.dtype, s.b * s.hkv, s.lk * s.d,
                                 group, &v32, &v_rep);

  AlignedBuffer scores(bh * s.lq * s.lk * sizeof(float));
  AlignedBuffer probs(bf16 ? bh * s.lq * s.lk * 2 : 0);
  AlignedBuffer out(bh * s.lq * s.d * sizeof(float));
  AlignedBuffer mask(s.causal ? s.lq * s.lk * sizeof(float) : 0);
  std::memset(scores.data(), 0, scores.size());
  if (bf16) std::memset(probs.data(), 0, probs.size());
  std::memset(out.data(), 0, out.size());
  if (s.causal) {
    float* m = static_cast<float*>(mask.data());
    for (int64_t i = 0; i < s.lq; ++i) {
      for (int64_t j = 0; j < s.lk; ++j) {
        m[i * s.lk + j] =
            j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
      }
    }
  }

  std::vector<dnnl::primitive> prims;
  std::vector<std::unordered_map<int, memory>> args;
  UnfusedResult result;
  try {
    ASSIGN_OR_RETURN(const Dnnl d, GetDnnl());
    const auto f32 = memory::data_type::f32;
    const memory::desc q_md({bh, s.lq, s.d}, ToDnnl(dt), Tag::abc);
    // Kᵀ as a strided view of K [bh, Lk, D]: no transpose copy.
    const memory::desc kt_md({bh, s.d, s.lk}, ToDnnl(dt),
                             Dims{s.lk * s.d, 1, s.d});
    const memory::desc s_md({bh, s.lq, s.lk}, f32, Tag::abc);
    const memory::desc p_md({bh, s.lq, s.lk}, ToDnnl(dt), Tag::abc);
    const memory::desc v_md({bh, s.lk, s.d}, ToDnnl(dt), Tag::abc);
    const memory::desc o_md({bh, s.lq, s.d}, f32, Tag::abc);
    const memory::desc mask_md({1, s.lq, s.lk}, f32, Tag::abc);

    dnnl::primitive_attr qk_attr;
    qk_attr.set_output_scales(0, {scale});
    dnnl::matmul::primitive_desc qk_pd(dnnl::matmul::desc(q_md, kt_md, s_md),
                                       qk_attr, *d.engine);
    prims.push_back(dnnl::matmul(qk_pd));
    args.push_back(
        {{DNNL_ARG_SRC, memory(q_md, *d.engine, const_cast<void*>(q))},
         {DNNL_ARG_WEIGHTS, memory(kt_md, *d.engine, const_cast<void*>(k))},
         {DNNL_ARG_DST, memory(s_md, *d.engine, scores.data())}});

    // The causal mask as its own pass: as a binary post-op with a broadcast
    // mask the matmul falls back to ref:any in oneDNN 2.6 (minutes per call).
    std::string mask_impl;
    if (s.causal) {
      dnnl::binary::primitive_desc mask_pd(
          dnnl::binary::desc(dnnl::algorithm::binary_add, s_md, mask_md, s_md),
          *d.engine);
      mask_impl = absl::StrCat(" -> binary_add causal mask in place [",
                               Impl(mask_pd), "]");
      prims.push_back(dnnl::binary(mask_pd));
      args.push_back({{DNNL_ARG_SRC_0, memory(s_md, *d.engine, scores.data())},
                      {DNNL_ARG_SRC_1, memory(mask_md, *d.engine, mask.data())},
                      {DNNL_ARG_DST, memory(s_md, *d.engine, scores.data())}});
    }

    std::string softmax_impl;
    void* p = scores.data();
    if (bf16) {
      // f32 scores in, bf16 probabilities out: the conversion P·V needs is
      // fused.
      dnnl::softmax_v2_forward::primitive_desc sm_pd(
          dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                         dnnl::algorithm::softmax_accurate,
                                         s_md, p_md, 2),
          *d.engine);
      softmax_impl = Impl(sm_pd);
      prims.push_back(dnnl::softmax_v2_forward(sm_pd));
      p = probs.data();
    } else {
      dnnl::softmax_forward::primitive_desc sm_pd(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, s_md,
                                      2),
          *d.engine);
      softmax_impl = Impl(sm_pd);
      prims.push_back(dnnl::softmax_forward(sm_pd));
    }
    args.push_back({{DNNL_ARG_SRC, memory(s_md, *d.engine, scores.data())},
                    {DNNL_ARG_DST, memory(p_md, *d.engine, p)}});

    dnnl::matmul::primitive_desc pv_pd(dnnl::matmul::desc(p_md, v_md, o_md),
                                       *d.engine);
    prims.push_back(dnnl::matmul(pv_pd));
    args.push_back(
        {{DNNL_ARG_SRC, memory(p_md, *d.engine, p)},
         {DNNL_ARG_WEIGHTS, memory(v_md, *d.engine, const_cast<void*>(v))},
         {DNNL_ARG_DST, memory(o_md, *d.engine, out.data())}});

    const std::string gemm = std::string(DTypeName(dt));
    result.note = absl::StrCat(
        gemm, " matmul QK^T->f32 scores, scale as output scale [", Impl(qk_pd),
        "]", mask_impl, " -> ",
        bf16 ? "softmax_v2 f32->bf16 P [" : "softmax in place [", softmax_impl,
        "] -> ", gemm, " matmul PV->f32 [", Impl(pv_pd), "]; batch B*Hq=", bh,
        s.dtype == DType::kFloat16 ? "; f16 inputs widened to f32 untimed" : "",
        group > 1 ? "; K/V heads repeated untimed" : "");
  } catch (const dnnl::error& e) {
    return DnnlError(e, "unfused baseline");
  }

  ASSIGN_OR_RETURN(result.timing,
                   TimeMedian(policy, [&] { return Execute(prims, args); }));

  const size_t n = bh * s.lq * s.d;
  std::vector<float> kernel_out(n);
  ConvertToFloat(buffers.out.data(), s.dtype, kernel_out.data(), n);
  const float* o = static_cast<const float*>(out.data());
  for (size_t i = 0; i < n; ++i) {
    result.max_abs_diff =
        std::max(result.max_abs_diff, double(std::fabs(o[i] - kernel_out[i])));
  }
  return result;
}

absl::StatusOr<double> CopyGbps(const CaseBuffers& buffers, int threads,
                                const RepPolicy& policy) {
  const size_t bytes = buffers.kv_bytes();
  AlignedBuffer dst(bytes);
  std::memset(dst.data(), 0, bytes);
  char* to = static_cast<char*>(dst.data());
  struct Segment {
    const char* src;
    char* dst;
    size_t bytes;
  };
  const Segment segments[] = {
      {static_cast<const char*>(buffers.k.data()), to, buffers.k.size()},
      {static_cast<const char*>(buffers.v.data()), to + buffers.k.size(),
       buffers.v.size()}};
  auto copy = [&] {
#pragma omp parallel num_threads(threads)
    {
      const size_t t = omp_get_thread_num();
      const size_t nt = omp_get_num_threads();
      for (const Segment& seg : segments) {
        const size_t lo = seg.bytes * t / nt / 64 * 64;
        const size_t hi =
            t + 1 == nt ? seg.bytes : seg.bytes * (t + 1) / nt / 64 * 64;
        std::memcpy(seg.dst + lo, seg.src + lo, hi - lo);
      }
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(const Timing t, TimeMedian(policy, copy));
  return bytes / (t.median_us * 1e3);
}

}  // namespace attnserve::bench
