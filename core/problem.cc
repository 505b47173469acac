#include "core/problem.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "core/variants/linear.h"
#include "core/variants/lsh.h"

namespace attnserve {
namespace {

std::string ExpectedShape(Layout layout, int64_t b, int64_t h, int64_t l,
                          int64_t d) {
  return layout == Layout::kBHLD ? ShapeString({b, h, l, d})
                                 : ShapeString({b, l, h, d});
}

// Reads a [b][h][row][col] view of a rank-4 tensor in `layout` order.
Strides4 LayoutStrides(const TensorView& t, Layout layout) {
  Strides4 s;
  s.b = t.strides[0];
  if (layout == Layout::kBHLD) {
    s.h = t.strides[1];
    s.row = t.strides[2];
  } else {
    s.row = t.strides[1];
    s.h = t.strides[2];
  }
  s.col = t.strides[3];
  return s;
}

absl::Status CheckOperand(absl::string_view name, const TensorView& t,
                          DType dtype) {
  if (t.rank != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected rank 4, got rank ", t.rank, " (shape ",
                     ShapeString(t.dims()), ")"));
  }
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": dtype ", DTypeName(t.dtype),
                     " differs from query dtype ", DTypeName(dtype)));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": negative dimension in shape ", ShapeString(t.dims())));
    }
  }
  if (t.num_elements() > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null data"));
  }
  if (t.shape[3] > 1 && t.strides[3] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": last dimension must be dense (stride 1), got stride ",
        t.strides[3]));
  }
  return absl::OkStatus();
}

absl::Status ResolveExplicitMask(const TensorView& m, Problem* p) {
  const AttentionShape& s = p->shape;
  const int64_t full[4] = {s.batch, s.q_heads, s.q_len, s.k_len};
  if (m.dtype != DType::kBool && m.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask: dtype ", DTypeName(m.dtype),
                     " is not supported (expected bool or f32)"));
  }
  if (m.rank < 0 || m.rank > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("mask: rank ", m.rank, " exceeds 4"));
  }
  int64_t strides[4] = {0, 0, 0, 0};
  for (int i = 0; i < m.rank; ++i) {
    const int target = 4 - m.rank + i;
    const int64_t d = m.shape[i];
    if (d != 1 && d != full[target]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask: shape ", ShapeString(m.dims()), " is not broadcastable to ",
          ShapeString(full), " (dimension ", i, " is ", d, ", expected 1 or ",
          full[target], ")"));
    }
    strides[target] = d == 1 ? 0 : m.strides[i];
  }
  if (m.num_elements() > 0 && m.data == nullptr) {
    return absl::InvalidArgumentError("mask: null data");
  }
  p->mask = m.data;
  p->mask_dtype = m.dtype;
  p->mask_strides = {strides[0], strides[1], strides[2], strides[3]};
  return absl::OkStatus();
}

}  // namespace

double AttentionShape::dense_flops() const {
  return 2.0 * batch * q_heads * q_len * k_len * double(head_dim + value_dim);
}

double AttentionShape::relative_keys_flops() const {
  return 2.0 * batch * q_heads * q_len * k_len * double(head_dim);
}

namespace {

// The bucket of a >= 0 among m buckets (RelativeBiasSpec), in T5's f32
// arithmetic.
int32_t BucketAmong(int64_t a, int32_t m, int32_t max_distance) {
  const int32_t exact = m / 2;
  if (a < exact) return static_cast<int32_t>(a);
  const float ratio = static_cast<float>(a) / static_cast<float>(exact);
  const float span = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(exact)));
  const float v = std::log(ratio) / span * static_cast<float>(m - exact);
  const int64_t bucket = exact + static_cast<int64_t>(v);
  return static_cast<int32_t>(std::min<int64_t>(bucket, m - 1));
}

