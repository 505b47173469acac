// Sink + window sessions (StreamingLLM): memory flat over 100 000 tokens,
// every key a query can reach held with its own values, truncate within the
// window, fork, and snapshots into another block size.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvcache/session_snapshot.h"
#include "kvcache/session_store.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::Rows;
using ::attnserve::kvcache::testing::RowValue;
using ::testing::HasSubstr;

constexpr int kHeads = 2;
constexpr int kDim = 8;
constexpr int64_t kWindow = 64;
constexpr int64_t kSinks = 4;

SessionShape WindowShape(int64_t window = kWindow, int64_t sinks = kSinks) {
  SessionShape s;
  s.num_layers = 2;
  s.num_kv_heads = kHeads;
  s.head_dim = kDim;
  s.value_dim = kDim;
  s.dtype = DType::kFloat32;
  s.max_tokens = int64_t{1} << 32;
  s.window_tokens = window;
  s.sink_tokens = sinks;
  return s;
}

std::unique_ptr<SessionStore> MakeStore(int block_tokens) {
  StoreOptions o;
  o.budget_bytes = int64_t{1} << 26;
  o.block_tokens = block_tokens;
  o.share_blocks = false;
  o.sweep_interval = absl::ZeroDuration();
  return *SessionStore::Create(o);
}

// Appends tokens [t0, t0 + n) to `layer` through an attention call's two
// phases and returns the pinned layer.
PinnedLayer AppendAndPin(SessionStore& store, const std::string& id, int layer,
                         int64_t t0, int64_t n) {
  Rows k = MakeRows(t0, n, kHeads, kDim);
  Rows v = MakeRows(t0, n, kHeads, kDim, -1.0f);
  AttendPart part;
  part.session_id = id;
  part.position = t0;
  part.keys = k.view;
  part.values = v.view;
  absl::StatusOr<std::vector<PinnedPart>> pinned =
      store.AppendAndPin(layer, {part});
  EXPECT_TRUE(pinned.ok()) << pinned.status();
  if (!pinned.ok()) return {};
  return (*pinned)[0].layer;
}

// Every key the queries at [t0, t1) reach (the sinks and each one's window)
// reads back as the token's own key and value.
void ExpectReachableHeld(const PinnedLayer& layer, const SessionShape& shape,
                         int block_tokens, int64_t t0, int64_t t1) {
  std::vector<int64_t> reach;
  for (int64_t t = 0; t < std::min(kSinks, t1); ++t) reach.push_back(t);
  for (int64_t t = std::max(kSinks, t0 - shape.window_tokens + 1); t < t1;
       ++t) {
    reach.push_back(t);
  }
  for (int64_t t : reach) {
    for (int64_t h = 0; h < kHeads; ++h) {
      ASSERT_EQ(ReadPinned(layer, shape, block_tokens, false, t, h, 0),
                RowValue(t, h, 0, 1.0f))
          << "key of token " << t << " head " << h;
      ASSERT_EQ(ReadPinned(layer, shape, block_tokens, true, t, h, 3),
                RowValue(t, h, 3, -1.0f))
          << "value of token " << t << " head " << h;
    }
  }
}

