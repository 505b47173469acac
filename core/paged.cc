#include "core/paged.h"

#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/limits.h"
#include "core/problem.h"
#include "core/status_macros.h"

namespace attnserve {
namespace {

// Stands in for key and value data where only shapes are read (validation).
const char kPlaceholder = 0;

// [d0, ...] (rank 2 or 3) as [1, d0, ...] with the same strides.
template <typename View>
View AddBatch(const View& v) {
  View out = v;
  out.rank = v.rank + 1;
  out.shape[0] = 1;
  out.strides[0] = v.shape[0] * v.strides[0];
  for (int d = 0; d < v.rank; ++d) {
    out.shape[d + 1] = v.shape[d];
    out.strides[d + 1] = v.strides[d];
  }
  return out;
}

}  // namespace

PagedBlockLayout::PagedBlockLayout(int64_t kv_heads, int64_t head_dim,
                                   int64_t value_dim, int64_t block_tokens,
                                   DType kv_dtype)
    : dtype_(kv_dtype), tokens_(block_tokens) {
  const int64_t es = static_cast<int64_t>(DTypeSize(kv_dtype));
  key_row_ = head_dim * es;
  value_row_ = value_dim * es;
  values_ = kv_heads * block_tokens * key_row_;
  key_scales_ = values_ + kv_heads * block_tokens * value_row_;
  const int64_t scales = kv_dtype == DType::kInt8
                             ? kv_heads * block_tokens * int64_t{sizeof(float)}
                             : 0;
  value_scales_ = key_scales_ + scales;
  bytes_ = value_scales_ + scales;
}

int64_t PagedBlockLayout::BytesPerToken(int64_t kv_heads, int64_t head_dim,
                                        int64_t value_dim, DType kv_dtype) {
  return PagedBlockLayout(kv_heads, head_dim, value_dim, 1, kv_dtype).bytes();
}

namespace {

// One stored row as dtype `to` (an int8 row dequantized to f32).
void CopyRow(const char* block, int64_t row_at, int64_t scale_at, int64_t n,
             DType from, char* dst) {
  if (from != DType::kInt8) {
    std::memcpy(dst, block + row_at, static_cast<size_t>(n) * DTypeSize(from));
    return;
  }
  float scale;
  std::memcpy(&scale, block + scale_at, sizeof scale);
  DequantizeInt8(reinterpret_cast<const int8_t*>(block + row_at), n, scale,
                 reinterpret_cast<float*>(dst));
}

// The sequence's window: the call's or its own, the narrower.
std::optional<int64_t> WindowOf(const PagedAttentionInputs& in,
                                const PagedSequence& seq) {
  if (seq.window_left &&
      (!in.window_left || *seq.window_left < *in.window_left))
    return seq.window_left;
  return in.window_left;
}

// A cache's dropped blocks (PagedKv::evicted_blocks) lie among its blocks,
// after its kept first keys (sink_tokens) and before the window of its first
// new query: no query can reach them.
absl::Status CheckDroppedBlocks(const PagedAttentionInputs& in,
                                const PagedSequence& seq, int64_t blocks,
                                const std::string& at) {
  const PagedKv& kv = seq.kv;
  if (kv.evicted_blocks == 0) return absl::OkStatus();
  if (kv.kept_blocks < 0 || kv.evicted_blocks < 0 ||
      kv.kept_blocks + kv.evicted_blocks > blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, "kv: kept_blocks ", kv.kept_blocks, " and evicted_blocks ",
        kv.evicted_blocks, " do not lie within its ", blocks, " blocks"));
  }
  const int64_t bt = in.block_tokens;
  const std::optional<int64_t> window = WindowOf(in, seq);
  const int64_t first_query = kv.tokens - seq.query.shape[0];
  if (seq.sink_tokens > kv.kept_blocks * bt || !window ||
      first_query - *window < (kv.kept_blocks + kv.evicted_blocks) * bt) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, "kv: its dropped tokens [", kv.kept_blocks * bt, ", ",
                     (kv.kept_blocks + kv.evicted_blocks) * bt,
                     ") are within reach of its queries"));
  }
  return absl::OkStatus();
}

}  // namespace