// The bucket of relative position n from the bucket of a distance among m
// (RelativeBiasSpec): bidirectional, keys after the query take the upper
// half; unidirectional, they share bucket 0.
template <typename OfDistance>
int32_t BucketOfPosition(bool bidirectional, int32_t m, int64_t n,
                         OfDistance of_distance) {
  if (bidirectional) return (n > 0 ? m : 0) + of_distance(n < 0 ? -n : n);
  return of_distance(n < 0 ? -n : 0);
}

absl::Status ResolveRelativeBias(const RelativeBiasSpec& r, Problem* p) {
  RETURN_IF_ERROR(CheckRelativeBias(r, p->shape.q_heads, "mask.relative_bias"));
  p->rel_table = r.table.data();
  p->rel_buckets = r.num_buckets;
  // The buckets of the distances up to the first one in a side's last bucket
  // (at most max_distance + 1: past it every distance is there), each
  // computed once.
  const int32_t m = r.bidirectional ? r.num_buckets / 2 : r.num_buckets;
  std::vector<int32_t> distance;
  do {
    distance.push_back(
        BucketAmong(static_cast<int64_t>(distance.size()), m, r.max_distance));
  } while (distance.back() != m - 1);
  const int64_t edge = static_cast<int64_t>(distance.size()) - 1;
  const auto of_distance = [&](int64_t a) {
    return a <= edge ? distance[static_cast<size_t>(a)] : m - 1;
  };
  p->rel_first = -edge;
  p->rel_bucket.resize(static_cast<size_t>(2 * edge + 1));
  for (int64_t n = -edge; n <= edge; ++n) {
    p->rel_bucket[static_cast<size_t>(n + edge)] =
        BucketOfPosition(r.bidirectional, m, n, of_distance);
  }
  p->rel_below = BucketOfPosition(r.bidirectional, m, -edge - 1, of_distance);
  p->rel_above = BucketOfPosition(r.bidirectional, m, edge + 1, of_distance);
  return absl::OkStatus();
}

absl::Status ResolveRelativeKeys(const RelativeKeysSpec& r, Problem* p) {
  RETURN_IF_ERROR(CheckRelativeKeys(r, p->shape.q_heads, p->shape.head_dim,
                                    "mask.relative_keys"));
  // Read in place, as the keys are (and like theirs, a NaN reaches the
  // scores it is in): a table per head as long as the keys is as large.
  p->relk_table = r.table.data;
  p->relk_query_bias = r.query_bias.empty() ? nullptr : r.query_bias.data();
  p->relk_heads = r.table.dim(0);
  p->relk_rows = r.table.dim(1);
  p->relk_zero_row = r.zero_row;
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRelativeBias(const RelativeBiasSpec& r, int64_t q_heads,
                               absl::string_view field) {
  const int32_t min_buckets = r.bidirectional ? 4 : 2;
  if (r.num_buckets < min_buckets || r.num_buckets > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".num_buckets: ", r.num_buckets, " is outside [", min_buckets,
        ", 1024]", r.bidirectional ? " (bidirectional)" : ""));
  }
  const int32_t m = r.bidirectional ? r.num_buckets / 2 : r.num_buckets;
  const int32_t exact = m / 2;
  if (r.max_distance <= exact || r.max_distance > kMaxRelativeDistance) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".max_distance: ", r.max_distance, " is outside (",
                     exact, ", ", kMaxRelativeDistance, "] (it must pass the ",
                     exact, " exact buckets)"));
  }
  const int64_t entries = q_heads * int64_t{r.num_buckets};
  if (static_cast<int64_t>(r.table.size()) != entries) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".table: expected Hq × num_buckets = ", q_heads, " × ",
        r.num_buckets, " = ", entries, " entries, got ", r.table.size()));
  }
  for (size_t e = 0; e < r.table.size(); ++e) {
    if (!std::isfinite(r.table[e])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".table[", e, "]: must be finite, got ", r.table[e]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRelativeKeys(const RelativeKeysSpec& r, int64_t q_heads,
                               int64_t head_dim, absl::string_view field) {
  const TensorView& t = r.table;
  if (t.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".table: dtype ", DTypeName(t.dtype),
                     " is not supported (expected f32)"));
  }
  if (t.rank != 3 || (t.dim(0) != 1 && t.dim(0) != q_heads) || t.dim(1) < 1 ||
      t.dim(2) != head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".table: shape ", ShapeString(t.dims()),
                     " is not [heads, rows, D] with heads 1 or Hq = ", q_heads,
                     ", rows >= 1 and D = ", head_dim));
  }
  if (!t.is_contiguous() || t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".table: must be dense"));
  }
  const int64_t rows = t.dim(1);
  if (r.zero_row < 0 || r.zero_row >= rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".zero_row: ", r.zero_row,
                     " is outside [0, rows = ", rows, ")"));
  }
  if (!r.query_bias.empty()) {
    if (static_cast<int64_t>(r.query_bias.size()) != q_heads * head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".query_bias: expected Hq·D = ", q_heads * head_dim,
          " entries ([Hq, D]), got ", r.query_bias.size()));
    }
    for (size_t e = 0; e < r.query_bias.size(); ++e) {
      if (!std::isfinite(r.query_bias[e])) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".query_bias[", e, "]: must be finite, got ",
                         r.query_bias[e]));
      }
    }
  }
  return absl::OkStatus();
}

