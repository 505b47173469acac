#include "bench/cases.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/convert.h"

namespace attnserve::bench {
namespace {

constexpr uint32_t kSeed = 20240607;

CaseSpec MakeCase(CaseSpec spec) {
  std::string& n = spec.name;
  if (spec.kind == CaseKind::kPeakRss) n = "peak_rss_";
  absl::StrAppend(&n, KernelPathName(spec.path), spec.causal ? "_causal" : "",
                  "_b", spec.b, "_h", spec.hq);
  if (spec.hkv != spec.hq) absl::StrAppend(&n, "kv", spec.hkv);
  if (spec.lq == spec.lk) {
    absl::StrAppend(&n, "_l", spec.lq);
  } else {
    absl::StrAppend(&n, "_lq", spec.lq, "_lk", spec.lk);
  }
  absl::StrAppend(&n, "_d", spec.d, "_", std::string(DTypeName(spec.dtype)));
  if (spec.softcap_sinks) absl::StrAppend(&n, "_softcap_sinks");
  if (spec.relative_bias) absl::StrAppend(&n, "_t5bias");
  if (spec.relative_keys) absl::StrAppend(&n, "_relkeys");
  if (spec.weight_stats) absl::StrAppend(&n, "_stats");
  if (spec.window > 0) absl::StrAppend(&n, "_w", spec.window);
  if (spec.sink_tokens > 0) absl::StrAppend(&n, "_sink", spec.sink_tokens);
  return spec;
}

CaseSpec Flash(DType dtype, int64_t b, int64_t h, int64_t l, int64_t d) {
  CaseSpec s;
  s.dtype = dtype;
  s.b = b;
  s.hq = s.hkv = h;
  s.lq = s.lk = l;
  s.d = d;
  return s;
}

// Fills n elements of `dtype` with uniform values in [-1, 1].
void FillRandom(void* data, DType dtype, size_t n, base::SplitMix64& rng) {
  if (dtype == DType::kFloat32) {
    float* f = static_cast<float*>(data);
    for (size_t i = 0; i < n; ++i) f[i] = rng.Uniform(-1.0f, 1.0f);
    return;
  }
  uint16_t* h = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    const float x = rng.Uniform(-1.0f, 1.0f);
    h[i] = dtype == DType::kBFloat16 ? FloatToBFloat16(x) : FloatToFloat16(x);
  }
}

}  // namespace

AttentionShape ShapeOf(const CaseSpec& spec) {
  AttentionShape s;
  s.batch = spec.b;
  s.q_heads = spec.hq;
  s.kv_heads = spec.hkv;
  s.q_len = spec.lq;
  s.k_len = spec.lk;
  s.head_dim = s.value_dim = spec.d;
  return s;
}

std::vector<CaseSpec> AllCases() {
  constexpr DType f32 = DType::kFloat32;
  std::vector<CaseSpec> cases;
  auto add = [&cases](CaseSpec s) { cases.push_back(MakeCase(std::move(s))); };

  CaseSpec s = Flash(f32, 1, 16, 2048, 64);
  s.quick = true;
  add(s);
  add(Flash(DType::kBFloat16, 1, 16, 2048, 64));
  add(Flash(DType::kFloat16, 1, 16, 2048, 64));
  add(Flash(f32, 1, 16, 2048, 128));
  add(Flash(f32, 8, 8, 512, 64));
  add(Flash(f32, 1, 16, 4096, 64));
  s = Flash(f32, 1, 16, 4096, 64);
  s.causal = true;
  add(s);
  // A sliding window, and StreamingLLM's with its first keys kept.
  s.window = 512;
  add(s);
  s.sink_tokens = 4;
  add(s);

  s = Flash(f32, 1, 16, 2048, 64);
  s.softcap_sinks = true;
  add(s);
  s = Flash(f32, 1, 16, 2048, 64);
  s.relative_bias = true;
  add(s);
  s = Flash(f32, 1, 16, 2048, 64);
  s.weight_stats = true;
  add(s);
  // Transformer-XL against its plain causal case.
  s = Flash(f32, 1, 16, 4096, 64);
  s.causal = true;
  s.relative_keys = true;
  add(s);

  s = Flash(f32, 1, 32, 1, 128);
  s.path = KernelPath::kDecode;
  s.hkv = 8;
  s.lk = 8192;
  s.quick = true;
  add(s);
  s.softcap_sinks = true;
  s.quick = false;
  add(s);
  s.softcap_sinks = false;
  s.relative_bias = true;
  add(s);
  s.relative_bias = false;
  s.weight_stats = true;
  add(s);
  s.weight_stats = false;
  s.relative_keys = true;
  add(s);
  s.relative_keys = false;
  s.causal = true;
  s.window = 4096;
  add(s);
  s.sink_tokens = 4;
  add(s);

  s = Flash(f32, 1, 8, 1024, 64);
  s.quick = true;
  add(s);
  s.path = KernelPath::kMaterialized;
  add(s);

  // attnctl's default request: short rows, where per-tile costs show.
  s = Flash(f32, 1, 8, 128, 64);
  s.quick = true;
  add(s);

  s = Flash(f32, 1, 1, 32768, 64);
  s.kind = CaseKind::kPeakRss;
  s.fixed_threads = 1;
  add(s);
  return cases;
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + 63) / 64 * 64;
  data_.reset(std::aligned_alloc(64, rounded));
  if (data_ == nullptr) {
    std::fprintf(stderr, "attnserve_kernel_bench: cannot allocate %zu bytes\n",
                 rounded);
    std::abort();
  }
}