TEST(SinkWindowTest, MemoryStaysFlatOver100000Tokens) {
  constexpr int kBlock = 16;
  auto store = MakeStore(kBlock);
  const SessionShape shape = WindowShape();
  ASSERT_TRUE(store->CreateSession("stream", shape, {}).ok());
  const int64_t block_bytes = BlockBytes(shape, kBlock);
  // Per layer: the sinks' block, and the window's W - 1 tokens before the
  // last append and its own (at most 40) over at most ceil((W - 1 + 40) / T)
  // + 1 blocks.
  const int64_t held_blocks = 1 + (kWindow - 1 + 40 + kBlock - 1) / kBlock + 1;
  int64_t most = 0;
  int64_t t = 0;
  for (int64_t step = 0; t < 100000; ++step) {
    // Decode steps mostly, with chunks of up to 40 tokens now and then.
    const int64_t n = step % 50 == 0 ? 1 + step % 40 : 1;
    const PinnedLayer pinned = AppendAndPin(*store, "stream", 0, t, n);
    ASSERT_EQ(pinned.tokens, t + n);
    if (step % 97 == 0 || n > 1) {
      ExpectReachableHeld(pinned, shape, kBlock, t, t + n);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Layer 1 through the append-only call.
    Rows k = MakeRows(t, n, kHeads, kDim);
    Rows v = MakeRows(t, n, kHeads, kDim, -1.0f);
    ASSERT_TRUE(store->Append("stream", 1, t, k.view, v.view).ok());
    t += n;
    const int64_t bytes = store->Get("stream")->bytes;
    most = std::max(most, bytes);
    ASSERT_LE(bytes, 2 * held_blocks * block_bytes) << "after token " << t;
  }
  EXPECT_EQ(store->Get("stream")->layer_tokens, (std::vector<int64_t>{t, t}));
  EXPECT_EQ(store->Stats().used_bytes, store->Get("stream")->bytes);
  EXPECT_GE(most, 2 * (held_blocks - 2) * block_bytes);
  ASSERT_TRUE(store->Close("stream").ok());
  EXPECT_EQ(store->Stats().used_bytes, 0);
}

TEST(SinkWindowTest, ShapesAreChecked) {
  SessionShape s = WindowShape(0, 4);
  s.max_tokens = 100;
  EXPECT_THAT(ValidateShape(s).message(),
              HasSubstr("shape.sink_tokens: 4 needs shape.window_tokens"));
  s = WindowShape(0, 0);
  EXPECT_THAT(ValidateShape(s).message(), HasSubstr("shape.max_tokens"));
  s = WindowShape();
  EXPECT_TRUE(ValidateShape(s).ok());
  s.window_tokens = -1;
  EXPECT_THAT(ValidateShape(s).message(), HasSubstr("shape.window_tokens"));
  s = WindowShape();
  s.sink_tokens = -2;
  EXPECT_THAT(ValidateShape(s).message(), HasSubstr("shape.sink_tokens"));
  s = WindowShape();
  s.max_tokens = kMaxStreamTokens + 1;
  EXPECT_THAT(ValidateShape(s).message(), HasSubstr("shape.max_tokens"));
  // The window is part of the shape: a retry with another one is refused.
  auto store = MakeStore(16);
  ASSERT_TRUE(store->CreateSession("a", WindowShape(), {}).ok());
  absl::StatusOr<SessionInfo> other =
      store->CreateSession("a", WindowShape(32), {});
  EXPECT_THAT(other.status().message(), HasSubstr("window_tokens 64"));
}

TEST(SinkWindowTest, TruncateGoesBackWithinTheWindowOnly) {
  constexpr int kBlock = 16;
  auto store = MakeStore(kBlock);
  const SessionShape shape = WindowShape();
  ASSERT_TRUE(store->CreateSession("s", shape, {}).ok());
  for (int64_t t = 0; t < 300; t += 10) {
    AppendAndPin(*store, "s", 0, t, 10);
    AppendAndPin(*store, "s", 1, t, 10);
  }
  // The last append (290..299) dropped what token 290's window does not
  // reach: held from 290 - 63 = 227, so a query at 289 would miss 226.
  absl::StatusOr<SessionInfo> far = store->Truncate("s", 289);
  EXPECT_THAT(far.status().message(),
              HasSubstr("tokens: 289 would reach back to token 226, and layer "
                        "0 has dropped tokens [4, 227)"));
  EXPECT_THAT(far.status().message(), HasSubstr("it can go back to 290 at "
                                                "most, or to 4 and below"));
  // Rejected speculative tokens: the last append's.
  ASSERT_TRUE(store->Truncate("s", 295).ok());
  ASSERT_TRUE(store->Truncate("s", 290).ok());
  const PinnedLayer after = AppendAndPin(*store, "s", 0, 290, 5);
  ExpectReachableHeld(after, shape, kBlock, 290, 295);
  // Back within the sinks: the session starts over after them.
  ASSERT_TRUE(store->Truncate("s", 3).ok());
  EXPECT_EQ(store->Get("s")->layer_tokens, (std::vector<int64_t>{3, 3}));
  const PinnedLayer again = AppendAndPin(*store, "s", 0, 3, 100);
  ExpectReachableHeld(again, shape, kBlock, 3, 103);
}

TEST(SinkWindowTest, ForkAndSnapshotIntoAnotherBlockSize) {
  const SessionShape shape = WindowShape(50, 5);
  auto from = MakeStore(16);
  ASSERT_TRUE(from->CreateSession("s", shape, absl::Seconds(9)).ok());
  for (int64_t t = 0; t < 1000; t += 7) {
    AppendAndPin(*from, "s", 0, t, 7);
  }
  AppendAndPin(*from, "s", 1, 0, 3);  // below its sinks still
  ASSERT_TRUE(from->Fork("s", "child", {}).ok());
  const PinnedLayer child = AppendAndPin(*from, "child", 0, 1001, 2);
  ExpectReachableHeld(child, shape, 16, 1001, 1003);

  absl::StatusOr<std::vector<ExportedSession>> e = from->Export({"s"}, false);
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string bytes = SnapshotBytes(std::move((*e)[0]));
  // Version 2, and the rows held only: sinks, the window - 1 tokens before
  // the last append of layer 0 (7 tokens, 994..1000) and its own, the 3
  // tokens of layer 1.
  EXPECT_EQ(bytes[8], 2);
  const int64_t rows = 5 + 49 + 7 + 3;
  EXPECT_LT(static_cast<int64_t>(bytes.size()),
            (rows + 1) * BytesPerToken(shape) + 200);
  for (int block : {5, 64}) {
    SCOPED_TRACE(block);
    auto to = MakeStore(block);
    {
      // Freed blocks of NaN, which the import's blocks may reuse.
      SessionShape plain = shape;
      plain.window_tokens = plain.sink_tokens = 0;
      plain.max_tokens = 1000;
      ASSERT_TRUE(to->CreateSession("junk", plain, {}).ok());
      Rows nan = MakeRows(0, 500, kHeads, kDim);
      std::fill(nan.data.begin(), nan.data.end(), std::nanf(""));
      ASSERT_TRUE(to->Append("junk", 0, 0, nan.view, nan.view).ok());
      ASSERT_TRUE(to->Close("junk").ok());
    }
    SnapshotReader reader = to->NewReader();
    ASSERT_TRUE(reader.Feed(bytes).ok());
    ASSERT_TRUE(reader.Finish().ok()) << reader.Finish();
    std::optional<SnapshotReader::Session> s = reader.TakeCompleted();
    ASSERT_TRUE(s.has_value());
    ASSERT_TRUE(to->Import(*std::move(s)).ok());
    absl::StatusOr<SessionInfo> info = to->Get("s");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->shape, shape);
    EXPECT_EQ(info->layer_tokens, (std::vector<int64_t>{1001, 3}));
    // The rows of held blocks that no snapshot row filled (past the sinks,
    // before the first held token) are zeros, which the kernels may read as
    // masked keys.
    const PinnedLayer imported = AppendAndPin(*to, "s", 0, 1001, 1);
    // Held from 994 - 49 = 945 (the window of the last append's first token).
    std::vector<int64_t> unfilled;
    for (int64_t t = 5; t < block; ++t) unfilled.push_back(t);
    for (int64_t t = 945 / block * block; t < 945; ++t) unfilled.push_back(t);
    if (block == 64) {
      EXPECT_EQ(unfilled.size(), 59u + 49u);
    }
    for (int64_t t : unfilled) {
      for (int64_t h = 0; h < kHeads; ++h) {
        EXPECT_EQ(ReadPinned(imported, shape, block, false, t, h, 0), 0.0f)
            << "token " << t;
        EXPECT_EQ(ReadPinned(imported, shape, block, true, t, h, 0), 0.0f)
            << "token " << t;
      }
    }
    ASSERT_TRUE(to->Truncate("s", 1001).ok());
    const PinnedLayer next = AppendAndPin(*to, "s", 0, 1001, 30);
    ExpectReachableHeld(next, shape, block, 1001, 1031);
    const PinnedLayer low = AppendAndPin(*to, "s", 1, 3, 60);
    ExpectReachableHeld(low, shape, block, 3, 63);
    // Back over the last append, and no further.
    EXPECT_FALSE(to->Truncate("s", 1001 - 1).ok());
    EXPECT_TRUE(to->Truncate("s", 1001).ok());
  }
}

}  // namespace
}  // namespace attnserve::kvcache
