// Sessions moved between stores as snapshots: every storage dtype read back
// bit for bit in a store of another block size, from pieces of any size;
// moved sessions answer UNAVAILABLE where they were and announced ones where
// they go; truncated, corrupted, foreign-version and out-of-limit snapshots
// are refused with the reason.

#include "kvcache/session_snapshot.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvcache/session_store.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::Rows;
using ::testing::HasSubstr;

SessionShape Shape(DType dtype) {
  SessionShape s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.value_dim = 4;
  s.dtype = dtype;
  s.max_tokens = 100;
  return s;
}

std::unique_ptr<SessionStore> MakeStore(int block_tokens,
                                        int64_t budget = int64_t{1} << 24) {
  StoreOptions o;
  o.budget_bytes = budget;
  o.block_tokens = block_tokens;
  o.sweep_interval = absl::ZeroDuration();
  o.share_blocks = false;
  return *SessionStore::Create(o);
}

// A session `id` of `dtype` holding 37 tokens in layer 0 and 20 in layer 1.
void Fill(SessionStore& store, const std::string& id, DType dtype) {
  ASSERT_TRUE(store.CreateSession(id, Shape(dtype), absl::Seconds(42)).ok());
  const int64_t tokens[] = {37, 20};
  for (int layer = 0; layer < 2; ++layer) {
    Rows k = MakeRows(layer * 100, tokens[layer], 2, 8);
    Rows v = MakeRows(layer * 100, tokens[layer], 2, 4, -1.0f);
    ASSERT_TRUE(store.Append(id, layer, std::nullopt, k.view, v.view).ok());
  }
}

// Every element of every layer, keys then values, as the kernels read them.
std::vector<float> Contents(SessionStore& store, const std::string& id,
                            int block_tokens) {
  std::vector<float> out;
  for (int layer = 0; layer < 2; ++layer) {
    absl::StatusOr<std::vector<PinnedPart>> pinned =
        store.AppendAndPin(layer, {AttendPart{id, {}, {}, {}}});
    EXPECT_TRUE(pinned.ok()) << pinned.status();
    if (!pinned.ok()) return out;
    const PinnedPart& p = (*pinned)[0];
    for (int64_t t = 0; t < p.layer.tokens; ++t) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t e = 0; e < 8; ++e) {
          out.push_back(
              ReadPinned(p.layer, p.shape, block_tokens, false, t, h, e));
        }
        for (int64_t e = 0; e < 4; ++e) {
          out.push_back(
              ReadPinned(p.layer, p.shape, block_tokens, true, t, h, e));
        }
      }
    }
  }
  return out;
}

std::string Snapshot(SessionStore& store, const std::string& id,
                     bool remove = false) {
  absl::StatusOr<std::vector<ExportedSession>> e = store.Export({id}, remove);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok() || e->size() != 1) return "";
  return SnapshotBytes(std::move((*e)[0]));
}

// Feeds `bytes` in pieces of the given sizes (the last one repeats), then
// imports what was completed.
absl::Status FeedAndImport(SessionStore& store, const std::string& bytes,
                           std::vector<size_t> pieces) {
  SnapshotReader reader = store.NewReader();
  size_t at = 0, i = 0;
  while (at < bytes.size()) {
    const size_t n =
        std::min(pieces[std::min(i++, pieces.size() - 1)], bytes.size() - at);
    absl::Status fed = reader.Feed(absl::string_view(bytes).substr(at, n));
    if (!fed.ok()) return fed;
    at += n;
  }
  while (std::optional<SnapshotReader::Session> s = reader.TakeCompleted()) {
    absl::StatusOr<SessionInfo> imported = store.Import(*std::move(s));
    if (!imported.ok()) return imported.status();
  }
  return reader.Finish();
}

