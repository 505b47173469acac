#include "core/paged.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/limits.h"
#include "core/problem.h"
#include "core/status_macros.h"

namespace attnserve {
namespace {

// Stands in for key and value data where only shapes are read (validation).
const char kPlaceholder = 0;

// [d0, d1, d2] as [1, d0, d1, d2] with the same strides.
template <typename View>
View AddBatch(const View& v) {
  View out = v;
  out.rank = 4;
  out.shape = {1, v.shape[0], v.shape[1], v.shape[2]};
  out.strides = {v.shape[0] * v.strides[0], v.strides[0], v.strides[1],
                 v.strides[2]};
  return out;
}

}  // namespace

void GatherPagedKv(const PagedAttentionInputs& in, const PagedKv& kv,
                   void* keys, void* values) {
  const int64_t bt = in.block_tokens;
  const int64_t hkv = in.kv_heads;
  const int64_t es = static_cast<int64_t>(DTypeSize(in.kv_dtype));
  const int64_t k_row = in.head_dim * es;
  const int64_t v_row = in.value_dim * es;
  for (int64_t t = 0; t < kv.tokens; ++t) {
    const char* block = static_cast<const char*>(kv.blocks[t / bt]);
    for (int64_t h = 0; h < hkv; ++h) {
      std::memcpy(static_cast<char*>(keys) + (t * hkv + h) * k_row,
                  block + (h * bt + t % bt) * k_row, k_row);
      std::memcpy(static_cast<char*>(values) + (t * hkv + h) * v_row,
                  block + hkv * bt * k_row + (h * bt + t % bt) * v_row, v_row);
    }
  }
}

absl::Status CheckPagedInputs(const PagedAttentionInputs& in) {
  RETURN_IF_ERROR(CheckRange("q_heads", in.q_heads, 1, kMaxPagedQueryHeads));
  RETURN_IF_ERROR(CheckRange("kv_heads", in.kv_heads, 1, in.q_heads));
  if (in.q_heads % in.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("q_heads: ", in.q_heads, " is not a multiple of kv_heads ",
                     in.kv_heads));
  }
  RETURN_IF_ERROR(CheckRange("head_dim", in.head_dim, 1, kMaxHeadDim));
  RETURN_IF_ERROR(CheckRange("value_dim", in.value_dim, 1, kMaxHeadDim));
  RETURN_IF_ERROR(CheckRange("block_tokens", in.block_tokens, 1, 1 << 16));
  if (!IsFloatDType(in.kv_dtype)) {
    return absl::InvalidArgumentError(
        "kv_dtype: bool is not supported (expected f32, bf16 or f16)");
  }
  for (size_t s = 0; s < in.sequences.size(); ++s) {
    const PagedSequence& seq = in.sequences[s];
    const std::string at = absl::StrCat("sequences[", s, "].");
    const TensorView& q = seq.query;
    if (q.rank != 3 || q.shape[0] < 1 || q.shape[1] != in.q_heads ||
        q.shape[2] != in.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "query: expected [Lnew >= 1, Hq = ", in.q_heads,
          ", D = ", in.head_dim, "], got ", ShapeString(q.dims())));
    }
    if (q.dtype != in.kv_dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "query: dtype ", DTypeName(q.dtype),
                       " differs from the cache's ", DTypeName(in.kv_dtype)));
    }
    const MutableTensorView& o = seq.output;
    if (o.rank != 3 || o.shape[0] != q.shape[0] || o.shape[1] != in.q_heads ||
        o.shape[2] != in.value_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "output: expected [", q.shape[0], ", ", in.q_heads,
                       ", ", in.value_dim, "], got ", ShapeString(o.dims())));
    }
    if (seq.kv.tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "kv.tokens: ", seq.kv.tokens, " is negative"));
    }
    const int64_t blocks =
        (seq.kv.tokens + in.block_tokens - 1) / in.block_tokens;
    if (static_cast<int64_t>(seq.kv.blocks.size()) < blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "kv.blocks: ", seq.kv.blocks.size(), " blocks hold fewer than ",
          seq.kv.tokens, " tokens (", blocks, " blocks needed)"));
    }
    if (seq.weights) {
      const MutableTensorView& w = *seq.weights;
      if (w.dtype != DType::kFloat32 || w.rank != 3 ||
          w.shape[0] != in.q_heads || w.shape[1] != q.shape[0] ||
          w.shape[2] != seq.kv.tokens || !w.is_contiguous()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "weights: expected dense f32 [", in.q_heads, ", ",
                         q.shape[0], ", ", seq.kv.tokens, "], got ",
                         DTypeName(w.dtype), " ", ShapeString(w.dims())));
      }
    }
  }
  return absl::OkStatus();
}

AttentionInputs PagedAsStateless(const PagedAttentionInputs& in,
                                 const PagedSequence& seq, const void* keys,
                                 const void* values) {
  AttentionInputs a;
  a.layout = Layout::kBLHD;
  a.query = AddBatch(seq.query);
  a.key = MakeTensorView(keys != nullptr ? keys : &kPlaceholder, in.kv_dtype,
                         {1, seq.kv.tokens, in.kv_heads, in.head_dim});
  a.value =
      MakeTensorView(values != nullptr ? values : &kPlaceholder, in.kv_dtype,
                     {1, seq.kv.tokens, in.kv_heads, in.value_dim});
  a.mask.causal = in.causal;
  a.mask.alignment = CausalAlignment::kBottomRight;
  a.mask.window_left = in.window_left;
  a.mask.alibi_slopes = in.alibi_slopes;
  a.scale = in.scale;
  return a;
}

AttentionOutputs PagedOutputs(const PagedSequence& seq) {
  AttentionOutputs out;
  out.output = AddBatch(seq.output);
  if (seq.weights) out.weights = AddBatch(*seq.weights);
  return out;
}

}  // namespace attnserve
