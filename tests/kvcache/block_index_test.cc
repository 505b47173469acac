// BlockIndex on its own, and sessions sharing full blocks through it: one copy
// of equal blocks, none of different ones, nothing kept alive, and no block
// written while another session holds it (truncate, then append).

#include "kvcache/block_index.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kvcache/block_pool.h"
#include "kvcache/session_cache.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::RowValue;

std::shared_ptr<Block> Filled(BlockPool& pool, char byte, int64_t bytes = 64) {
  std::shared_ptr<Block> b = *pool.Allocate(bytes);
  std::memset(b->data(), byte, static_cast<size_t>(bytes));
  return b;
}

TEST(BlockIndexTest, EqualBytesShareOneBlockAndNothingIsKeptAlive) {
  BlockPool pool(1 << 20);
  BlockIndex index;
  std::shared_ptr<Block> a = index.Share(Filled(pool, 1));
  EXPECT_TRUE(a->frozen());
  std::shared_ptr<Block> b = index.Share(Filled(pool, 1));
  EXPECT_EQ(b, a);  // the second copy was let go
  EXPECT_EQ(pool.used_bytes(), 64);
  EXPECT_EQ(index.shared(), 1);
  // Different bytes, or the same bytes at another size: blocks of their own.
  std::shared_ptr<Block> c = index.Share(Filled(pool, 2));
  std::shared_ptr<Block> d = index.Share(Filled(pool, 1, 128));
  EXPECT_NE(c, a);
  EXPECT_NE(d, a);
  EXPECT_EQ(index.shared(), 1);
  // The index holds no block: dropping every owner frees them all.
  a.reset();
  b.reset();
  c.reset();
  d.reset();
  EXPECT_EQ(pool.used_bytes(), 0);
  // A dead entry is never returned.
  std::shared_ptr<Block> e = index.Share(Filled(pool, 1));
  EXPECT_EQ(index.shared(), 1);
  EXPECT_EQ(pool.used_bytes(), 64);
}

TEST(BlockIndexTest, DeadEntriesAreSweptAsTheIndexGrows) {
  BlockPool pool(1 << 20);
  BlockIndex index;
  for (int i = 0; i < 5000; ++i) {
    std::shared_ptr<Block> b = *pool.Allocate(8);
    std::memcpy(b->data(), &i, sizeof i);
    index.Share(b);  // dropped at once
  }
  EXPECT_LT(index.entries(), 2100);
}

SessionShape Shape() {
  SessionShape s;
  s.num_layers = 1;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.value_dim = 4;
  s.max_tokens = 100;
  return s;
}

constexpr int kBlock = 4;

class SharedBlocksTest : public ::testing::Test {
 protected:
  // Appends tokens [t0, t0 + n) of the rows of kv_test_util.h (`sign` tells
  // sessions apart where they differ).
  void Append(SessionCache& cache, int64_t t0, int64_t n, float sign = 1.0f) {
    const SessionShape& s = cache.shape();
    auto k = MakeRows(t0, n, s.num_kv_heads, s.head_dim, sign);
    auto v = MakeRows(t0, n, s.num_kv_heads, s.value_dim, -sign);
    ASSERT_TRUE(cache
                    .Append(
                        0, t0, k.view, v.view,
                        [&](int64_t b) { return pool_.Allocate(b); }, &index_)
                    .ok());
  }
  void ExpectRows(const SessionCache& cache, int64_t tokens,
                  int64_t diverge_at = -1, float late_sign = 1.0f) {
    const PinnedLayer pinned = cache.Pin(0);
    ASSERT_EQ(pinned.tokens, tokens);
    const SessionShape& s = cache.shape();
    for (int64_t t = 0; t < tokens; ++t) {
      const float sign = diverge_at >= 0 && t >= diverge_at ? late_sign : 1.0f;
      for (int64_t h = 0; h < s.num_kv_heads; ++h) {
        for (int64_t e = 0; e < s.head_dim; ++e) {
          ASSERT_EQ(ReadPinned(pinned, s, kBlock, false, t, h, e),
                    RowValue(t, h, e, sign))
              << "t " << t;
        }
      }
    }
  }

  BlockPool pool_{1 << 20};
  BlockIndex index_;
};

TEST_F(SharedBlocksTest, SessionsWithTheSamePrefixHoldOneCopyOfItsFullBlocks) {
  SessionCache a(Shape(), kBlock), b(Shape(), kBlock);
  const int64_t block = BlockBytes(Shape(), kBlock);
  Append(a, 0, 10);  // blocks 0, 1 full; 2 partial
  Append(b, 0, 6);   // block 0 full (shared), 1 partial
  Append(b, 6, 4);   // block 1 full now (shared), 2 partial
  EXPECT_EQ(index_.shared(), 2);
  EXPECT_EQ(pool_.used_bytes(), 4 * block);  // 2 shared + 2 partial
  EXPECT_EQ(a.Pin(0).blocks[0], b.Pin(0).blocks[0]);
  EXPECT_EQ(a.Pin(0).blocks[1], b.Pin(0).blocks[1]);
  EXPECT_NE(a.Pin(0).blocks[2], b.Pin(0).blocks[2]);
  ExpectRows(a, 10);
  ExpectRows(b, 10);
}

TEST_F(SharedBlocksTest, ATruncatedSharedBlockIsCopiedBeforeItIsWritten) {
  SessionCache a(Shape(), kBlock), b(Shape(), kBlock);
  Append(a, 0, 8);
  Append(b, 0, 8);
  ASSERT_EQ(index_.shared(), 2);
  // b drops the last two tokens of block 1 and writes others there; a keeps
  // what it had.
  b.Truncate(6);
  Append(b, 6, 2, -1.0f);
  ExpectRows(a, 8);
  ExpectRows(b, 8, /*diverge_at=*/6, -1.0f);
  // Even when b holds its block alone (a gone), the frozen block is copied.
  SessionCache c(Shape(), kBlock);
  Append(c, 0, 8);
  a = SessionCache(Shape(), kBlock);
  c.Truncate(5);
  Append(c, 5, 3, -1.0f);
  ExpectRows(c, 8, 5, -1.0f);
  ExpectRows(b, 8, 6, -1.0f);
}

TEST_F(SharedBlocksTest, WithoutAnIndexNothingIsShared) {
  SessionCache a(Shape(), kBlock), b(Shape(), kBlock);
  const auto append = [&](SessionCache& cache) {
    auto k = MakeRows(0, 8, 2, 8);
    auto v = MakeRows(0, 8, 2, 4, -1.0f);
    ASSERT_TRUE(cache
                    .Append(0, 0, k.view, v.view,
                            [&](int64_t b) { return pool_.Allocate(b); })
                    .ok());
  };
  append(a);
  append(b);
  EXPECT_EQ(pool_.used_bytes(), 4 * BlockBytes(Shape(), kBlock));
  EXPECT_EQ(index_.shared(), 0);
}

}  // namespace
}  // namespace attnserve::kvcache
