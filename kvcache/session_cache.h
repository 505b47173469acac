#ifndef ATTNSERVE_KVCACHE_SESSION_CACHE_H_
#define ATTNSERVE_KVCACHE_SESSION_CACHE_H_

// The KV cache of one sequence: per layer, the tokens appended so far in
// fixed-size blocks. Block i of a layer holds tokens [i·T, (i+1)·T) (T =
// block_tokens) of every kv head, laid out as core's PagedKv reads them in
// place (core/paged.h's PagedBlockLayout), in the session's storage dtype
// (int8 rows quantized when appended, with a scale each). Blocks are shared
// after a fork and copied before a write when shared (copy-on-write), so a
// pinned layer never changes under an attention call.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/limits.h"
#include "core/paged.h"
#include "core/tensor.h"
#include "kvcache/block_index.h"
#include "kvcache/block_pool.h"

namespace attnserve::kvcache {

// Limits of a session's shape (what CreateSession accepts): a session that
// holds every token holds at most kMaxSessionTokens; a sink + window session
// holds a few of them and may run to kMaxStreamTokens positions.
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxKvHeads = 1024;
inline constexpr int64_t kMaxSessionTokens = int64_t{1} << 24;
inline constexpr int64_t kMaxStreamTokens = int64_t{1} << 40;

struct SessionShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int value_dim = 0;
  // kFloat32, kBFloat16, kFloat16 or kInt8.
  DType dtype = DType::kFloat32;
  // Tokens one layer may hold (a sink + window session: its positions).
  int64_t max_tokens = 0;
  // A sink + window session (StreamingLLM) when window_tokens > 0: each
  // layer keeps its first sink_tokens tokens and the last window_tokens, and
  // drops the tokens between them as they fall out of the window. A query at
  // position p attends to the keys in [p - window_tokens + 1, p] and the
  // first sink_tokens (MaskSpec's window_left = window_tokens - 1 and
  // sink_tokens). 0: every token kept.
  int64_t window_tokens = 0;
  int64_t sink_tokens = 0;

  bool operator==(const SessionShape& o) const {
    return num_layers == o.num_layers && num_kv_heads == o.num_kv_heads &&
           head_dim == o.head_dim && value_dim == o.value_dim &&
           dtype == o.dtype && max_tokens == o.max_tokens &&
           window_tokens == o.window_tokens && sink_tokens == o.sink_tokens;
  }
  bool operator!=(const SessionShape& o) const { return !(*this == o); }
};

// "layers 2, kv heads 8, head_dim 128, value_dim 128, bf16, max_tokens 8192"
std::string ShapeText(const SessionShape& shape);

// InvalidArgument naming the field ("shape.num_layers", ...) with the value and
// the accepted range.
absl::Status ValidateShape(const SessionShape& shape);

// Bytes of one block of a layer of `shape`.
int64_t BlockBytes(const SessionShape& shape, int block_tokens);

// Bytes per token of one layer (every kv head, keys and values).
int64_t BytesPerToken(const SessionShape& shape);

// The keys `lnew` new queries of a layer holding `tokens` tokens (theirs
// included) can reach: all of them, or for a sink + window session at most
// its sinks, its window and the new queries' own span.
int64_t ReachableTokens(const SessionShape& shape, int64_t tokens,
                        int64_t lnew);

// A layer pinned for an attention call: its blocks stay alive and unchanged
// for this object's lifetime, whatever happens to the session meanwhile.
struct PinnedLayer {
  int64_t tokens = 0;
  std::vector<std::shared_ptr<const Block>> blocks;
  // blocks[i]->data(): what core's PagedKv takes, with its kept_blocks and
  // evicted_blocks (a sink + window session's dropped middle).
  std::vector<const void*> data;
  int64_t kept_blocks = 0;
  int64_t evicted_blocks = 0;
};

using AllocateFn =
    absl::FunctionRef<absl::StatusOr<std::shared_ptr<Block>>(int64_t bytes)>;

// Not thread-safe: SessionStore serializes the calls on one session.
class SessionCache {
 public:
  SessionCache(const SessionShape& shape, int block_tokens);

