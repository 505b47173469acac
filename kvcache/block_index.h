#ifndef ATTNSERVE_KVCACHE_BLOCK_INDEX_H_
#define ATTNSERVE_KVCACHE_BLOCK_INDEX_H_

// Full blocks by their bytes, so that sessions whose blocks hold the same
// keys and values (a shared system prompt, a few-shot header) hold one copy
// (docs/sessions.md, "Shared blocks"). An indexed block is frozen
// (Block::Freeze): its owners copy it before writing into it (after a
// truncate), as they copy a block a fork shares, so a block never changes
// under another session. Entries are weak: the index keeps no block alive.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvcache/block_pool.h"

namespace attnserve::kvcache {

class BlockIndex {
 public:
  BlockIndex() = default;
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // A live indexed block holding the same bytes as `block` (which the caller
  // then lets go), or `block` itself, frozen and indexed from now on. `block`
  // is full: its owner writes no more into it.
  std::shared_ptr<Block> Share(std::shared_ptr<Block> block);

  // How many times Share returned another block than the one it was given.
  int64_t shared() const { return shared_.load(); }
  // Entries, dead ones included until the next sweep (tests).
  int64_t entries() const;

 private:
  // Drops the entries of blocks no one holds; mu_ held.
  void SweepLocked();

  mutable std::mutex mu_;
  std::unordered_multimap<uint64_t, std::weak_ptr<Block>> blocks_;
  // Entries after the last sweep; a sweep runs when they exceed it.
  size_t sweep_at_ = 1024;
  std::atomic<int64_t> shared_{0};
};

}  // namespace attnserve::kvcache

#endif  // ATTNSERVE_KVCACHE_BLOCK_INDEX_H_
