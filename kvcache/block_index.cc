#include "kvcache/block_index.h"

#include <cstring>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace attnserve::kvcache {
namespace {

uint64_t HashOf(const Block& block) {
  return absl::Hash<absl::string_view>{}(
      absl::string_view(static_cast<const char*>(block.data()),
                        static_cast<size_t>(block.bytes())));
}

bool SameBytes(const Block& a, const Block& b) {
  return a.bytes() == b.bytes() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.bytes())) == 0;
}

}  // namespace

std::shared_ptr<Block> BlockIndex::Share(std::shared_ptr<Block> block) {
  const uint64_t hash = HashOf(*block);
  std::lock_guard<std::mutex> lock(mu_);
  auto [first, last] = blocks_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    std::shared_ptr<Block> other = it->second.lock();
    if (other == nullptr || other == block) continue;
    // Indexed blocks are frozen, so their bytes are what they were; equal
    // hashes may still be different bytes.
    if (SameBytes(*other, *block)) {
      shared_.fetch_add(1);
      return other;
    }
  }
  block->Freeze();
  blocks_.emplace(hash, block);
  if (blocks_.size() >= sweep_at_) SweepLocked();
  return block;
}

int64_t BlockIndex::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(blocks_.size());
}

void BlockIndex::SweepLocked() {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    it = it->second.expired() ? blocks_.erase(it) : std::next(it);
  }
  sweep_at_ = 2 * blocks_.size() + 1024;
}

}  // namespace attnserve::kvcache
