// One sequence's paged cache without the table: the block layout the decode
// kernel reads, conversion to the storage dtype, every append check with its
// message, copy-on-write after a fork or under a pin, truncate, and that a
// failed allocation changes nothing.

#include "kvcache/session_cache.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvcache/block_pool.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::Rows;
using ::attnserve::kvcache::testing::RowValue;
using ::testing::HasSubstr;

SessionShape Shape(DType dtype = DType::kFloat32, int layers = 2) {
  SessionShape s;
  s.num_layers = layers;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.value_dim = 4;
  s.dtype = dtype;
  s.max_tokens = 100;
  return s;
}

constexpr int kBlock = 4;

class SessionCacheTest : public ::testing::Test {
 protected:
  absl::StatusOr<int64_t> Append(SessionCache& cache, int layer, int64_t t0,
                                 int64_t n, std::optional<int64_t> position) {
    const SessionShape& s = cache.shape();
    Rows k = MakeRows(t0, n, s.num_kv_heads, s.head_dim, 1.0f);
    Rows v = MakeRows(t0, n, s.num_kv_heads, s.value_dim, -1.0f);
    return cache.Append(layer, position, k.view, v.view,
                        [&](int64_t bytes) { return pool_.Allocate(bytes); });
  }
  void ExpectTokens(const SessionCache& cache, int layer, int64_t tokens) {
    const PinnedLayer pinned = cache.Pin(layer);
    ASSERT_EQ(pinned.tokens, tokens);
    const SessionShape& s = cache.shape();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < s.num_kv_heads; ++h) {
        for (int64_t e = 0; e < s.head_dim; ++e)
          ASSERT_EQ(ReadPinned(pinned, s, kBlock, false, t, h, e),
                    RowValue(t, h, e, 1.0f))
              << "key t " << t << " h " << h << " e " << e;
        for (int64_t e = 0; e < s.value_dim; ++e)
          ASSERT_EQ(ReadPinned(pinned, s, kBlock, true, t, h, e),
                    RowValue(t, h, e, -1.0f))
              << "value t " << t << " h " << h << " e " << e;
      }
  }

  BlockPool pool_{1 << 20};
};

TEST_F(SessionCacheTest, AppendsInChunksIntoTheBlockLayoutOfEveryDType) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    SessionCache cache(Shape(dtype), kBlock);
    ASSERT_EQ(*Append(cache, 0, 0, 3, 0), 3);
    ASSERT_EQ(*Append(cache, 0, 3, 6, std::nullopt), 9);  // crosses 2 blocks
    ASSERT_EQ(*Append(cache, 1, 0, 1, 0), 1);
    ExpectTokens(cache, 0, 9);
    ExpectTokens(cache, 1, 1);
    EXPECT_EQ(cache.LayerTokens(), (std::vector<int64_t>{9, 1}));
    // ceil(9/4) + ceil(1/4) blocks of 4 tokens × 2 heads × (8 + 4) elements.
    const int64_t block = BlockBytes(cache.shape(), kBlock);
    EXPECT_EQ(block, 4 * 2 * 12 * static_cast<int64_t>(DTypeSize(dtype)));
    EXPECT_EQ(cache.Bytes(), 4 * block);
    EXPECT_EQ(pool_.used_bytes(), 4 * block);
  }
  EXPECT_EQ(pool_.used_bytes(), 0);
}

