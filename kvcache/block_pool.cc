#include "kvcache/block_pool.h"

#include <cstdlib>
#include <utility>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::kvcache {

namespace {

// A kept block's memory is unreachable until Take hands it out again: under
// AddressSanitizer a read or write through a stale pointer is reported as on
// freed memory.
#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
extern "C" void __asan_poison_memory_region(void const volatile*, size_t);
extern "C" void __asan_unpoison_memory_region(void const volatile*, size_t);
void Poison(void* p, size_t n) { __asan_poison_memory_region(p, n); }
void Unpoison(void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
void Poison(void*, size_t) {}
void Unpoison(void*, size_t) {}
#endif

}  // namespace

BlockPool::BlockPool(int64_t budget_bytes)
    : state_(std::make_shared<State>(budget_bytes)) {}

int64_t BlockPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->kept_bytes;
}

BlockPool::State::~State() {
  for (auto& [bytes, blocks] : kept) {
    for (void* data : blocks) {
      Unpoison(data, bytes);
      std::free(data);
    }
  }
}

void* BlockPool::State::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = kept.find(bytes);
    if (it != kept.end() && !it->second.empty()) {
      void* data = it->second.back();
      it->second.pop_back();
      kept_bytes -= static_cast<int64_t>(bytes);
      Unpoison(data, bytes);
      return data;
    }
    // used counts this block already.
    for (auto at = kept.begin();
         kept_bytes > 0 && used.load() + kept_bytes > budget;) {
      if (at->second.empty()) {
        at = kept.erase(at);
        continue;
      }
      void* data = at->second.back();
      at->second.pop_back();
      kept_bytes -= static_cast<int64_t>(at->first);
      Unpoison(data, at->first);
      std::free(data);
    }
  }
  return std::aligned_alloc(64, bytes);
}

void BlockPool::State::Keep(void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  Poison(data, bytes);
  kept[bytes].push_back(data);
  kept_bytes += static_cast<int64_t>(bytes);
}

absl::StatusOr<std::shared_ptr<Block>> BlockPool::Allocate(int64_t bytes) {
  int64_t used = state_->used.load();
  do {
    if (bytes > state_->budget - used) {
      return absl::ResourceExhaustedError(absl::StrCat(
          bytes, " bytes asked, ", used, " of the ", state_->budget,
          " bytes of the KV cache (--kv_cache_bytes) in use"));
    }
  } while (!state_->used.compare_exchange_weak(used, used + bytes));
  const size_t aligned = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* data = state_->Take(aligned);
  if (data == nullptr) {
    state_->used.fetch_sub(bytes);
    return absl::InternalError(
        absl::StrCat("cannot allocate a KV block of ", bytes, " bytes"));
  }
  return std::shared_ptr<Block>(new Block(state_, data, bytes));
}

Block::~Block() {
  // Kept before `used` drops: live and kept bytes never exceed the budget.
  pool_->Keep(data_, (static_cast<size_t>(bytes_) + 63) / 64 * 64);
  pool_->used.fetch_sub(bytes_);
}

}  // namespace attnserve::kvcache