void GatherPagedKv(const PagedAttentionInputs& in, const PagedKv& kv,
                   void* keys, void* values) {
  const int64_t bt = in.block_tokens;
  const int64_t hkv = in.kv_heads;
  const PagedBlockLayout layout(hkv, in.head_dim, in.value_dim, bt,
                                in.kv_dtype);
  const int64_t es =
      static_cast<int64_t>(DTypeSize(PagedOperandDType(in.kv_dtype)));
  const int64_t k_row = in.head_dim * es;
  const int64_t v_row = in.value_dim * es;
  for (int64_t t = 0; t < kv.tokens; ++t) {
    int64_t index = t / bt;
    if (index >= kv.kept_blocks) {
      if (index < kv.kept_blocks + kv.evicted_blocks) {
        std::memset(static_cast<char*>(keys) + t * hkv * k_row, 0,
                    static_cast<size_t>(hkv * k_row));
        std::memset(static_cast<char*>(values) + t * hkv * v_row, 0,
                    static_cast<size_t>(hkv * v_row));
        continue;
      }
      index -= kv.evicted_blocks;
    }
    const char* block = static_cast<const char*>(kv.blocks[index]);
    const int64_t row = t % bt;
    for (int64_t h = 0; h < hkv; ++h) {
      CopyRow(block, layout.key(h, row), layout.key_scale(h, row), in.head_dim,
              in.kv_dtype, static_cast<char*>(keys) + (t * hkv + h) * k_row);
      CopyRow(block, layout.value(h, row), layout.value_scale(h, row),
              in.value_dim, in.kv_dtype,
              static_cast<char*>(values) + (t * hkv + h) * v_row);
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
  RETURN_IF_ERROR(CheckRange("value_dim", in.value_dim, 1, kMaxValueDim));
  RETURN_IF_ERROR(CheckRange("block_tokens", in.block_tokens, 1, 1 << 16));
  if (!IsFloatDType(in.kv_dtype) && in.kv_dtype != DType::kInt8) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_dtype: ", DTypeName(in.kv_dtype),
                     " is not supported (expected f32, bf16, f16 or int8)"));
  }
  const DType operands = PagedOperandDType(in.kv_dtype);
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
    if (q.dtype != operands) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "query: dtype ", DTypeName(q.dtype), " is not ",
                       DTypeName(operands), ", which a cache of ",
                       DTypeName(in.kv_dtype), " takes"));
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
    if (seq.sink_tokens != 0 && !seq.window_left) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "sink_tokens: needs the sequence's window_left"));
    }
    RETURN_IF_ERROR(CheckDroppedBlocks(in, seq, blocks, at));
    if (static_cast<int64_t>(seq.kv.blocks.size()) <
        blocks - seq.kv.evicted_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "kv.blocks: ", seq.kv.blocks.size(),
                       " blocks hold fewer than ", seq.kv.tokens, " tokens (",
                       blocks - seq.kv.evicted_blocks, " blocks needed)"));
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
  const DType dtype = PagedOperandDType(in.kv_dtype);
  a.key = MakeTensorView(keys != nullptr ? keys : &kPlaceholder, dtype,
                         {1, seq.kv.tokens, in.kv_heads, in.head_dim});
  a.value = MakeTensorView(values != nullptr ? values : &kPlaceholder, dtype,
                           {1, seq.kv.tokens, in.kv_heads, in.value_dim});
  a.mask.causal = in.causal;
  a.mask.alignment = CausalAlignment::kBottomRight;
  a.mask.window_left = WindowOf(in, seq);
  a.mask.sink_tokens = seq.sink_tokens;
  a.mask.alibi_slopes = in.alibi_slopes;
  a.scale = in.scale;
  a.softcap = in.softcap;
  a.sinks = in.sinks;
  a.mask.relative_bias = in.relative_bias;
  a.mask.relative_keys = in.relative_keys;
  return a;
}

AttentionOutputs PagedOutputs(const PagedSequence& seq) {
  AttentionOutputs out;
  out.output = AddBatch(seq.output);
  if (seq.weights) out.weights = AddBatch(*seq.weights);
  if (seq.entropy) out.entropy = AddBatch(*seq.entropy);
  if (seq.max_weight) out.max_weight = AddBatch(*seq.max_weight);
  return out;
}

}  // namespace attnserve
