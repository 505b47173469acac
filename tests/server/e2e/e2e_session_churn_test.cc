// Sessions under churn, end to end: many clients creating, stepping and
// closing sessions while others are left to expire or to be evicted and one
// long-lived session keeps decoding. Every call ends with a code a client can
// act on, and once all have ended the KV cache is back where it started.

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/session_mirror.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AwaitMetricAtMost;
using ::attnserve::testing::MetricSample;
using ::attnserve::testing::MirrorShape;
using ::attnserve::testing::RandomValues;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::WireRows;
using ::attnserve::testing::WireShape;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSessions = 2000;  // the sanitizers' calls cost ~10x
#else
constexpr int kSessions = 10000;
#endif
constexpr int kClients = 4;

// What the calls of one kind ended with, by code.
class Codes {
 public:
  void Add(const std::string& what, const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counts_[absl::StrCat(what, " ", status.error_code())];
    // Anything but OK must say why, for the client to act on it.
    if (!status.ok() && status.error_message().empty()) {
      ++counts_[absl::StrCat(what, " without a message")];
    }
  }
  std::map<std::string, int> counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> counts_;
};

void Deadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
}

// One step of `id` at `layer`: appends `append` tokens at `position` and
// attends with one query row.
grpc::Status Step(v1::SessionService::Stub& stub, const std::string& id,
                  const MirrorShape& s, int layer, int64_t position,
                  int64_t append, uint64_t seed) {
  v1::AttendSessionsRequest request;
  request.set_layer(layer);
  v1::SessionQuery* q = request.add_sessions();
  q->set_session_id(id);
  *q->mutable_query() =
      WireRows(DType::kFloat32, 1, 2 * s.kv_heads, s.head_dim,
               RandomValues(seed, 2 * s.kv_heads * s.head_dim));
  *q->mutable_key() =
      WireRows(DType::kFloat32, append, s.kv_heads, s.head_dim,
               RandomValues(seed + 1, append * s.kv_heads * s.head_dim));
  *q->mutable_value() =
      WireRows(DType::kFloat32, append, s.kv_heads, s.value_dim,
               RandomValues(seed + 2, append * s.kv_heads * s.value_dim));
  q->set_position(position);
  v1::AttendSessionsResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  return stub.AttendSessions(&context, request, &response);
}

grpc::Status Create(v1::SessionService::Stub& stub, const std::string& id,
                    const MirrorShape& s) {
  v1::CreateSessionRequest request;
  request.set_session_id(id);
  *request.mutable_shape() = WireShape(s);
  v1::SessionInfo info;
  grpc::ClientContext context;
  Deadline(&context);
  return stub.CreateSession(&context, request, &info);
}

grpc::Status Close(v1::SessionService::Stub& stub, const std::string& id) {
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  v1::SessionInfo info;
  grpc::ClientContext context;
  Deadline(&context);
  return stub.CloseSession(&context, request, &info);
}

