#include "kvcache/session_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/status_macros.h"

namespace attnserve::kvcache {

std::string ShapeText(const SessionShape& s) {
  std::string text =
      absl::StrCat("layers ", s.num_layers, ", kv heads ", s.num_kv_heads,
                   ", head_dim ", s.head_dim, ", value_dim ", s.value_dim, ", ",
                   DTypeName(s.dtype), ", max_tokens ", s.max_tokens);
  if (s.window_tokens > 0) {
    absl::StrAppend(&text, ", window_tokens ", s.window_tokens,
                    ", sink_tokens ", s.sink_tokens);
  }
  return text;
}

absl::Status ValidateShape(const SessionShape& s) {
  RETURN_IF_ERROR(CheckRange("shape.num_layers", s.num_layers, 1, kMaxLayers));
  RETURN_IF_ERROR(
      CheckRange("shape.num_kv_heads", s.num_kv_heads, 1, kMaxKvHeads));
  RETURN_IF_ERROR(CheckRange("shape.head_dim", s.head_dim, 1, kMaxHeadDim));
  RETURN_IF_ERROR(CheckRange("shape.value_dim", s.value_dim, 1, kMaxValueDim));
  RETURN_IF_ERROR(
      CheckRange("shape.window_tokens", s.window_tokens, 0, kMaxSessionTokens));
  if (s.window_tokens == 0) {
    RETURN_IF_ERROR(
        CheckRange("shape.max_tokens", s.max_tokens, 1, kMaxSessionTokens));
    if (s.sink_tokens != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape.sink_tokens: ", s.sink_tokens,
          " needs shape.window_tokens (a session without a window keeps "
          "every token)"));
    }
  } else {
    RETURN_IF_ERROR(
        CheckRange("shape.max_tokens", s.max_tokens, 1, kMaxStreamTokens));
    RETURN_IF_ERROR(CheckRange("shape.sink_tokens", s.sink_tokens, 0,
                               kMaxSessionTokens - s.window_tokens));
  }
  if (!IsFloatDType(s.dtype) && s.dtype != DType::kInt8) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.storage_dtype: ", DTypeName(s.dtype),
                     " is not supported (expected f32, bf16, f16 or int8)"));
  }
  return absl::OkStatus();
}

int64_t BytesPerToken(const SessionShape& s) {
  return PagedBlockLayout::BytesPerToken(s.num_kv_heads, s.head_dim,
                                         s.value_dim, s.dtype);
}

int64_t BlockBytes(const SessionShape& s, int block_tokens) {
  return BytesPerToken(s) * block_tokens;
}

int64_t ReachableTokens(const SessionShape& s, int64_t tokens, int64_t lnew) {
  if (s.window_tokens == 0) return tokens;
  return std::min(tokens, s.sink_tokens + s.window_tokens + lnew - 1);
}

SessionCache::SessionCache(const SessionShape& shape, int block_tokens)
    : shape_(shape),
      block_tokens_(block_tokens),
      block_bytes_(BlockBytes(shape, block_tokens)),
      layout_(shape.num_kv_heads, shape.head_dim, shape.value_dim, block_tokens,
              shape.dtype),
      kept_blocks_((shape.sink_tokens + block_tokens - 1) / block_tokens),
      layers_(static_cast<size_t>(shape.num_layers)) {
  for (Layer& l : layers_) l.held_from = shape.sink_tokens;
}

std::shared_ptr<Block>& SessionCache::BlockOf(Layer& l, int64_t t) const {
  int64_t index = t / block_tokens_;
  if (index >= kept_blocks_) index -= Evicted(l);
  return l.blocks[static_cast<size_t>(index)];
}

const std::shared_ptr<Block>& SessionCache::BlockOf(const Layer& l,
                                                    int64_t t) const {
  return BlockOf(const_cast<Layer&>(l), t);
}

namespace {

// The index of a non-finite element of t ([Lnew, Hkv, dim], last dimension
// dense), or -1.
int64_t FirstNonFinite(const TensorView& t) {
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    for (int64_t h = 0; h < t.shape[1]; ++h) {
      const int64_t at = r * t.strides[0] + h * t.strides[1];
      for (int64_t c = 0; c < t.shape[2]; ++c) {
        if (!std::isfinite(LoadAsFloat(t.data, t.dtype, at + c))) {
          return (r * t.shape[1] + h) * t.shape[2] + c;
        }
      }
    }
  }
  return -1;
}