TEST_F(SessionCacheTest, Int8StorageQuantizesEachRowWithAScale) {
  SessionCache cache(Shape(DType::kInt8), kBlock);
  const SessionShape& s = cache.shape();
  ASSERT_EQ(*Append(cache, 0, 0, 3, 0), 3);
  ASSERT_EQ(*Append(cache, 0, 3, 6, std::nullopt), 9);
  // 4 tokens × 2 heads × (8 + 4) int8 elements, then a f32 scale per row.
  EXPECT_EQ(BlockBytes(s, kBlock), 4 * 2 * 12 + 4 * 2 * 2 * 4);
  EXPECT_EQ(cache.Bytes(), 3 * BlockBytes(s, kBlock));
  const PinnedLayer pinned = cache.Pin(0);
  for (int64_t t = 0; t < 9; ++t) {
    for (int64_t h = 0; h < s.num_kv_heads; ++h) {
      for (const bool value : {false, true}) {
        const int64_t dim = value ? s.value_dim : s.head_dim;
        const float sign = value ? -1.0f : 1.0f;
        float largest = 0.0f;
        for (int64_t e = 0; e < dim; ++e) {
          largest = std::max(largest, std::fabs(RowValue(t, h, e, sign)));
        }
        // Within half a step of the row's scale, max |x| / 127.
        const float step = largest / 127.0f;
        for (int64_t e = 0; e < dim; ++e) {
          ASSERT_NEAR(ReadPinned(pinned, s, kBlock, value, t, h, e),
                      RowValue(t, h, e, sign), 0.5001f * step)
              << (value ? "value" : "key") << " t " << t << " h " << h << " e "
              << e;
        }
      }
    }
  }
}

TEST_F(SessionCacheTest, Int8StorageRefusesNonFiniteValues) {
  SessionCache cache(Shape(DType::kInt8), kBlock);
  const SessionShape& s = cache.shape();
  Rows k = MakeRows(0, 2, s.num_kv_heads, s.head_dim);
  Rows v = MakeRows(0, 2, s.num_kv_heads, s.value_dim);
  v.data[5] = INFINITY;
  const auto allocate = [&](int64_t b) { return pool_.Allocate(b); };
  EXPECT_THAT(cache.Append(0, 0, k.view, v.view, allocate).status().message(),
              HasSubstr("value: element 5 is not finite (int8 storage holds "
                        "finite values only)"));
  k.data[17] = NAN;
  EXPECT_THAT(cache.Append(0, 0, k.view, v.view, allocate).status().message(),
              HasSubstr("key: element 17 is not finite"));
  EXPECT_EQ(cache.Tokens(0), 0);
  EXPECT_EQ(pool_.used_bytes(), 0);
}

TEST_F(SessionCacheTest, ConvertsInputsOfAnotherDType) {
  SessionCache cache(Shape(DType::kFloat32), kBlock);
  const SessionShape& s = cache.shape();
  Rows k = MakeRows(0, 2, s.num_kv_heads, s.head_dim);
  Rows v = MakeRows(0, 2, s.num_kv_heads, s.value_dim, -1.0f);
  std::vector<uint16_t> k16(k.data.size()), v16(v.data.size());
  ConvertFromFloat(k.data.data(), k16.data(), DType::kBFloat16, k16.size());
  ConvertFromFloat(v.data.data(), v16.data(), DType::kFloat16, v16.size());
  const TensorView kb = MakeTensorView(k16.data(), DType::kBFloat16,
                                       {2, s.num_kv_heads, s.head_dim});
  const TensorView vh = MakeTensorView(v16.data(), DType::kFloat16,
                                       {2, s.num_kv_heads, s.value_dim});
  ASSERT_TRUE(
      cache.Append(0, 0, kb, vh, [&](int64_t b) { return pool_.Allocate(b); })
          .ok());
  ExpectTokens(cache, 0, 2);
}