int32_t RelativeBucket(const RelativeBiasSpec& spec, int64_t n) {
  const int32_t m =
      spec.bidirectional ? spec.num_buckets / 2 : spec.num_buckets;
  return BucketOfPosition(spec.bidirectional, m, n, [&](int64_t a) {
    return BucketAmong(a, m, spec.max_distance);
  });
}

absl::Status CheckSoftcap(std::optional<float> softcap) {
  if (softcap && !(std::isfinite(*softcap) && *softcap > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("softcap: must be finite and > 0, got ", *softcap));
  }
  return absl::OkStatus();
}

absl::Status CheckSinks(absl::Span<const float> sinks, int64_t q_heads) {
  if (sinks.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(sinks.size()) != q_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("sinks: expected ", q_heads,
                     " entries (one per query head), got ", sinks.size()));
  }
  for (size_t h = 0; h < sinks.size(); ++h) {
    if (!std::isfinite(sinks[h])) {
      return absl::InvalidArgumentError(
          absl::StrCat("sinks[", h, "]: must be finite, got ", sinks[h]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Problem> ResolveProblem(const AttentionInputs& inputs) {
  Problem p;
  // LSH attention shares queries and keys: the key is the query.
  AttentionInputs shared_qk;
  const bool lsh = inputs.method == AttentionMethod::kLsh;
  if (lsh) {
    if (inputs.key.rank != 0 || inputs.key.data != nullptr) {
      return absl::InvalidArgumentError(
          "key: LSH attention shares queries and keys (Reformer's shared-QK); "
          "send no key");
    }
    shared_qk = inputs;
    shared_qk.key = inputs.query;
  }
  const AttentionInputs& in = lsh ? shared_qk : inputs;
  const DType dtype = in.query.dtype;
  if (!IsFloatDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query: dtype ", DTypeName(dtype),
                     " is not supported (expected f32, bf16 or f16)"));
  }
  RETURN_IF_ERROR(CheckOperand("query", in.query, dtype));
  RETURN_IF_ERROR(CheckOperand("key", in.key, dtype));
  RETURN_IF_ERROR(CheckOperand("value", in.value, dtype));
  const bool bhld = in.layout == Layout::kBHLD;
  const int h_axis = bhld ? 1 : 2;
  const int l_axis = bhld ? 2 : 1;
  AttentionShape& s = p.shape;
  s.batch = in.query.shape[0];
  s.q_heads = in.query.shape[h_axis];
  s.q_len = in.query.shape[l_axis];
  s.head_dim = in.query.shape[3];
  s.kv_heads = in.key.shape[h_axis];
  s.k_len = in.key.shape[l_axis];
  s.value_dim = in.value.shape[3];
  const char* const layout_name = bhld ? "BHLD" : "BLHD";

  if (s.head_dim < 1 || s.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("query: head dimension D = ", s.head_dim,
                     " is out of range [1, ", kMaxHeadDim, "]"));
  }
  if (s.value_dim < 1 || s.value_dim > kMaxValueDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: head dimension Dv = ", s.value_dim,
                     " is out of range [1, ", kMaxValueDim, "]"));
  }
  if (lsh && s.kv_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("query: LSH attention needs at least 1 head, got shape ",
                     ShapeString(in.query.dims())));
  }
  if (s.kv_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: number of kv heads must be at least 1, got ",
                     s.kv_heads, " (shape ", ShapeString(in.key.dims()), ")"));
  }
  // The expected shapes are spelled only for a message: this check runs on
  // every call.
  if (in.key.shape[0] != s.batch || in.key.shape[3] != s.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: shape ", ShapeString(in.key.dims()),
        " does not match query shape ", ShapeString(in.query.dims()),
        " in layout ", layout_name, " (expected ",
        ExpectedShape(in.layout, s.batch, s.kv_heads, s.k_len, s.head_dim),
        ")"));
  }
  const auto expected_value = [&] {
    return ExpectedShape(in.layout, s.batch, s.kv_heads, s.k_len, s.value_dim);
  };
  if (lsh && in.value.rank == 4 &&
      (in.value.shape[0] != s.batch || in.value.shape[h_axis] != s.kv_heads ||
       in.value.shape[l_axis] != s.k_len)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: LSH attention takes its keys from the queries, so value needs "
        "the query's batch, heads and length: expected ",
        expected_value(), ", got ", ShapeString(in.value.dims())));
  }
  if (in.value.shape[0] != s.batch || in.value.shape[h_axis] != s.kv_heads ||
      in.value.shape[l_axis] != s.k_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: shape ", ShapeString(in.value.dims()),
        " does not match key shape ", ShapeString(in.key.dims()), " in layout ",
        layout_name, " (expected ", expected_value(), ")"));
  }
  if (s.q_heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("query heads Hq = ", s.q_heads,
                     " is not a multiple of key/value heads Hkv = ", s.kv_heads,
                     " (Hq % Hkv must be 0)"));
  }
  p.group = s.q_heads / s.kv_heads;
  if (bhld) {
    s.output_shape = {s.batch, s.q_heads, s.q_len, s.value_dim};
  } else {
    s.output_shape = {s.batch, s.q_len, s.q_heads, s.value_dim};
  }
  s.weights_shape = {s.batch, s.q_heads, s.q_len, s.k_len};
  s.row_stats_shape = {s.batch, s.q_heads, s.q_len};

  p.dtype = dtype;
  p.layout = in.layout;
  p.q = in.query.data;
  p.k = in.key.data;
  p.v = in.value.data;
  p.q_strides = LayoutStrides(in.query, in.layout);
  p.k_strides = LayoutStrides(in.key, in.layout);
  p.v_strides = LayoutStrides(in.value, in.layout);

  if (in.scale) {
    if (!std::isfinite(*in.scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale: must be finite, got ", *in.scale));
    }
    p.scale = *in.scale;
  } else {
    p.scale =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  }

  RETURN_IF_ERROR(CheckSoftcap(in.softcap));
  p.softcap = in.softcap.value_or(0.0f);
  RETURN_IF_ERROR(CheckSinks(in.sinks, s.q_heads));
  if (!in.sinks.empty()) p.sinks = in.sinks.data();

  const MaskSpec& m = in.mask;
  p.causal = m.causal;
  p.diag_offset =
      m.alignment == CausalAlignment::kBottomRight ? s.k_len - s.q_len : 0;
  // Windows wider than Lq + Lk allow as much as unbounded ones; clamping keeps
  // the interval arithmetic far from overflow.
  const int64_t max_window = s.q_len + s.k_len;
  if (m.window_left) {
    if (*m.window_left < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask.window_left: must be >= 0, got ", *m.window_left));
    }
    p.window_left = std::min(*m.window_left, max_window);
  }
  if (m.window_right) {
    if (*m.window_right < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask.window_right: must be >= 0, got ", *m.window_right));
    }
    p.window_right = std::min(*m.window_right, max_window);
  }
  if (m.sink_tokens != 0) {
    if (m.sink_tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask.sink_tokens: must be >= 0, got ", m.sink_tokens));
    }
    if (!m.window_left) {
      return absl::InvalidArgumentError(
          "mask.sink_tokens: needs mask.window_left (the first keys it keeps "
          "are in every row's reach without a window)");
    }
    if (m.block_sparse) {
      return absl::InvalidArgumentError(
          "mask.sink_tokens: not with mask.block_sparse (its global_tokens "
          "keep tokens there)");
    }
    p.sink_tokens = std::min(m.sink_tokens, s.k_len);
  }
  if (!m.key_lengths.empty()) {
    if (static_cast<int64_t>(m.key_lengths.size()) != s.batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask.key_lengths: expected ", s.batch,
                       " entries (one per batch), got ", m.key_lengths.size()));
    }
    for (int64_t b = 0; b < s.batch; ++b) {
      if (m.key_lengths[b] < 0 || m.key_lengths[b] > s.k_len) {
        return absl::InvalidArgumentError(
            absl::StrCat("mask.key_lengths[", b, "] = ", m.key_lengths[b],
                         " is out of range [0, Lk = ", s.k_len, "]"));
      }
    }
    p.key_lengths = m.key_lengths.data();
  }
  if (m.explicit_mask)
    RETURN_IF_ERROR(ResolveExplicitMask(*m.explicit_mask, &p));
  if (!m.alibi_slopes.empty()) {
    if (static_cast<int64_t>(m.alibi_slopes.size()) != s.q_heads) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mask.alibi_slopes: expected ", s.q_heads,
          " entries (one per query head), got ", m.alibi_slopes.size()));
    }
    for (size_t h = 0; h < m.alibi_slopes.size(); ++h) {
      if (!std::isfinite(m.alibi_slopes[h])) {
        return absl::InvalidArgumentError(
            absl::StrCat("mask.alibi_slopes[", h, "]: must be finite, got ",
                         m.alibi_slopes[h]));
      }
    }
    p.alibi = m.alibi_slopes.data();
  }
  if (m.relative_bias) {
    RETURN_IF_ERROR(ResolveRelativeBias(*m.relative_bias, &p));
  }
  if (m.relative_keys) {
    RETURN_IF_ERROR(ResolveRelativeKeys(*m.relative_keys, &p));
  }
  if (m.block_sparse) {
    ASSIGN_OR_RETURN(
        p.block_layout,
        BlockLayout::Build(*m.block_sparse, s.q_len, s.k_len, p.diag_offset));
  }
  if (in.kernel == KernelPath::kLinear || in.kernel == KernelPath::kLsh) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel: ", KernelPathName(in.kernel),
        " is the kernel of a method; request the method (linear or LSH "
        "attention) instead"));
  }
  p.kernel = in.kernel;
  p.method = in.method;
  p.linear = in.linear;
  p.lsh = in.lsh;
  if (p.method != AttentionMethod::kSoftmax && p.kernel != KernelPath::kAuto) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel: ", KernelPathName(p.kernel), " is a softmax kernel; ",
        p.method == AttentionMethod::kLinear ? "linear" : "LSH",
        " attention has its own (leave kernel at auto)"));
  }
  switch (p.method) {
    case AttentionMethod::kSoftmax:
      s.flops = (s.dense_flops() +
                 (p.relk_table != nullptr ? s.relative_keys_flops() : 0.0)) *
                (p.block_layout ? p.block_layout->density() : 1.0);
      break;
    case AttentionMethod::kLinear:
      RETURN_IF_ERROR(CheckLinear(p));
      s.flops = LinearFlops(p);
      break;
    case AttentionMethod::kLsh:
      RETURN_IF_ERROR(CheckLsh(p));
      s.flops = LshFlops(p);
      break;
  }
  return p;
}