// One row of n elements of `dtype` quantized into `row` and its scale.
void Quantize(const char* src, DType dtype, int64_t n, char* row, char* scale,
              std::vector<float>* buffer) {
  buffer->resize(static_cast<size_t>(n));
  ConvertToFloat(src, dtype, buffer->data(), static_cast<size_t>(n));
  const float s =
      QuantizeInt8(buffer->data(), n, reinterpret_cast<int8_t*>(row));
  std::memcpy(scale, &s, sizeof s);
}

}  // namespace

absl::Status SessionCache::CheckAppend(int layer,
                                       std::optional<int64_t> position,
                                       const TensorView& keys,
                                       const TensorView& values) const {
  if (layer < 0 || layer >= shape_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer: ", layer, " is outside [0, ", shape_.num_layers,
                     ") (the session has ", shape_.num_layers, " layers)"));
  }
  const int64_t hkv = shape_.num_kv_heads;
  const auto check = [&](absl::string_view name, const TensorView& t,
                         int64_t dim, absl::string_view dim_name) {
    const absl::string_view field = name;
    if (!IsFloatDType(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: ", DTypeName(t.dtype),
                       " is not supported (expected f32, bf16 or f16)"));
    }
    if (t.rank != 3 || t.shape[1] != hkv || t.shape[2] != dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape: expected [Lnew, num_kv_heads = ", hkv, ", ", dim_name,
          " = ", dim, "], got ", ShapeString(t.dims())));
    }
    if (t.strides[2] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": the last dimension must be dense"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check("key", keys, shape_.head_dim, "head_dim"));
  RETURN_IF_ERROR(check("value", values, shape_.value_dim, "value_dim"));
  const int64_t n = keys.shape[0];
  if (values.shape[0] != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("value.shape: ", values.shape[0],
                     " tokens differ from the ", n, " tokens of key"));
  }
  if (n < 1) {
    return absl::InvalidArgumentError(
        "key.shape: no tokens (Lnew must be >= 1)");
  }
  if (shape_.dtype == DType::kInt8) {
    const int64_t bad_key = FirstNonFinite(keys);
    const int64_t bad_value = bad_key < 0 ? FirstNonFinite(values) : -1;
    if (bad_key >= 0 || bad_value >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          bad_key >= 0 ? "key" : "value", ": element ",
          bad_key >= 0 ? bad_key : bad_value,
          " is not finite (int8 storage holds finite values only)"));
    }
  }
  const Layer& l = layers_[static_cast<size_t>(layer)];
  if (position && *position != l.tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "position: ", *position,
        *position > l.tokens ? " leaves a gap after the " : " overlaps the ",
        l.tokens, " tokens layer ", layer,
        " holds (positions must be contiguous: expected ", l.tokens, ")"));
  }
  if (n > shape_.max_tokens - l.tokens) {
    return absl::OutOfRangeError(absl::StrCat(
        "layer ", layer, " would hold ", l.tokens + n,
        " tokens, above the session's max_tokens ", shape_.max_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SessionCache::Append(
    int layer, std::optional<int64_t> position, const TensorView& keys,
    const TensorView& values, AllocateFn allocate, BlockIndex* index) {
  RETURN_IF_ERROR(CheckAppend(layer, position, keys, values));
  Layer& l = layers_[static_cast<size_t>(layer)];
  const int64_t t0 = l.tokens;
  const int64_t t1 = t0 + keys.shape[0];
  const int64_t bt = block_tokens_;
  // Every block this append needs, allocated before anything changes. (A
  // layer moved on by SkipTo may not have the block of t0 yet.)
  std::shared_ptr<Block> copy;
  const bool partial = t0 % bt != 0 && t0 / bt < LogicalBlocks(l);
  if (partial) {
    const std::shared_ptr<Block>& last = BlockOf(l, t0);
    if (last.use_count() > 1 || last->frozen()) {
      ASSIGN_OR_RETURN(copy, allocate(block_bytes_));
      std::memcpy(copy->data(), last->data(),
                  static_cast<size_t>(block_bytes_));
    }
  }
  std::vector<std::shared_ptr<Block>> fresh;
  for (int64_t i = LogicalBlocks(l); i * bt < t1; ++i) {
    ASSIGN_OR_RETURN(std::shared_ptr<Block> block, allocate(block_bytes_));
    fresh.push_back(std::move(block));
  }
  if (copy) BlockOf(l, t0) = std::move(copy);
  for (std::shared_ptr<Block>& block : fresh) {
    l.blocks.push_back(std::move(block));
  }
  WriteRows(l, t0, keys, values);
  l.tokens = t1;
  // A sink + window session drops what the first new token's window no
  // longer reaches (a later truncate can undo this append, not more).
  if (shape_.window_tokens > 0) DropTo(l, t0 - shape_.window_tokens + 1);
  if (index != nullptr) {
    for (int64_t i = t0 / bt; (i + 1) * bt <= t1; ++i) {
      std::shared_ptr<Block>& full = BlockOf(l, i * bt);
      full = index->Share(std::move(full));
    }
  }
  return t1;
}

void SessionCache::WriteRows(Layer& l, int64_t t0, const TensorView& keys,
                             const TensorView& values) const {
  const int64_t bt = block_tokens_;
  const int64_t hkv = shape_.num_kv_heads;
  const int64_t d = shape_.head_dim;
  const int64_t dv = shape_.value_dim;
  const int64_t ks = static_cast<int64_t>(DTypeSize(keys.dtype));
  const int64_t vs = static_cast<int64_t>(DTypeSize(values.dtype));
  std::vector<float> row_buffer;
  for (int64_t r = 0; r < keys.shape[0]; ++r) {
    const int64_t t = t0 + r;
    char* base = static_cast<char*>(BlockOf(l, t)->data());
    const int64_t row = t % bt;
    for (int64_t h = 0; h < hkv; ++h) {
      const char* k = static_cast<const char*>(keys.data) +
                      (r * keys.strides[0] + h * keys.strides[1]) * ks;
      const char* v = static_cast<const char*>(values.data) +
                      (r * values.strides[0] + h * values.strides[1]) * vs;
      if (shape_.dtype == DType::kInt8) {
        Quantize(k, keys.dtype, d, base + layout_.key(h, row),
                 base + layout_.key_scale(h, row), &row_buffer);
        Quantize(v, values.dtype, dv, base + layout_.value(h, row),
                 base + layout_.value_scale(h, row), &row_buffer);
        continue;
      }
      ConvertDType(k, keys.dtype, base + layout_.key(h, row), shape_.dtype,
                   static_cast<size_t>(d));
      ConvertDType(v, values.dtype, base + layout_.value(h, row), shape_.dtype,
                   static_cast<size_t>(dv));
    }
  }
}

namespace {

// The parts of one token's row in a block, in a snapshot's order: fn(offset
// in the block, bytes) per kv head for the key, its scale (int8), the value,
// its scale (int8).
template <typename Fn>
void ForEachRowPart(const PagedBlockLayout& layout, const SessionShape& shape,
                    int64_t row, Fn fn) {
  const int64_t es = static_cast<int64_t>(DTypeSize(shape.dtype));
  const bool int8 = shape.dtype == DType::kInt8;
  for (int64_t h = 0; h < shape.num_kv_heads; ++h) {
    fn(layout.key(h, row), shape.head_dim * es);
    if (int8) fn(layout.key_scale(h, row), int64_t{sizeof(float)});
    fn(layout.value(h, row), shape.value_dim * es);
    if (int8) fn(layout.value_scale(h, row), int64_t{sizeof(float)});
  }
}

}  // namespace

absl::Status SessionCache::AppendStoredRows(int layer, const char* rows,
                                            int64_t n, AllocateFn allocate) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  if (n > shape_.max_tokens - l.tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer, " would hold ", l.tokens + n,
        " tokens, above the session's max_tokens ", shape_.max_tokens));
  }
  const int64_t bt = block_tokens_;
  const int64_t row_bytes = BytesPerToken(shape_);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = l.tokens;
    if (t / bt >= LogicalBlocks(l)) {
      ASSIGN_OR_RETURN(std::shared_ptr<Block> block, allocate(block_bytes_));
      // Zeros in the rows no snapshot row fills (past a sink + window
      // session's sinks, before its first held token), which the kernels
      // read as masked keys: 0 weight times 0, never times garbage.
      std::memset(block->data(), 0, static_cast<size_t>(block_bytes_));
      l.blocks.push_back(std::move(block));
    }
    char* block = static_cast<char*>(BlockOf(l, t)->data());
    const char* from = rows + r * row_bytes;
    ForEachRowPart(layout_, shape_, t % bt, [&](int64_t at, int64_t bytes) {
      std::memcpy(block + at, from, static_cast<size_t>(bytes));
      from += bytes;
    });
    l.tokens = t + 1;
  }
  return absl::OkStatus();
}