TEST_F(SessionCacheTest, EveryMalformedAppendNamesTheFieldAndTheValues) {
  SessionCache cache(Shape(), kBlock);
  ASSERT_TRUE(Append(cache, 0, 0, 8, 0).ok());
  const SessionShape& s = cache.shape();
  const auto status = [&](int layer, std::optional<int64_t> position,
                          const TensorView& k, const TensorView& v) {
    return cache.CheckAppend(layer, position, k, v);
  };
  Rows k = MakeRows(8, 2, s.num_kv_heads, s.head_dim);
  Rows v = MakeRows(8, 2, s.num_kv_heads, s.value_dim);
  EXPECT_THAT(status(0, 10, k.view, v.view).message(),
              HasSubstr("position: 10 leaves a gap after the 8 "
                        "tokens layer 0 holds (positions must be contiguous: "
                        "expected 8)"));
  EXPECT_THAT(status(0, 5, k.view, v.view).message(),
              HasSubstr("position: 5 overlaps the 8 tokens"));
  EXPECT_EQ(status(0, 5, k.view, v.view).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status(2, 8, k.view, v.view).message(),
              HasSubstr("layer: 2 is outside [0, 2)"));
  Rows heads = MakeRows(8, 2, 3, s.head_dim);
  EXPECT_THAT(status(0, 8, heads.view, v.view).message(),
              HasSubstr("key.shape: expected [Lnew, num_kv_heads "
                        "= 2, head_dim = 8], got [2, 3, 8]"));
  Rows dims = MakeRows(8, 2, s.num_kv_heads, 5);
  EXPECT_THAT(status(0, 8, k.view, dims.view).message(),
              HasSubstr("value.shape: expected [Lnew, "
                        "num_kv_heads = 2, value_dim = 4], got [2, 2, 5]"));
  Rows one = MakeRows(8, 1, s.num_kv_heads, s.value_dim);
  EXPECT_THAT(status(0, 8, k.view, one.view).message(),
              HasSubstr("value.shape: 1 tokens differ from the 2 "
                        "tokens of key"));
  Rows none_k = MakeRows(8, 0, s.num_kv_heads, s.head_dim);
  Rows none_v = MakeRows(8, 0, s.num_kv_heads, s.value_dim);
  EXPECT_THAT(status(0, 8, none_k.view, none_v.view).message(),
              HasSubstr("no tokens (Lnew must be >= 1)"));
  Rows many_k = MakeRows(8, 93, s.num_kv_heads, s.head_dim);
  Rows many_v = MakeRows(8, 93, s.num_kv_heads, s.value_dim);
  const absl::Status too_many = status(0, 8, many_k.view, many_v.view);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(too_many.message(),
              HasSubstr("layer 0 would hold 101 tokens, above the session's "
                        "max_tokens 100"));
  std::vector<uint8_t> flags(2 * 2 * 8);
  const TensorView bools =
      MakeTensorView(flags.data(), DType::kBool, {2, 2, 8});
  EXPECT_THAT(status(0, 8, bools, v.view).message(),
              HasSubstr("key.dtype: bool is not supported"));
  EXPECT_TRUE(status(0, 8, k.view, v.view).ok());
}

TEST_F(SessionCacheTest, AForkSharesBlocksUntilOneSideWrites) {
  SessionCache parent(Shape(), kBlock);
  ASSERT_TRUE(Append(parent, 0, 0, 6, 0).ok());  // 2 blocks, the 2nd partial
  ASSERT_TRUE(Append(parent, 1, 0, 6, 0).ok());
  const int64_t block = BlockBytes(parent.shape(), kBlock);
  ASSERT_EQ(pool_.used_bytes(), 4 * block);
  SessionCache child = parent.Fork();
  EXPECT_EQ(pool_.used_bytes(), 4 * block);  // a fork costs no K/V memory
  EXPECT_EQ(child.Bytes(), parent.Bytes());

  // The child's append copies the shared partial block of that layer only.
  ASSERT_TRUE(Append(child, 0, 6, 1, 6).ok());
  EXPECT_EQ(pool_.used_bytes(), 5 * block);
  // The parent's partial block is its own again: written in place.
  ASSERT_TRUE(Append(parent, 0, 6, 2, 6).ok());
  EXPECT_EQ(pool_.used_bytes(), 5 * block);
  ExpectTokens(parent, 0, 8);
  ExpectTokens(child, 0, 7);
  ExpectTokens(child, 1, 6);
}

