#include "kvcache/block_pool.h"

#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::kvcache {

BlockPool::BlockPool(int64_t budget_bytes)
    : state_(std::make_shared<State>(budget_bytes)) {}

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
  void* data = std::aligned_alloc(64, aligned);
  if (data == nullptr) {
    state_->used.fetch_sub(bytes);
    return absl::InternalError(
        absl::StrCat("cannot allocate a KV block of ", bytes, " bytes"));
  }
  return std::shared_ptr<Block>(new Block(state_, data, bytes));
}

Block::~Block() {
  std::free(data_);
  pool_->used.fetch_sub(bytes_);
}

}  // namespace attnserve::kvcache