absl::Status SessionCache::SkipTo(int layer, int64_t position) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  if (shape_.window_tokens == 0 || l.tokens != shape_.sink_tokens ||
      position < l.tokens || position > shape_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer, ": cannot move on from ", l.tokens, " tokens to ",
        position, " (a sink + window session's held rows start after its ",
        shape_.sink_tokens, " sinks, within max_tokens ", shape_.max_tokens,
        ")"));
  }
  l.tokens = position;
  DropTo(l, position);
  return absl::OkStatus();
}

void SessionCache::DropTo(Layer& l, int64_t to) const {
  if (to <= l.held_from) return;
  const int64_t before = Evicted(l);
  l.held_from = to;
  // The blocks newly dropped that the layer holds (a layer moved on by
  // SkipTo has none past its kept ones).
  const int64_t held =
      std::min<int64_t>(Evicted(l) - before,
                        static_cast<int64_t>(l.blocks.size()) - kept_blocks_);
  if (held > 0) {
    l.blocks.erase(l.blocks.begin() + kept_blocks_,
                   l.blocks.begin() + kept_blocks_ + held);
  }
}

void SessionCache::ReadRow(int layer, int64_t t, char* out) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const int64_t bt = block_tokens_;
  const char* block = static_cast<const char*>(BlockOf(l, t)->data());
  ForEachRowPart(layout_, shape_, t % bt, [&](int64_t at, int64_t bytes) {
    std::memcpy(out, block + at, static_cast<size_t>(bytes));
    out += bytes;
  });
}