CaseBuffers::CaseBuffers(const CaseSpec& s)
    : spec(s),
      q(s.b * s.hq * s.lq * s.d * DTypeSize(s.dtype)),
      k(s.b * s.hkv * s.lk * s.d * DTypeSize(s.dtype)),
      v(k.size()),
      out(q.size()),
      weights(s.path == KernelPath::kMaterialized
                  ? s.b * s.hq * s.lq * s.lk * sizeof(float)
                  : 0),
      entropy(s.weight_stats ? s.b * s.hq * s.lq * sizeof(float) : 0),
      max_weight(entropy.size()) {
  base::SplitMix64 rng(kSeed);
  const size_t elem = DTypeSize(s.dtype);
  FillRandom(q.data(), s.dtype, q.size() / elem, rng);
  FillRandom(k.data(), s.dtype, k.size() / elem, rng);
  FillRandom(v.data(), s.dtype, v.size() / elem, rng);
  // Touched so that page faults are not timed and resident memory is counted.
  std::memset(out.data(), 0, out.size());
  if (weights.size() > 0) std::memset(weights.data(), 0, weights.size());
  if (entropy.size() > 0) {
    std::memset(entropy.data(), 0, entropy.size());
    std::memset(max_weight.data(), 0, max_weight.size());
  }
  if (s.softcap_sinks) {
    for (int64_t h = 0; h < s.hq; ++h)
      sinks.push_back(rng.Uniform(-1.0f, 1.0f));
  }
  if (s.relative_bias) {
    for (int64_t e = 0; e < s.hq * 32; ++e) {
      rel_table.push_back(rng.Uniform(-1.0f, 1.0f));
    }
  }
  if (s.relative_keys) {
    relk_table.resize(static_cast<size_t>(s.hq * s.lk * s.d));
    for (float& x : relk_table) x = rng.Uniform(-1.0f, 1.0f);
    relk_bias.resize(static_cast<size_t>(s.hq * s.d));
    for (float& x : relk_bias) x = rng.Uniform(-1.0f, 1.0f);
  }
}

AttentionInputs CaseBuffers::inputs() const {
  AttentionInputs in;
  in.query =
      MakeTensorView(q.data(), spec.dtype, {spec.b, spec.hq, spec.lq, spec.d});
  in.key =
      MakeTensorView(k.data(), spec.dtype, {spec.b, spec.hkv, spec.lk, spec.d});
  in.value =
      MakeTensorView(v.data(), spec.dtype, {spec.b, spec.hkv, spec.lk, spec.d});
  in.mask.causal = spec.causal;
  in.mask.alignment = CausalAlignment::kBottomRight;
  if (spec.window > 0) in.mask.window_left = spec.window;
  in.mask.sink_tokens = spec.sink_tokens;
  in.kernel = spec.path;
  if (spec.softcap_sinks) {
    in.softcap = 50.0f;
    in.sinks = sinks;
  }
  if (spec.relative_bias) {
    RelativeBiasSpec r;
    r.table = rel_table;
    r.num_buckets = 32;
    r.max_distance = 128;
    r.bidirectional = true;
    in.mask.relative_bias = r;
  }
  if (spec.relative_keys) {
    RelativeKeysSpec r;
    r.table = MakeTensorView(relk_table.data(), DType::kFloat32,
                             {spec.hq, spec.lk, spec.d});
    r.query_bias = relk_bias;
    in.mask.relative_keys = r;
  }
  return in;
}

AttentionOutputs CaseBuffers::outputs() {
  AttentionOutputs o;
  o.output = MakeMutableTensorView(out.data(), spec.dtype,
                                   {spec.b, spec.hq, spec.lq, spec.d});
  if (weights.size() > 0) {
    o.weights = MakeMutableTensorView(weights.data(), DType::kFloat32,
                                      {spec.b, spec.hq, spec.lq, spec.lk});
  }
  if (entropy.size() > 0) {
    o.entropy = MakeMutableTensorView(entropy.data(), DType::kFloat32,
                                      {spec.b, spec.hq, spec.lq});
    o.max_weight = MakeMutableTensorView(max_weight.data(), DType::kFloat32,
                                         {spec.b, spec.hq, spec.lq});
  }
  return o;
}

}  // namespace attnserve::bench