TEST(E2eSessionChurnTest, ManySessionsUnderLoadLeaveTheCacheAsItStarted) {
  // A cache of about 90 sessions of 40 tokens (2 layers, f32, 16-token
  // blocks of 2 KiB a layer): the churn fills it, so idle sessions are
  // evicted while others step; a short TTL expires the ones left behind.
  auto server = ServerProcess::Start(
      {"--workers=2", "--threads_per_worker=1", "--kv_cache_bytes=1MiB",
       "--kv_block_tokens=16", "--kv_eviction=lru", "--kv_session_ttl=500ms"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string used = R"(attnserve_kv_bytes{state="used"})";
  ASSERT_EQ(MetricSample(**server, used), 0);

  MirrorShape shape;
  shape.layers = 2;
  shape.kv_heads = 1;
  shape.head_dim = 16;
  shape.value_dim = 16;
  Codes churn, steady;
  std::atomic<bool> stop{false};
  std::atomic<int> created{0};

  // One long-lived session decoding a token at a time throughout; evicted or
  // expired between its steps, it is created again (a client re-prefilling).
  std::thread decoder([&] {
    auto stub = v1::SessionService::NewStub((*server)->Channel());
    int64_t tokens = 0;
    bool live = false;
    for (uint64_t i = 0; !stop.load(); ++i) {
      if (live && tokens == 1000) {  // a long sequence ends; a new one starts
        steady.Add("close", Close(*stub, "steady"));
        live = false;
      }
      if (!live) {
        const grpc::Status st = Create(*stub, "steady", shape);
        steady.Add("create", st);
        live = st.ok();
        tokens = 0;
        if (st.ok()) ++created;
        continue;
      }
      grpc::Status st;
      for (int layer = 0; layer < shape.layers && st.ok(); ++layer) {
        st = Step(*stub, "steady", shape, layer, tokens, 1, i * 7 + layer);
      }
      steady.Add("step", st);
      if (st.ok()) {
        ++tokens;
      } else {
        live = false;  // NOT_FOUND: evicted or expired; start again
      }
    }
    steady.Add("close", Close(*stub, "steady"));
  });

  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto stub = v1::SessionService::NewStub((*server)->Channel());
      for (int n = c; n < kSessions; n += kClients) {
        const std::string id = absl::StrCat("churn-", n);
        const grpc::Status made = Create(*stub, id, shape);
        churn.Add("create", made);
        if (!made.ok()) continue;
        ++created;
        const int64_t tokens = 1 + n % 40;
        for (int layer = 0; layer < shape.layers; ++layer) {
          churn.Add("step", Step(*stub, id, shape, layer, 0, tokens,
                                 static_cast<uint64_t>(n) * 3 + layer));
        }
        // Seven in ten are closed; the rest are left to expire or be evicted.
        if (n % 10 < 7) churn.Add("close", Close(*stub, id));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  stop.store(true);
  decoder.join();

  // Every session ends: closed, expired or evicted. Then nothing is held.
  EXPECT_EQ(AwaitMetricAtMost(**server, "attnserve_kv_sessions", 0,
                              absl::Seconds(30)),
            0);
  EXPECT_EQ(AwaitMetricAtMost(**server, used, 0), 0);
  const double closed = MetricSample(
      **server, R"(attnserve_kv_sessions_ended_total{reason="closed"})");
  const double expired = MetricSample(
      **server, R"(attnserve_kv_sessions_ended_total{reason="expired"})");
  const double evicted = MetricSample(
      **server, R"(attnserve_kv_sessions_ended_total{reason="evicted"})");
  EXPECT_EQ(closed + expired + evicted, created.load());
  // Both ways of ending without a close happened (the test's premise).
  EXPECT_GT(expired, 0);
  EXPECT_GT(evicted, 0);

  // Codes a client can act on, each with a message: OK; NOT_FOUND for a
  // session that was evicted or expired; RESOURCE_EXHAUSTED when the cache
  // could not make room. The churn's own creates, and most of its steps,
  // succeed.
  const std::map<std::string, int> codes = churn.counts();
  for (const auto& [what, count] : codes) {
    SCOPED_TRACE(what);
    EXPECT_THAT(what, ::testing::AnyOf(::testing::EndsWith(" 0"),
                                       ::testing::EndsWith(" 5"),
                                       ::testing::EndsWith(" 8")));
  }
  for (const auto& [what, count] : steady.counts()) {
    SCOPED_TRACE(what);
    EXPECT_THAT(what, ::testing::AnyOf(::testing::EndsWith(" 0"),
                                       ::testing::EndsWith(" 5"),
                                       ::testing::EndsWith(" 8")));
  }
  const auto count = [&](const std::string& key) {
    auto it = codes.find(key);
    return it == codes.end() ? 0 : it->second;
  };
  EXPECT_GE(count("create 0"), kSessions * 9 / 10);
  EXPECT_GE(count("step 0"), kSessions);
  std::string summary;
  for (const auto& [what, n] : codes)
    absl::StrAppend(&summary, what, ": ", n, "; ");
  for (const auto& [what, n] : steady.counts()) {
    absl::StrAppend(&summary, "steady ", what, ": ", n, "; ");
  }
  std::printf(
      "churn: %d sessions created; ended: %.0f closed, %.0f expired, %.0f "
      "evicted; %s\n",
      created.load(), closed, expired, evicted, summary.c_str());
}

}  // namespace
}  // namespace attnserve
