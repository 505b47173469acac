// The session table: ids and idempotent creation, every NOT_FOUND reason with
// its message, the budget's refusal and LRU eviction, TTL expiry, fork
// accounting, and AppendAndPin's checks-before-appends.

#include "kvcache/session_store.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::Rows;
using ::attnserve::kvcache::testing::RowValue;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

SessionShape Shape(int layers = 2) {
  SessionShape s;
  s.num_layers = layers;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.value_dim = 8;
  s.dtype = DType::kFloat32;
  s.max_tokens = 1000;
  return s;
}

constexpr int kBlock = 16;
// One block of Shape(): 16 tokens × 2 heads × 16 elements × 4 bytes.
constexpr int64_t kBlockBytes = 16 * 2 * 16 * 4;

// AppendTokens writes the same rows into every session and layer, which
// would share their full blocks: the store tests count blocks as if unshared
// (`share` for the test of sharing).
std::unique_ptr<SessionStore> MakeStore(int64_t budget_blocks, bool lru,
                                        bool share = false) {
  StoreOptions o;
  o.budget_bytes = budget_blocks * kBlockBytes;
  o.block_tokens = kBlock;
  o.evict_lru = lru;
  o.share_blocks = share;
  o.sweep_interval = absl::ZeroDuration();
  o.default_ttl = absl::Seconds(30);
  return *SessionStore::Create(o);
}

absl::StatusOr<SessionInfo> AppendTokens(SessionStore& store,
                                         const std::string& id, int layer,
                                         int64_t t0, int64_t n) {
  Rows k = MakeRows(t0, n, 2, 8);
  Rows v = MakeRows(t0, n, 2, 8, -1.0f);
  return store.Append(id, layer, t0, k.view, v.view);
}

TEST(SessionStoreTest, CreateIsIdempotentForTheSameShape) {
  auto store = MakeStore(16, false);
  absl::StatusOr<SessionInfo> a = store->CreateSession("seq-1", Shape(), {});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->created_now);
  EXPECT_EQ(a->ttl, absl::Seconds(30));
  ASSERT_TRUE(AppendTokens(*store, "seq-1", 0, 0, 3).ok());
  absl::StatusOr<SessionInfo> again =
      store->CreateSession("seq-1", Shape(), {});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created_now);
  EXPECT_EQ(again->layer_tokens, (std::vector<int64_t>{3, 0}));
  const absl::Status other =
      store->CreateSession("seq-1", Shape(3), {}).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(other.message(),
              HasSubstr("session \"seq-1\" exists with shape layers 2, kv "
                        "heads 2, head_dim 8, value_dim 8, f32, max_tokens "
                        "1000; this request asks for layers 3"));
}