PinnedLayer SessionCache::Pin(int layer) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  PinnedLayer pinned;
  pinned.tokens = l.tokens;
  pinned.blocks.assign(l.blocks.begin(), l.blocks.end());
  pinned.data.reserve(l.blocks.size());
  for (const auto& block : l.blocks) pinned.data.push_back(block->data());
  pinned.kept_blocks = kept_blocks_;
  pinned.evicted_blocks = Evicted(l);
  return pinned;
}

absl::Status SessionCache::CheckTruncate(int64_t tokens) const {
  if (shape_.window_tokens == 0) return absl::OkStatus();
  // A query at `tokens` sees [first, tokens) past the sinks.
  const int64_t first =
      std::max(shape_.sink_tokens, tokens - shape_.window_tokens + 1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (l.tokens > tokens && first < tokens && first < l.held_from) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokens: ", tokens, " would reach back to token ", first,
          ", and layer ", i, " has dropped tokens [", shape_.sink_tokens, ", ",
          l.held_from, ") (a sink + window session keeps its first ",
          shape_.sink_tokens, " and last ", shape_.window_tokens,
          " tokens): it can go back to ",
          l.held_from + shape_.window_tokens - 1, " at most, or to ",
          shape_.sink_tokens, " and below"));
    }
  }
  return absl::OkStatus();
}

void SessionCache::Truncate(int64_t tokens) {
  const int64_t bt = block_tokens_;
  for (Layer& l : layers_) {
    if (l.tokens <= tokens) continue;
    l.tokens = tokens;
    int64_t blocks = (tokens + bt - 1) / bt;
    if (tokens <= shape_.sink_tokens) {
      // Back within the sinks: nothing past them is held any more.
      l.held_from = shape_.sink_tokens;
    } else if (blocks > kept_blocks_) {
      blocks -= Evicted(l);
    }
    l.blocks.resize(static_cast<size_t>(blocks));
  }
}

SessionCache SessionCache::Fork() const { return *this; }

std::vector<int64_t> SessionCache::LayerTokens() const {
  std::vector<int64_t> tokens;
  tokens.reserve(layers_.size());
  for (const Layer& l : layers_) tokens.push_back(l.tokens);
  return tokens;
}

int64_t SessionCache::MaxTokens() const {
  int64_t most = 0;
  for (const Layer& l : layers_) most = std::max(most, l.tokens);
  return most;
}

int64_t SessionCache::Bytes() const {
  int64_t blocks = 0;
  for (const Layer& l : layers_)
    blocks += static_cast<int64_t>(l.blocks.size());
  return blocks * block_bytes_;
}

}  // namespace attnserve::kvcache
