// BlockPool on its own: the budget, a freed block's memory reused for the next
// block of its size, live and kept memory within the budget, blocks outliving
// their pool (block_memory_test.cc measures what the reuse saves).

#include "kvcache/block_pool.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::kvcache {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(BlockPoolTest, RefusesPastTheBudgetNamingIt) {
  BlockPool pool(3 * kMiB);
  absl::StatusOr<std::shared_ptr<Block>> a = pool.Allocate(2 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  const absl::Status more = pool.Allocate(2 * kMiB).status();
  EXPECT_EQ(more.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.message(),
              HasSubstr("2097152 bytes asked, 2097152 of the 3145728 bytes of "
                        "the KV cache (--kv_cache_bytes) in use"));
  EXPECT_EQ(pool.used_bytes(), 2 * kMiB);
}

TEST(BlockPoolTest, AFreedBlocksMemoryIsTheNextBlockOfItsSize) {
  BlockPool pool(8 * kMiB);
  std::shared_ptr<Block> a = *pool.Allocate(kMiB);
  std::memset(a->data(), 7, kMiB);
  void* const memory = a->data();
  a.reset();
  EXPECT_EQ(pool.used_bytes(), 0);
  EXPECT_EQ(pool.kept_bytes(), kMiB);
  // Another size takes new memory; the same size takes the kept one.
  std::shared_ptr<Block> other = *pool.Allocate(kMiB / 2);
  EXPECT_NE(other->data(), memory);
  std::shared_ptr<Block> b = *pool.Allocate(kMiB);
  EXPECT_EQ(b->data(), memory);
  EXPECT_EQ(pool.kept_bytes(), 0);
  EXPECT_EQ(pool.used_bytes(), kMiB + kMiB / 2);
  // Sizes round up to 64 bytes, as the blocks' alignment.
  b.reset();
  std::shared_ptr<Block> c = *pool.Allocate(kMiB - 10);
  EXPECT_EQ(c->data(), memory);
  EXPECT_FALSE(c->frozen());
}

TEST(BlockPoolTest, LiveAndKeptMemoryStayWithinTheBudget) {
  BlockPool pool(4 * kMiB);
  std::vector<std::shared_ptr<Block>> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(*pool.Allocate(kMiB));
  blocks.clear();
  EXPECT_EQ(pool.used_bytes(), 0);
  EXPECT_EQ(pool.kept_bytes(), 4 * kMiB);
  // A block of another size frees kept memory until both fit the budget.
  std::shared_ptr<Block> big = *pool.Allocate(3 * kMiB);
  EXPECT_EQ(pool.used_bytes(), 3 * kMiB);
  EXPECT_EQ(pool.kept_bytes(), kMiB);
  std::shared_ptr<Block> small = *pool.Allocate(kMiB);
  EXPECT_EQ(pool.kept_bytes(), 0);
  EXPECT_EQ(pool.Allocate(64).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(BlockPoolTest, ABlockMayOutliveItsPool) {
  std::shared_ptr<Block> survivor;
  {
    BlockPool pool(kMiB);
    survivor = *pool.Allocate(4096);
    std::shared_ptr<Block> kept = *pool.Allocate(4096);
  }
  std::memset(survivor->data(), 1, 4096);
  survivor.reset();  // frees its memory and the pool's kept block (ASan)
}

}  // namespace
}  // namespace attnserve::kvcache