TEST(SessionStoreTest, ServerIdsAndBadRequests) {
  auto store = MakeStore(16, false);
  absl::StatusOr<SessionInfo> a = store->CreateSession("", Shape(), {});
  absl::StatusOr<SessionInfo> b = store->CreateSession("", Shape(), {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_THAT(a->id, MatchesRegex("s-[0-9a-f]{16}"));
  EXPECT_NE(a->id, b->id);
  EXPECT_THAT(store->CreateSession("has space", Shape(), {}).status().message(),
              HasSubstr("session_id: \"has space\" must be 1 to 128 "
                        "characters of A-Z a-z 0-9 . _ : -"));
  EXPECT_THAT(store->CreateSession(std::string(129, 'a'), Shape(), {})
                  .status()
                  .message(),
              HasSubstr("...\" must be 1 to 128"));
  EXPECT_THAT(
      store->CreateSession("x", Shape(), absl::Hours(25)).status().message(),
      HasSubstr("ttl: 25h is outside (0, 24h]"));
  SessionShape bad = Shape();
  bad.num_layers = 0;
  EXPECT_THAT(store->CreateSession("x", bad, {}).status().message(),
              HasSubstr("shape.num_layers: 0 is outside [1, 1024]"));
}

TEST(SessionStoreTest, NotFoundSaysWhichAndWhen) {
  auto store = MakeStore(16, false);
  const absl::Status unknown = store->Get("nope").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(),
              HasSubstr("session \"nope\" is unknown here (never created on "
                        "this server"));
  EXPECT_THAT(unknown.message(), HasSubstr("sessions do not survive one"));
  EXPECT_THAT(unknown.message(), HasSubstr("create it again and re-send"));

  ASSERT_TRUE(store->CreateSession("c", Shape(), {}).ok());
  ASSERT_TRUE(store->Close("c").ok());
  const absl::Status closed = AppendTokens(*store, "c", 0, 0, 1).status();
  EXPECT_EQ(closed.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(closed.message()),
              MatchesRegex("session \"c\" was closed at "
                           "20[0-9][0-9]-[0-9]{2}-[0-9]{2}T[0-9:.]+Z; create "
                           "it again and re-send its keys and values"));

  ASSERT_TRUE(store->CreateSession("e", Shape(), absl::Seconds(5)).ok());
  EXPECT_EQ(store->Sweep(absl::Now() + absl::Seconds(4)), 0);
  EXPECT_EQ(store->Sweep(absl::Now() + absl::Seconds(6)), 1);
  const absl::Status expired = store->Get("e").status();
  EXPECT_EQ(expired.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(expired.message(), HasSubstr("session \"e\" expired at "));
  EXPECT_THAT(expired.message(),
              HasSubstr("idle for longer than its TTL of 5s"));
  // A new session of the same id forgets the old ending.
  ASSERT_TRUE(store->CreateSession("e", Shape(), {}).ok());
  EXPECT_TRUE(store->Get("e").ok());
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.ended_closed, 1);
  EXPECT_EQ(stats.ended_expired, 1);
  EXPECT_EQ(stats.sessions, 1);
}

TEST(SessionStoreTest, AFullBudgetRefusesWithTheBudgetAndTheBytes) {
  auto store = MakeStore(2, false);
  ASSERT_TRUE(store->CreateSession("a", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "a", 0, 0, 32).ok());  // 2 blocks
  const absl::Status full = AppendTokens(*store, "a", 1, 0, 1).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      full.message(),
      HasSubstr(absl::StrCat(
          "KV cache full for session \"a\" layer 1: ", kBlockBytes,
          " bytes asked, ", 2 * kBlockBytes, " of the ", 2 * kBlockBytes,
          " bytes of the KV cache (--kv_cache_bytes) "
          "in use; close sessions or start the "
          "server with --kv_eviction=lru")));
  EXPECT_EQ(store->Get("a")->layer_tokens, (std::vector<int64_t>{32, 0}));
}

TEST(SessionStoreTest, LruEvictsTheLeastRecentlyUsedIdleSession) {
  auto store = MakeStore(3, true);
  for (const char* id : {"old", "mid", "new"}) {
    ASSERT_TRUE(store->CreateSession(id, Shape(), {}).ok());
    ASSERT_TRUE(AppendTokens(*store, id, 0, 0, 16).ok());
    absl::SleepFor(absl::Milliseconds(2));
  }
  // A use of "old" (that allocates nothing) makes "mid" the least recent.
  ASSERT_TRUE(store->Truncate("old", 16).ok());
  ASSERT_TRUE(store->CreateSession("next", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "next", 0, 0, 16).ok());
  const absl::Status evicted = store->Get("mid").status();
  EXPECT_EQ(evicted.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(evicted.message(), HasSubstr("session \"mid\" was evicted at "));
  EXPECT_THAT(evicted.message(),
              HasSubstr("to free KV-cache memory (--kv_eviction=lru)"));
  EXPECT_TRUE(store->Get("old").ok());
  EXPECT_TRUE(store->Get("new").ok());
  EXPECT_EQ(store->Stats().ended_evicted, 1);
  EXPECT_EQ(store->Stats().used_bytes, 3 * kBlockBytes);
}

TEST(SessionStoreTest, SessionsOfTheSameRowsShareTheirFullBlocks) {
  auto store = MakeStore(8, false, /*share=*/true);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(store->CreateSession(id, Shape(), {}).ok());
    ASSERT_TRUE(AppendTokens(*store, id, 0, 0, 40).ok());  // 2 full + 1
  }
  // Two full blocks held once, three partial ones: what 3 × 3 blocks
  // unshared would not fit.
  EXPECT_EQ(store->Stats().used_bytes, 5 * kBlockBytes);
  EXPECT_EQ(store->Stats().blocks_shared, 4);
  EXPECT_EQ(store->Get("c")->bytes, 3 * kBlockBytes);
  // Through AppendAndPin too, and the pinned rows are the session's.
  ASSERT_TRUE(store->CreateSession("d", Shape(), {}).ok());
  Rows k = MakeRows(0, 32, 2, 8);
  Rows v = MakeRows(0, 32, 2, 8, -1.0f);
  AttendPart part{"d", 0, k.view, v.view};
  auto pinned = store->AppendAndPin(0, {part});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(store->Stats().blocks_shared, 6);
  EXPECT_EQ(store->Stats().used_bytes, 5 * kBlockBytes);
  for (int64_t t = 0; t < 32; ++t) {
    ASSERT_EQ(ReadPinned((*pinned)[0].layer, Shape(), kBlock, false, t, 1, 3),
              RowValue(t, 1, 3, 1.0f));
  }
}