TEST_F(SessionCacheTest, APinnedLayerNeverChangesUnderTruncateAndAppend) {
  SessionCache cache(Shape(), kBlock);
  ASSERT_TRUE(Append(cache, 0, 0, 6, 0).ok());
  const PinnedLayer pinned = cache.Pin(0);
  cache.Truncate(5);
  // Token 5 is written again with other values into the pinned block: the
  // cache copies it first.
  const SessionShape& s = cache.shape();
  Rows k = MakeRows(0, 1, s.num_kv_heads, s.head_dim, 3.0f);
  Rows v = MakeRows(0, 1, s.num_kv_heads, s.value_dim, 3.0f);
  ASSERT_TRUE(cache
                  .Append(0, 5, k.view, v.view,
                          [&](int64_t b) { return pool_.Allocate(b); })
                  .ok());
  for (int64_t e = 0; e < s.head_dim; ++e) {
    EXPECT_EQ(ReadPinned(pinned, s, kBlock, false, 5, 1, e),
              RowValue(5, 1, e, 1.0f));
    EXPECT_EQ(ReadPinned(cache.Pin(0), s, kBlock, false, 5, 1, e),
              RowValue(0, 1, e, 3.0f));
  }
}

TEST_F(SessionCacheTest, TruncateReleasesWholeBlocks) {
  SessionCache cache(Shape(), kBlock);
  ASSERT_TRUE(Append(cache, 0, 0, 9, 0).ok());
  ASSERT_TRUE(Append(cache, 1, 0, 3, 0).ok());
  const int64_t block = BlockBytes(cache.shape(), kBlock);
  ASSERT_EQ(pool_.used_bytes(), 4 * block);
  cache.Truncate(4);
  EXPECT_EQ(cache.LayerTokens(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(pool_.used_bytes(), 2 * block);
  cache.Truncate(0);
  EXPECT_EQ(pool_.used_bytes(), 0);
  ASSERT_TRUE(Append(cache, 0, 0, 2, 0).ok());
  ExpectTokens(cache, 0, 2);
}

TEST_F(SessionCacheTest, AFailedAllocationChangesNothing) {
  SessionCache cache(Shape(), kBlock);
  const int64_t block = BlockBytes(cache.shape(), kBlock);
  BlockPool small(2 * block);
  const SessionShape& s = cache.shape();
  Rows k = MakeRows(0, 9, s.num_kv_heads, s.head_dim);
  Rows v = MakeRows(0, 9, s.num_kv_heads, s.value_dim);
  const absl::StatusOr<int64_t> appended = cache.Append(
      0, 0, k.view, v.view, [&](int64_t b) { return small.Allocate(b); });
  EXPECT_EQ(appended.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(appended.status().message(),
              HasSubstr(absl::StrCat(block, " bytes asked, ", 2 * block,
                                     " of the ", 2 * block, " bytes")));
  EXPECT_EQ(small.used_bytes(), 0);
  EXPECT_EQ(cache.LayerTokens(), (std::vector<int64_t>{0, 0}));
}

TEST(SessionShapeTest, ValidateNamesTheField) {
  SessionShape s = Shape();
  EXPECT_TRUE(ValidateShape(s).ok());
  s.num_kv_heads = 0;
  EXPECT_THAT(ValidateShape(s).message(),
              HasSubstr("shape.num_kv_heads: 0 is outside [1, 1024]"));
  s = Shape();
  s.head_dim = 577;
  EXPECT_THAT(ValidateShape(s).message(),
              HasSubstr("shape.head_dim: 577 is outside [1, 576]"));
  s = Shape();
  s.dtype = DType::kBool;
  EXPECT_THAT(ValidateShape(s).message(),
              HasSubstr("shape.storage_dtype: bool is not supported "
                        "(expected f32, bf16, f16 or int8)"));
  s = Shape();
  s.max_tokens = 0;
  EXPECT_THAT(ValidateShape(s).message(), HasSubstr("shape.max_tokens: 0"));
  EXPECT_EQ(ShapeText(Shape(DType::kBFloat16)),
            "layers 2, kv heads 2, head_dim 8, value_dim 4, bf16, max_tokens "
            "100");
}

}  // namespace
}  // namespace attnserve::kvcache