  // Appends keys [Lnew, Hkv, D] and values [Lnew, Hkv, Dv] (float dtypes,
  // dense last dimension, Lnew >= 1) to `layer`, converted to the storage
  // dtype, at `position` (must equal the layer's tokens when set). Blocks come
  // from `allocate`; a shared or frozen last block is copied first. With an
  // `index`, each block this append fills is swapped for an indexed block of
  // the same bytes when there is one (BlockIndex::Share). InvalidArgument
  // naming the argument ("key.shape", "position", ...) with the expected and
  // actual values (and a non-finite key or value for int8 storage, which
  // cannot hold one); OutOfRange beyond max_tokens; `allocate`'s errors. On
  // error nothing changes. A sink + window session then drops the tokens the
  // first new token's window does not reach (the layer holds its sinks, the
  // window_tokens - 1 tokens before this append, and this append's, so that
  // a truncate can undo the last append). Returns the layer's new token
  // count.
  absl::StatusOr<int64_t> Append(int layer, std::optional<int64_t> position,
                                 const TensorView& keys,
                                 const TensorView& values, AllocateFn allocate,
                                 BlockIndex* index = nullptr);

  // Appends `n` token rows to `layer` as a snapshot holds them
  // (SnapshotWriter's row layout, BytesPerToken bytes each, already in the
  // storage dtype). InvalidArgument beyond the layer's max_tokens; `allocate`'s
  // errors.
  absl::Status AppendStoredRows(int layer, const char* rows, int64_t n,
                                AllocateFn allocate);
  // A sink + window session's layer, holding its sinks only, moved on to
  // `position` as if the tokens up to it had been appended and dropped (a
  // snapshot's held rows then follow). InvalidArgument when the layer holds
  // more than its sinks or `position` lies before them or past max_tokens.
  absl::Status SkipTo(int layer, int64_t position);
  // Copies token `t` of `layer` into `out` (BytesPerToken bytes) in that
  // layout: per kv head the key, its scale (int8), the value, its scale. `t`
  // must be held (HeldFrom).
  void ReadRow(int layer, int64_t t, char* out) const;
  // The layer holds tokens [0, min(sink_tokens, tokens)) and
  // [HeldFrom(layer), tokens): HeldFrom is 0 for a session that keeps every
  // token.
  int64_t HeldFrom(int layer) const {
    return layers_[static_cast<size_t>(layer)].held_from;
  }

  // Checks what Append would check, without appending.
  absl::Status CheckAppend(int layer, std::optional<int64_t> position,
                           const TensorView& keys,
                           const TensorView& values) const;

  // `layer` as it is now. The layer must exist.
  PinnedLayer Pin(int layer) const;

  // Every layer keeps at most `tokens` tokens; whole blocks past them are
  // released. CheckTruncate first: InvalidArgument (naming "tokens") when a
  // sink + window session has dropped tokens a query at `tokens` would see.
  absl::Status CheckTruncate(int64_t tokens) const;
  void Truncate(int64_t tokens);

  // A copy sharing every block (no K/V memory until one of the two writes).
  SessionCache Fork() const;

  std::vector<int64_t> LayerTokens() const;
  // Tokens `layer` holds; the layer must exist.
  int64_t Tokens(int layer) const {
    return layers_[static_cast<size_t>(layer)].tokens;
  }
  int64_t MaxTokens() const;
  // Bytes of the blocks this session references (shared ones included).
  int64_t Bytes() const;
  const SessionShape& shape() const { return shape_; }

 private:
  struct Layer {
    int64_t tokens = 0;
    // The held blocks: the first kept_blocks_ of the layer, then those from
    // kept_blocks_ + Evicted(layer) on (the ones between were dropped).
    std::vector<std::shared_ptr<Block>> blocks;
    // Tokens [sink_tokens, held_from) were dropped (sink + window only).
    int64_t held_from = 0;
  };

  // The dropped blocks: those past the kept ones whose every token lies below
  // held_from.
  int64_t Evicted(const Layer& l) const {
    return std::max<int64_t>(0, l.held_from / block_tokens_ - kept_blocks_);
  }

  void WriteRows(Layer& layer, int64_t t0, const TensorView& keys,
                 const TensorView& values) const;
  // The layer's blocks (held or dropped), and the one holding token t.
  int64_t LogicalBlocks(const Layer& l) const {
    return static_cast<int64_t>(l.blocks.size()) + Evicted(l);
  }
  std::shared_ptr<Block>& BlockOf(Layer& l, int64_t t) const;
  const std::shared_ptr<Block>& BlockOf(const Layer& l, int64_t t) const;
  // Drops tokens [sink_tokens, to) of `l` (to > held_from) and the blocks
  // they alone filled.
  void DropTo(Layer& l, int64_t to) const;

  SessionShape shape_;
  int block_tokens_;
  int64_t block_bytes_;
  PagedBlockLayout layout_;
  // Blocks a sink + window session never drops: those holding its sinks.
  int64_t kept_blocks_;
  std::vector<Layer> layers_;
};

}  // namespace attnserve::kvcache

#endif  // ATTNSERVE_KVCACHE_SESSION_CACHE_H_