TEST(SessionStoreTest, EvictionThatFreesNothingEndsWithAClearRefusal) {
  auto store = MakeStore(1, true);
  ASSERT_TRUE(store->CreateSession("only", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "only", 0, 0, 16).ok());
  const absl::Status full = AppendTokens(*store, "only", 0, 16, 1).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("no idle session is left to evict"));
}

TEST(SessionStoreTest, AForkAddsAtMostOneBlockPerLayerUntilItDiverges) {
  auto store = MakeStore(64, false);
  ASSERT_TRUE(store->CreateSession("p", Shape(), {}).ok());
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(AppendTokens(*store, "p", layer, 0, 100).ok());  // 7 blocks
  }
  const int64_t before = store->Stats().used_bytes;
  ASSERT_EQ(before, 14 * kBlockBytes);
  absl::StatusOr<SessionInfo> child = store->Fork("p", "c", {});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(child->parent, "p");
  EXPECT_EQ(child->layer_tokens, (std::vector<int64_t>{100, 100}));
  EXPECT_EQ(child->bytes, before);
  EXPECT_EQ(store->Stats().used_bytes, before);
  // One token per layer in the child: the shared partial block is copied.
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(AppendTokens(*store, "c", layer, 100, 1).ok());
  }
  EXPECT_EQ(store->Stats().used_bytes, before + 2 * kBlockBytes);
  EXPECT_EQ(store->Fork("p", "c", {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Closing the parent frees only what the child does not share.
  ASSERT_TRUE(store->Close("p").ok());
  EXPECT_EQ(store->Stats().used_bytes, 14 * kBlockBytes);
  ASSERT_TRUE(store->Close("c").ok());
  EXPECT_EQ(store->Stats().used_bytes, 0);
}

TEST(SessionStoreTest, TruncateOnlyShortens) {
  auto store = MakeStore(16, false);
  ASSERT_TRUE(store->CreateSession("t", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "t", 0, 0, 40).ok());
  ASSERT_TRUE(AppendTokens(*store, "t", 1, 0, 20).ok());
  absl::StatusOr<SessionInfo> info = store->Truncate("t", 30);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->layer_tokens, (std::vector<int64_t>{30, 20}));
  EXPECT_EQ(info->bytes, 4 * kBlockBytes);
  EXPECT_THAT(store->Truncate("t", 31).status().message(),
              HasSubstr("tokens: 31 is outside [0, 30] (session \"t\" holds "
                        "at most 30 tokens in a layer; truncate only "
                        "shortens)"));
  EXPECT_EQ(store->Truncate("t", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SessionStoreTest, APlanChecksEveryPartAndAppendsNothing) {
  auto store = MakeStore(16, false);
  ASSERT_TRUE(store->CreateSession("a", Shape(), {}).ok());
  ASSERT_TRUE(store->CreateSession("b", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "b", 0, 0, 5).ok());
  Rows k = MakeRows(0, 1, 2, 8);
  Rows v = MakeRows(0, 1, 2, 8);
  std::vector<AttendPart> parts(2);
  parts[0] = {"a", 0, k.view, v.view};
  parts[1] = {"b", 3, k.view, v.view};  // overlaps
  const absl::Status bad = store->PlanAppend(0, parts).status();
  EXPECT_THAT(bad.message(), HasSubstr("position: 3 overlaps the 5 tokens"));
  EXPECT_EQ(FailedPart(bad), 1);
  EXPECT_EQ(store->Get("a")->layer_tokens[0], 0);  // nothing appended

  parts[1].position = 5;
  absl::StatusOr<SessionStore::AppendPlan> plan = store->PlanAppend(0, parts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->parts().size(), 2u);
  EXPECT_EQ(plan->parts()[0].tokens_after, 1);
  EXPECT_EQ(plan->parts()[1].tokens_after, 6);
  // Planned, not appended: a dropped plan leaves no trace.
  EXPECT_EQ(store->Get("b")->layer_tokens[0], 5);
  absl::StatusOr<std::vector<PinnedPart>> pinned =
      store->CommitAppend(*std::move(plan), parts);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ((*pinned)[0].layer.tokens, 1);
  EXPECT_EQ((*pinned)[1].layer.tokens, 6);

  parts[1].session_id = "a";
  const absl::Status twice = store->PlanAppend(0, parts).status();
  EXPECT_THAT(twice.message(), HasSubstr("session_id: \"a\" is also part 0's"));
  EXPECT_EQ(FailedPart(twice), 1);
  parts[1].session_id = "gone";
  const absl::Status gone = store->AppendAndPin(0, parts).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(),
              HasSubstr("session_id: session \"gone\" is unknown"));
  EXPECT_EQ(FailedPart(gone), 1);
  std::vector<AttendPart> lonely(1);
  lonely[0] = {"a", std::nullopt, k.view, std::nullopt};
  const absl::Status missing = store->AppendAndPin(0, lonely).status();
  EXPECT_THAT(missing.message(),
              HasSubstr("value: missing (key and value come together)"));
  EXPECT_EQ(FailedPart(missing), 0);
  // The layer concerns the call, not one part.
  const absl::Status layer = store->AppendAndPin(2, lonely).status();
  EXPECT_THAT(layer.message(), HasSubstr("layer: 2 is outside [0, 2)"));
  EXPECT_EQ(FailedPart(layer), std::nullopt);
}

TEST(SessionStoreTest, ACommitAfterAnotherCallsAppendNamesThePart) {
  auto store = MakeStore(16, false);
  ASSERT_TRUE(store->CreateSession("a", Shape(), {}).ok());
  Rows k = MakeRows(0, 1, 2, 8);
  Rows v = MakeRows(0, 1, 2, 8);
  std::vector<AttendPart> parts = {{"a", 0, k.view, v.view}};
  absl::StatusOr<SessionStore::AppendPlan> plan = store->PlanAppend(0, parts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Between the phases another call takes position 0.
  ASSERT_TRUE(AppendTokens(*store, "a", 0, 0, 1).ok());
  const absl::Status late =
      store->CommitAppend(*std::move(plan), parts).status();
  EXPECT_THAT(late.message(), HasSubstr("position: 0 overlaps the 1 tokens"));
  EXPECT_EQ(FailedPart(late), 0);
  EXPECT_EQ(store->Get("a")->layer_tokens[0], 1);
}

TEST(SessionStoreTest, APlannedSessionIsInUseAndNeverEvicted) {
  auto store = MakeStore(1, true);  // room for one block, LRU eviction
  ASSERT_TRUE(store->CreateSession("old", Shape(), {}).ok());
  ASSERT_TRUE(AppendTokens(*store, "old", 0, 0, 1).ok());
  ASSERT_TRUE(store->CreateSession("new", Shape(), {}).ok());
  Rows k = MakeRows(0, 1, 2, 8);
  Rows v = MakeRows(0, 1, 2, 8);
  std::vector<AttendPart> parts = {
      {"old", std::nullopt, std::nullopt, std::nullopt}};
  absl::StatusOr<SessionStore::AppendPlan> plan = store->PlanAppend(0, parts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // "new" needs the only block, but "old" is held by the plan.
  EXPECT_EQ(AppendTokens(*store, "new", 0, 0, 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store->CommitAppend(*std::move(plan), parts).ok());
  EXPECT_TRUE(AppendTokens(*store, "new", 0, 0, 1).ok());  // now it may go
  EXPECT_EQ(store->Get("old").status().code(), absl::StatusCode::kNotFound);
}

TEST(SessionStoreTest, ABackgroundSweeperExpiresIdleSessions) {
  StoreOptions o;
  o.block_tokens = kBlock;
  o.sweep_interval = absl::Milliseconds(20);
  o.default_ttl = absl::Milliseconds(100);
  auto store = *SessionStore::Create(o);
  ASSERT_TRUE(store->CreateSession("idle", Shape(), {}).ok());
  // Get is not a use: polling it does not keep the session alive.
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (store->Get("idle").ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(store->Get("idle").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Stats().ended_expired, 1);
}

TEST(SessionStoreTest, CreateRejectsBadOptions) {
  StoreOptions o;
  o.block_tokens = 0;
  EXPECT_THAT(SessionStore::Create(o).status().message(),
              HasSubstr("kv_block_tokens: 0 is outside [1, 4096]"));
  o = StoreOptions();
  o.budget_bytes = -1;
  EXPECT_FALSE(SessionStore::Create(o).ok());
}

}  // namespace
}  // namespace attnserve::kvcache
