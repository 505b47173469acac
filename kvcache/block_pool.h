#ifndef ATTNSERVE_KVCACHE_BLOCK_POOL_H_
#define ATTNSERVE_KVCACHE_BLOCK_POOL_H_

// The byte budget that every KV-cache block is allocated from
// (--kv_cache_bytes). A block holds a fixed number of tokens of one session
// layer; its size depends on the session's shape, so the pool counts bytes
// rather than blocks. Blocks are shared (fork) through shared_ptr and give
// their bytes back when the last owner lets go.

#include <atomic>
#include <cstdint>
#include <memory>

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

 private:
  friend class Block;
  // Shared with the blocks, so that a block released after the pool (an
  // attention call still holding it) returns its bytes to valid memory.
  struct State {
    explicit State(int64_t b) : budget(b) {}
    const int64_t budget;
    std::atomic<int64_t> used{0};
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
