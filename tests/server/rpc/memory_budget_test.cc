// The --max_inflight_bytes budget: reservations add up and release, a call
// past the budget is refused naming it, and concurrent reservations never
// hold more than the limit.

#include "server/rpc/memory_budget.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using ::testing::HasSubstr;

TEST(MemoryBudgetTest, ReservesReleasesAndRefuses) {
  MemoryBudget budget(100);
  auto a = budget.Reserve(60);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(budget.used(), 60);
  auto b = budget.Reserve(41);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("memory budget: this call needs 41 bytes (request, "
                        "response and working buffers) and calls in flight "
                        "hold 60 of the server's --max_inflight_bytes = 100; "
                        "retry later"));
  EXPECT_EQ(budget.refused(), 1);
  auto c = budget.Reserve(40);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(budget.used(), 100);
  a->Release();
  EXPECT_EQ(budget.used(), 40);
  {
    MemoryBudget::Reservation moved = *std::move(c);
    EXPECT_EQ(budget.used(), 40);
  }
  EXPECT_EQ(budget.used(), 0);
  auto never = budget.Reserve(101);
  ASSERT_FALSE(never.ok());
  EXPECT_THAT(std::string(never.status().message()),
              HasSubstr("it can never fit, make it smaller"));
  EXPECT_EQ(budget.refused(), 2);
}

TEST(MemoryBudgetTest, ConcurrentReservationsStayWithinTheLimit) {
  MemoryBudget budget(1000);
  std::atomic<int64_t> peak{0};
  std::atomic<int> granted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        auto r = budget.Reserve(90 + i % 50);
        if (!r.ok()) {
          ++refused;
          continue;
        }
        ++granted;
        int64_t used = budget.used();
        int64_t seen = peak.load();
        while (used > seen && !peak.compare_exchange_weak(seen, used)) {
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(peak.load(), 1000);
  EXPECT_EQ(budget.used(), 0);
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(granted.load() + refused.load(), 80000);
  EXPECT_EQ(budget.refused(), refused.load());
}

}  // namespace
}  // namespace attnserve::server
