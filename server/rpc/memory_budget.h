#ifndef ATTNSERVE_SERVER_RPC_MEMORY_BUDGET_H_
#define ATTNSERVE_SERVER_RPC_MEMORY_BUDGET_H_

// The bytes that calls in flight may hold at once (--max_inflight_bytes):
// each admitted call reserves its request, its response and, for hosted
// layers, their working buffers, from when it is decoded until its answer is
// handed back to gRPC; past the budget a call is refused with
// RESOURCE_EXHAUSTED instead of the server growing until it is killed. One
// per server, shared by its services. Thread-safe.

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"

namespace attnserve::server {

class MemoryBudget {
 public:
  // Bytes held by one call; released when it goes (move-only).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept
        : budget_(std::exchange(other.budget_, nullptr)),
          bytes_(std::exchange(other.bytes_, 0)) {}
    Reservation& operator=(Reservation&& other) noexcept {
      if (this != &other) {
        Release();
        budget_ = std::exchange(other.budget_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }

    int64_t bytes() const { return bytes_; }
    void Release();
    // Takes over `other`'s bytes: both of one budget, or either empty.
    void Absorb(Reservation other);
    // Gives back all but `bytes` (0 <= bytes <= bytes()).
    void Shrink(int64_t bytes);

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* budget, int64_t bytes)
        : budget_(budget), bytes_(bytes) {}
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // `limit` >= 1 bytes.
  explicit MemoryBudget(int64_t limit) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // `bytes` (>= 0) of the budget, or ResourceExhausted naming the call's
  // bytes, what calls in flight hold and --max_inflight_bytes. Counts the
  // refusal.
  absl::StatusOr<Reservation> Reserve(int64_t bytes);

  int64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  // Calls refused since start.
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> refused_{0};
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_MEMORY_BUDGET_H_
