#include "server/rpc/memory_budget.h"

#include <cassert>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::server {

void MemoryBudget::Reservation::Release() {
  if (budget_ != nullptr && bytes_ > 0) {
    budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
  }
  budget_ = nullptr;
  bytes_ = 0;
}

void MemoryBudget::Reservation::Absorb(Reservation other) {
  if (budget_ == nullptr) {
    *this = std::move(other);
    return;
  }
  if (other.budget_ == nullptr) return;
  assert(other.budget_ == budget_);
  bytes_ += std::exchange(other.bytes_, 0);
  other.budget_ = nullptr;
}

void MemoryBudget::Reservation::Shrink(int64_t bytes) {
  assert(bytes >= 0 && bytes <= bytes_);
  if (budget_ != nullptr) {
    budget_->used_.fetch_sub(bytes_ - bytes, std::memory_order_relaxed);
  }
  bytes_ = bytes;
}

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(int64_t bytes) {
  int64_t used = used_.load(std::memory_order_relaxed);
  while (true) {
    if (bytes > limit_ - used) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory budget: this call needs ", bytes,
          " bytes (request, response and working buffers) and calls in "
          "flight hold ",
          used, " of the server's --max_inflight_bytes = ", limit_,
          bytes > limit_ ? "; it can never fit, make it smaller"
                         : "; retry later or with less"));
    }
    if (used_.compare_exchange_weak(used, used + bytes,
                                    std::memory_order_relaxed)) {
      return Reservation(this, bytes);
    }
  }
}

}  // namespace attnserve::server