TEST(SessionSnapshotTest, EveryDtypeReadsBackBitForBitInAnotherBlockSize) {
  for (DType dtype :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(dtype));
    auto from = MakeStore(16);
    auto to = MakeStore(7);
    Fill(*from, "s", dtype);
    const std::string bytes = Snapshot(*from, "s");
    absl::StatusOr<std::vector<ExportedSession>> again =
        from->Export({"s"}, false);
    ASSERT_TRUE(again.ok());
    SnapshotWriter sized((*again)[0]);
    EXPECT_EQ(sized.total_bytes(), static_cast<int64_t>(bytes.size()));
    ASSERT_TRUE(FeedAndImport(*to, bytes, {1, 3, 5, 1000, 17}).ok());
    absl::StatusOr<SessionInfo> info = to->Get("s");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->layer_tokens, (std::vector<int64_t>{37, 20}));
    EXPECT_EQ(info->shape, Shape(dtype));
    EXPECT_EQ(info->ttl, absl::Seconds(42));
    const std::vector<float> a = Contents(*from, "s", 16);
    const std::vector<float> b = Contents(*to, "s", 7);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    EXPECT_EQ(to->Stats().imported, 1);
    // It goes on as the original would.
    Rows k = MakeRows(57, 1, 2, 8), v = MakeRows(57, 1, 2, 4);
    EXPECT_TRUE(to->Append("s", 1, 20, k.view, v.view).ok());
  }
}

TEST(SessionSnapshotTest, SnapshotsBackToBackAndEmptyLayers) {
  auto from = MakeStore(16);
  auto to = MakeStore(16);
  Fill(*from, "a", DType::kFloat32);
  ASSERT_TRUE(from->CreateSession("empty", Shape(DType::kBFloat16),
                                  absl::ZeroDuration())
                  .ok());
  const std::string bytes = Snapshot(*from, "a") + Snapshot(*from, "empty");
  ASSERT_TRUE(FeedAndImport(*to, bytes, {4096}).ok());
  EXPECT_TRUE(to->Get("a").ok());
  absl::StatusOr<SessionInfo> empty = to->Get("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->layer_tokens, (std::vector<int64_t>{0, 0}));
}

TEST(SessionSnapshotTest, AMovedSessionAnswersUnavailableWhereItWas) {
  auto store = MakeStore(16);
  Fill(*store, "m", DType::kFloat32);
  Fill(*store, "stays", DType::kFloat32);
  EXPECT_EQ(store->Export({"m", "nope"}, true).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Get("m").ok());  // nothing moved by the refusal
  ASSERT_FALSE(Snapshot(*store, "m", /*remove=*/true).empty());
  const absl::Status get = store->Get("m").status();
  EXPECT_EQ(get.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(get.message(), HasSubstr("handed to another server"));
  Rows k = MakeRows(37, 1, 2, 8), v = MakeRows(37, 1, 2, 4);
  EXPECT_EQ(store->Append("m", 0, 37, k.view, v.view).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store->Stats().ended_moved, 1);
  EXPECT_EQ(store->Stats().sessions, 1);
}

TEST(SessionSnapshotTest, APlanMadeBeforeTheMoveCommitsNothing) {
  auto store = MakeStore(16);
  Fill(*store, "m", DType::kFloat32);
  Rows k = MakeRows(37, 1, 2, 8), v = MakeRows(37, 1, 2, 4);
  std::vector<AttendPart> parts = {AttendPart{"m", 37, k.view, v.view}};
  absl::StatusOr<SessionStore::AppendPlan> plan = store->PlanAppend(0, parts);
  ASSERT_TRUE(plan.ok());
  absl::StatusOr<std::vector<ExportedSession>> moved = store->Export({}, true);
  ASSERT_TRUE(moved.ok());
  ASSERT_EQ(moved->size(), 1u);
  const absl::Status committed =
      store->CommitAppend(*std::move(plan), parts).status();
  EXPECT_EQ(committed.code(), absl::StatusCode::kUnavailable) << committed;
  EXPECT_EQ((*moved)[0].header.layer_tokens[0], 37);
  EXPECT_EQ((*moved)[0].cache->Tokens(0), 37);
}

TEST(SessionSnapshotTest, AnnouncedSessionsAnswerArrivingUntilTheyCome) {
  auto from = MakeStore(16);
  auto to = MakeStore(16);
  Fill(*from, "x", DType::kFloat32);
  to->Announce({"x", "never"}, absl::Now() + absl::Minutes(1));
  const absl::Status arriving = to->Get("x").status();
  EXPECT_EQ(arriving.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(arriving.message(), HasSubstr("arriving"));
  ASSERT_TRUE(FeedAndImport(*to, Snapshot(*from, "x"), {64}).ok());
  EXPECT_TRUE(to->Get("x").ok());
  to->EndArrivals({"x", "never"});
  EXPECT_EQ(to->Get("never").status().code(), absl::StatusCode::kNotFound);
  to->Announce({"late"}, absl::Now() - absl::Seconds(1));
  EXPECT_EQ(to->Get("late").status().code(), absl::StatusCode::kNotFound);
}

TEST(SessionSnapshotTest, BadSnapshotsAreRefusedWithTheReason) {
  auto from = MakeStore(16);
  Fill(*from, "s", DType::kInt8);
  const std::string good = Snapshot(*from, "s");
  const auto refused = [](const std::string& bytes) {
    auto to = MakeStore(16);
    absl::Status st = FeedAndImport(*to, bytes, {100});
    EXPECT_EQ(to->Stats().sessions, 0);
    return st;
  };
  {
    absl::Status st = refused(good.substr(0, good.size() - 5));
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("truncated"));
  }
  {
    std::string bad = good;
    bad[bad.size() / 2] ^= 0x10;
    absl::Status st = refused(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("checksum"));
  }
  {
    absl::Status st = refused("not a snapshot at all, just bytes");
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("ATTNSNAP"));
  }
  {
    std::string other = good;
    other[8] = 3;  // version 3
    absl::Status st = refused(other);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(st.message(), HasSubstr("version 3; this server reads "
                                        "versions 1 to 2"));
  }
  {
    // Version 2 is a sink + window session's, whose header has more fields.
    std::string other = good;
    other[8] = 2;
    absl::Status st = refused(other);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("header is corrupted"));
  }
  {
    // The layer count (after the id's length and the 1-byte id) out of
    // limits.
    std::string big = good;
    const uint32_t layers = 5000;
    std::memcpy(&big[16 + 4 + 1], &layers, 4);
    absl::Status st = refused(big);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("layers 5000"));
  }
  {
    std::string huge_header = good;
    const uint32_t bytes = 1u << 30;
    std::memcpy(&huge_header[12], &bytes, 4);
    EXPECT_EQ(refused(huge_header).code(), absl::StatusCode::kDataLoss);
  }
  {
    auto to = MakeStore(16);
    Fill(*to, "s", DType::kInt8);
    EXPECT_EQ(FeedAndImport(*to, good, {100}).code(),
              absl::StatusCode::kAlreadyExists);
  }
  {
    auto small = MakeStore(16, /*budget=*/1024);
    absl::Status st = FeedAndImport(*small, good, {100});
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
    EXPECT_EQ(small->Stats().used_bytes, 0);
  }
}

}  // namespace
}  // namespace attnserve::kvcache

