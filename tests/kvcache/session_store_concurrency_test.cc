// Many clients on many sessions at once, with a sweeper and eviction running:
// what `make test` also runs under ThreadSanitizer. Each client owns some
// sessions (so it knows their lengths) and also reads, forks and closes
// sessions of others; at the end every block is accounted for.

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kvcache/session_store.h"
#include "tests/kvcache/kv_test_util.h"

namespace attnserve::kvcache {
namespace {

using ::attnserve::kvcache::testing::MakeRows;
using ::attnserve::kvcache::testing::ReadPinned;
using ::attnserve::kvcache::testing::Rows;
using ::attnserve::kvcache::testing::RowValue;

SessionShape Shape() {
  SessionShape s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 4;
  s.value_dim = 4;
  // f32: element 0 of every row names its token exactly.
  s.dtype = DType::kFloat32;
  s.max_tokens = 4096;
  return s;
}

// Ends a client's failure with where it happened, without gtest (whose
// assertions are not meant for many threads at once).
struct Failures {
  std::atomic<int> count{0};
  std::string first;
  std::atomic<bool> taken{false};
  void Add(std::string what) {
    if (!taken.exchange(true)) first = std::move(what);
    ++count;
  }
};

void Client(SessionStore& store, int client, int rounds, Failures& failures) {
  std::mt19937 rng(static_cast<uint32_t>(client));
  const std::string mine = absl::StrCat("c", client);
  std::vector<int64_t> tokens(2, 0);
  bool live = false;
  for (int round = 0; round < rounds; ++round) {
    if (!live) {
      if (!store.CreateSession(mine, Shape(), absl::Seconds(60)).ok()) {
        failures.Add("create " + mine);
        return;
      }
      tokens.assign(2, 0);
      live = true;
    }
    const int op = static_cast<int>(rng() % 10);
    const int layer = static_cast<int>(rng() % 2);
    if (op < 5) {
      const int64_t n = 1 + rng() % 20;
      Rows k = MakeRows(tokens[layer], n, 2, 4);
      Rows v = MakeRows(tokens[layer], n, 2, 4, -1.0f);
      absl::StatusOr<SessionInfo> info =
          store.Append(mine, layer, tokens[layer], k.view, v.view);
      if (info.ok()) {
        tokens[layer] += n;
      } else if (info.status().code() == absl::StatusCode::kNotFound) {
        live = false;  // evicted under memory pressure: start again
      } else if (info.status().code() != absl::StatusCode::kResourceExhausted) {
        failures.Add(
            absl::StrCat("append ", mine, ": ", info.status().message()));
      }
    } else if (op < 7) {
      std::vector<AttendPart> parts(1);
      parts[0].session_id = mine;
      absl::StatusOr<std::vector<PinnedPart>> pinned =
          store.AppendAndPin(layer, parts);
      if (!pinned.ok()) {
        if (pinned.status().code() == absl::StatusCode::kNotFound) live = false;
        continue;
      }
      const PinnedLayer& l = (*pinned)[0].layer;
      if (l.tokens != tokens[layer]) {
        failures.Add(absl::StrCat(mine, " pinned ", l.tokens, " tokens, owns ",
                                  tokens[layer]));
        continue;
      }
      // Read the whole layer while others write theirs.
      for (int64_t t = 0; t < l.tokens; t += 7) {
        const float got = ReadPinned(l, Shape(), 16, false, t, 1, 0);
        if (got != RowValue(t, 1, 0, 1.0f)) {
          failures.Add(absl::StrCat(mine, " token ", t, " reads ", got));
          break;
        }
      }
    } else if (op == 7) {
      const std::string other = absl::StrCat("c", rng() % 8);
      absl::StatusOr<SessionInfo> child =
          store.Fork(other, absl::StrCat(mine, "-fork-", round), {});
      if (child.ok()) {
        std::vector<AttendPart> parts(1);
        parts[0].session_id = child->id;
        (void)store.AppendAndPin(0, parts);
        (void)store.Close(child->id);
      }
    } else if (op == 8) {
      const int64_t keep = tokens[layer] / 2;
      if (store.Truncate(mine, keep).ok()) {
        tokens[0] = std::min(tokens[0], keep);
        tokens[1] = std::min(tokens[1], keep);
      } else {
        live = false;
      }
    } else {
      if (rng() % 4 == 0) {
        (void)store.Close(mine);
        live = false;
      } else {
        (void)store.Get(absl::StrCat("c", rng() % 8));
      }
    }
  }
  (void)store.Close(mine);
}

TEST(SessionStoreConcurrencyTest, ManyClientsLeaveEveryBlockAccountedFor) {
  StoreOptions o;
  o.block_tokens = 16;
  // Small enough that eviction runs: about 40 blocks of 16 tokens.
  o.budget_bytes = 40 * 16 * 2 * 8 * 4;
  o.evict_lru = true;
  o.sweep_interval = absl::Milliseconds(5);
  o.default_ttl = absl::Seconds(60);
  auto store = *SessionStore::Create(o);
  Failures failures;
  std::vector<std::thread> threads;
  for (int c = 0; c < 8; ++c) {
    threads.emplace_back(Client, std::ref(*store), c, 400, std::ref(failures));
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.count.load(), 0) << failures.first;
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.sessions, 0);
  EXPECT_EQ(stats.used_bytes, 0);
  EXPECT_GT(stats.tokens_appended, 0);
}

TEST(SessionStoreConcurrencyTest, CallsOnOneSessionAreSerialized) {
  StoreOptions o;
  o.block_tokens = 8;
  o.sweep_interval = absl::ZeroDuration();
  auto store = *SessionStore::Create(o);
  ASSERT_TRUE(store->CreateSession("shared", Shape(), {}).ok());
  // Appends without positions from several threads: each lands whole and the
  // total is the sum, whatever the interleaving.
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int c = 0; c < 4; ++c) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        Rows k = MakeRows(0, 3, 2, 4);
        Rows v = MakeRows(0, 3, 2, 4);
        if (!store->Append("shared", 0, std::nullopt, k.view, v.view).ok()) {
          ++failed;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(store->Get("shared")->layer_tokens[0], 4 * 100 * 3);
}

}  // namespace
}  // namespace attnserve::kvcache