absl::Status CheckOnlyCausalAndPadding(const Problem& p,
                                       absl::string_view why) {
  const char* part = nullptr;
  if (p.window_left || p.window_right) {
    part = "mask.window_left/window_right: a sliding window";
  } else if (p.mask != nullptr) {
    part = "mask.explicit_mask: an explicit mask";
  } else if (p.alibi != nullptr) {
    part = "mask.alibi_slopes: ALiBi";
  } else if (p.rel_table != nullptr) {
    part = "mask.relative_bias: a relative position bias";
  } else if (p.relk_table != nullptr) {
    part = "mask.relative_keys: relative position keys";
  } else if (p.block_layout != nullptr) {
    part = "mask.block_sparse: a block-sparse layout";
  } else if (p.softcap > 0) {
    part = "softcap: logit soft-capping";
  } else if (p.sinks != nullptr) {
    part = "sinks: attention sinks";
  }
  if (part == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(part, why));
}

absl::StatusOr<Strides4> ResolveOutput(const Problem& p,
                                       const AttentionOutputs& outputs) {
  const AttentionShape& s = p.shape;
  const MutableTensorView& o = outputs.output;
  if (!IsFloatDType(o.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("output: dtype ", DTypeName(o.dtype),
                     " is not supported (expected f32, bf16 or f16)"));
  }
  if (o.rank != 4 || !std::equal(s.output_shape.begin(), s.output_shape.end(),
                                 o.shape.begin())) {
    return absl::InvalidArgumentError(
        absl::StrCat("output: shape ", ShapeString(o.dims()),
                     " does not match ", ShapeString(s.output_shape)));
  }
  if (o.shape[3] > 1 && o.strides[3] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output: last dimension must be dense (stride 1), got stride ",
        o.strides[3]));
  }
  if (o.num_elements() > 0 && o.data == nullptr) {
    return absl::InvalidArgumentError("output: null data");
  }
  if (outputs.weights) {
    const MutableTensorView& w = *outputs.weights;
    if (w.dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: dtype ", DTypeName(w.dtype),
                       " is not supported (expected f32)"));
    }
    if (w.rank != 4 || !std::equal(s.weights_shape.begin(),
                                   s.weights_shape.end(), w.shape.begin())) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights: shape ", ShapeString(w.dims()),
                       " does not match ", ShapeString(s.weights_shape)));
    }
    if (!w.is_contiguous()) {
      return absl::InvalidArgumentError("weights: must be dense (row-major)");
    }
    if (w.num_elements() > 0 && w.data == nullptr) {
      return absl::InvalidArgumentError("weights: null data");
    }
  }
  for (const auto& [name, stats] :
       {std::pair("entropy", &outputs.entropy),
        std::pair("max_weight", &outputs.max_weight)}) {
    if (!stats->has_value()) continue;
    if (p.method != AttentionMethod::kSoftmax) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": only softmax attention has weights to summarize"));
    }
    const MutableTensorView& t = **stats;
    if (t.dtype != DType::kFloat32 || t.rank != 3 ||
        !std::equal(s.row_stats_shape.begin(), s.row_stats_shape.end(),
                    t.shape.begin()) ||
        !t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": expected dense f32 ", ShapeString(s.row_stats_shape),
          ", got ", DTypeName(t.dtype), " ", ShapeString(t.dims())));
    }
    if (t.num_elements() > 0 && t.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": null data"));
    }
  }
  TensorView as_output;
  as_output.rank = 4;
  as_output.strides = o.strides;
  return LayoutStrides(as_output, p.layout);
}

}  // namespace attnserve