namespace attnserve::kvcache {
namespace {

// Appends racing a move: every append either made it into the snapshot or was
// refused (Unavailable); none is accepted and lost.
TEST(SessionSnapshotConcurrencyTest,
     AnAppendRacingTheMoveIsInTheSnapshotOrRefused) {
  for (int round = 0; round < 20; ++round) {
    auto store = MakeStore(4, int64_t{1} << 26);
    constexpr int kSessions = 4;
    for (int s = 0; s < kSessions; ++s) {
      ASSERT_TRUE(store
                      ->CreateSession(absl::StrCat("r", s),
                                      Shape(DType::kFloat32),
                                      absl::ZeroDuration())
                      .ok());
    }
    std::vector<int> accepted(kSessions, 0);
    std::vector<std::thread> writers;
    for (int s = 0; s < kSessions; ++s) {
      writers.emplace_back([&, s] {
        for (int t = 0; t < 100; ++t) {
          Rows k = MakeRows(t, 1, 2, 8), v = MakeRows(t, 1, 2, 4);
          absl::StatusOr<SessionInfo> appended = store->Append(
              absl::StrCat("r", s), 0, std::nullopt, k.view, v.view);
          if (appended.ok()) {
            ++accepted[s];
          } else {
            EXPECT_EQ(appended.status().code(), absl::StatusCode::kUnavailable)
                << appended.status();
            return;
          }
        }
      });
    }
    absl::StatusOr<std::vector<ExportedSession>> moved =
        store->Export({}, /*remove=*/true);
    for (std::thread& w : writers) w.join();
    ASSERT_TRUE(moved.ok());
    ASSERT_EQ(moved->size(), static_cast<size_t>(kSessions));
    for (const ExportedSession& e : *moved) {
      const int s = e.header.id[1] - '0';
      EXPECT_EQ(e.header.layer_tokens[0], accepted[s]) << e.header.id;
      EXPECT_EQ(e.cache->Tokens(0), accepted[s]) << e.header.id;
    }
  }
}

}  // namespace
}  // namespace attnserve::kvcache
