#ifndef ATTNSERVE_KVCACHE_BLOCK_POOL_H_
#define ATTNSERVE_KVCACHE_BLOCK_POOL_H_

// The byte budget that every KV-cache block is allocated from
// (--kv_cache_bytes). A block holds a fixed number of tokens of one session
// layer; its size depends on the session's shape, so the pool counts bytes
// rather than blocks. Blocks are shared (fork) through shared_ptr and give
// their bytes back when the last owner lets go.
//
// The memory of a freed block is kept for the next block of its size (a
// session's blocks are all one size; a block freed as soon as it fills,
// because another session holds the same bytes, is the next one's memory):
// blocks live and kept together never exceed the budget, so the KV cache's
// memory is bounded by it. Without the reuse the system allocator cannot give
// a freed block's memory to the next block of the same size (it asks for more
// than the block, to align it), and each such hole would stay resident.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::kvcache {

class Block;

class BlockPool {
 public:
  // `budget_bytes` >= 0: the most that live blocks may hold together.
  explicit BlockPool(int64_t budget_bytes);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of `bytes` (> 0) uninitialized bytes, 64-byte aligned.
  // ResourceExhausted when the live blocks and this one would exceed the
  // budget (the message states both and the budget), Internal when the system
  // allocator fails. Thread-safe.
  absl::StatusOr<std::shared_ptr<Block>> Allocate(int64_t bytes);

  int64_t budget_bytes() const { return state_->budget; }
  // Bytes of the live blocks. Thread-safe.
  int64_t used_bytes() const { return state_->used.load(); }
  // Bytes of freed blocks kept for new ones; used + kept <= budget.
  // Thread-safe.
  int64_t kept_bytes() const;

 private:
  friend class Block;
  // Shared with the blocks, so that a block released after the pool (an
  // attention call still holding it) returns its bytes to valid memory.
  struct State {
    explicit State(int64_t b) : budget(b) {}
    ~State();
    // Memory of `bytes` (a multiple of 64, 64-byte aligned): a kept one of
    // that size, or new, freeing kept memory of other sizes first when the
    // new one would take live and kept bytes past the budget. Null when the
    // system allocator fails.
    void* Take(size_t bytes);
    // Keeps the memory of a freed block of `bytes` for Take.
    void Keep(void* data, size_t bytes);

    const int64_t budget;
    std::atomic<int64_t> used{0};
    mutable std::mutex mu;
    std::unordered_map<size_t, std::vector<void*>> kept;  // guarded by mu
    int64_t kept_bytes = 0;                               // guarded by mu
  };
  std::shared_ptr<State> state_;
};

// One allocation of a pool. Its bytes are the owner's to lay out; see
// kvcache/session.h for the layout sessions use.
class Block {
 public:
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

  // A frozen block is never written again: its owners copy it before they
  // write (BlockIndex freezes the blocks other sessions may come to share).
  void Freeze() { frozen_.store(true); }
  bool frozen() const { return frozen_.load(); }

 private:
  friend class BlockPool;
  Block(std::shared_ptr<BlockPool::State> pool, void* data, int64_t bytes)
      : pool_(std::move(pool)), data_(data), bytes_(bytes) {}

  const std::shared_ptr<BlockPool::State> pool_;
  void* const data_;
  const int64_t bytes_;
  std::atomic<bool> frozen_{false};
};

}  // namespace attnserve::kvcache

#endif  // ATTNSERVE_KVCACHE_BLOCK_POOL_H_
