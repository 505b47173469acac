// KV-cache sessions through a real attnserve process: random operation
// sequences (create, chunked and streamed appends, steps with new keys and
// mixed Lnew, fork, truncate, close) checked after every step against the
// stateless reference over a client-side copy of the cache, for every storage
// dtype (int8 too), GQA and MQA, windows and ALiBi; a batch of many sessions in
// one call; every error with its message; the budget, LRU eviction and TTL
// expiry; a fork's memory; full blocks shared by sessions of one prompt;
// metrics and server info; SIGTERM during decode steps. One file, past 500
// lines, because every test here drives the same checked session client
// (Client, below), which no other suite uses.

#include <signal.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "base/random.h"
#include "core/vec_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/session_mirror.h"

namespace attnserve {
namespace {

using ::attnserve::testing::MirrorShape;
using ::attnserve::testing::RandomValues;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::SessionMirror;
using ::attnserve::testing::WireFloats;
using ::attnserve::testing::WireRows;
using ::attnserve::testing::WireShape;
using ::testing::HasSubstr;

std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> args) {
  args.push_back("--workers=2");
  args.push_back("--threads_per_worker=1");
  auto server = ServerProcess::Start(args);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Calls of SessionService with a deadline, and the cache each session should
// hold.
class Client {
 public:
  explicit Client(const ServerProcess& server)
      : stub_(v1::SessionService::NewStub(server.Channel())) {}

  grpc::Status Create(const std::string& id, const MirrorShape& shape,
                      v1::SessionInfo* info = nullptr, int64_t ttl_ms = 0) {
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    *request.mutable_shape() = WireShape(shape);
    request.set_ttl_ms(ttl_ms);
    v1::SessionInfo response;
    grpc::ClientContext context;
    Deadline(&context);
    const grpc::Status st = stub_->CreateSession(&context, request, &response);
    // A retry of an existing session keeps what the client knows of it.
    if (st.ok() && response.created()) {
      mirrors_[response.session_id()] = SessionMirror(shape);
    }
    if (info != nullptr) *info = response;
    return st;
  }

  // Appends n random tokens to `layer` of `id` (the mirror follows on OK).
  grpc::Status Append(const std::string& id, int layer, int64_t n,
                      uint64_t seed, bool stream = false, int chunks = 1,
                      DType wire_dtype = DType::kFloat32) {
    SessionMirror& m = mirrors_.at(id);
    const MirrorShape& s = m.shape();
    std::vector<v1::AppendKvRequest> requests;
    std::vector<std::vector<float>> ks, vs;
    const int64_t per = (n + chunks - 1) / chunks;
    int64_t position = m.tokens(layer);
    for (int64_t done = 0; done < n; done += per) {
      const int64_t rows = std::min(per, n - done);
      ks.push_back(RandomValues(seed + done, rows * s.kv_heads * s.head_dim));
      vs.push_back(
          RandomValues(seed + done + 7777, rows * s.kv_heads * s.value_dim));
      v1::AppendKvRequest r;
      r.set_session_id(id);
      r.set_layer(layer);
      r.set_position(position);
      *r.mutable_key() =
          WireRows(wire_dtype, rows, s.kv_heads, s.head_dim, ks.back());
      *r.mutable_value() =
          WireRows(wire_dtype, rows, s.kv_heads, s.value_dim, vs.back());
      requests.push_back(std::move(r));
      position += rows;
    }
    grpc::Status st;
    v1::SessionInfo info;
    if (stream) {
      grpc::ClientContext context;
      Deadline(&context);
      auto writer = stub_->AppendKvStream(&context, &info);
      for (const auto& r : requests) {
        if (!writer->Write(r)) break;
      }
      writer->WritesDone();
      st = writer->Finish();
    } else {
      for (const auto& r : requests) {
        grpc::ClientContext context;
        Deadline(&context);
        st = stub_->AppendKv(&context, r, &info);
        if (!st.ok()) break;
      }
    }
    if (st.ok()) {
      for (size_t i = 0; i < ks.size(); ++i) {
        // Values pass through the wire dtype before the storage dtype.
        m.Append(layer, WireFloats(requests[i].key()),
                 WireFloats(requests[i].value()));
      }
      EXPECT_EQ(info.layer_tokens(layer), m.tokens(layer));
    }
    return st;
  }

  struct Step {
    std::string id;
    int64_t lnew = 1;
    int64_t append = 0;  // new tokens sent with the queries
  };
  struct StepOptions {
    int layer = 0;
    int64_t hq = 4;
    bool causal = true;
    std::optional<int64_t> window_left;
    bool alibi = false;
    std::optional<float> scale;
    std::optional<float> softcap;
    int64_t sinks = 0;  // sink logits sent (Hq, or another count to refuse)
    // T5's unidirectional bias: 6 buckets, distance 16 (with relative_table
    // entries: Hq · 6 to attend, another count to refuse).
    int64_t relative_table = 0;
    bool weights = false;
    DType query_dtype = DType::kFloat32;
  };

  // One AttendSessions call; checks every result against the mirror.
  grpc::Status AttendAndCheck(const std::vector<Step>& steps,
                              const StepOptions& o, uint64_t seed) {
    v1::AttendSessionsRequest request;
    request.set_request_id(absl::StrCat("step-", seed));
    request.set_layer(o.layer);
    if (!o.causal) request.set_causal(false);
    if (o.window_left)
      request.set_window_left(static_cast<int>(*o.window_left));
    std::vector<float> slopes;
    if (o.alibi) {
      for (int64_t h = 0; h < o.hq; ++h) slopes.push_back(0.05f * (h + 1));
      for (float x : slopes) request.add_alibi_slopes(x);
    }
    if (o.scale) request.set_scale(*o.scale);
    if (o.softcap) request.set_softcap(*o.softcap);
    std::vector<float> sinks;
    if (o.sinks > 0) {
      for (int64_t h = 0; h < o.sinks; ++h) sinks.push_back(1.5f - 0.75f * h);
      for (float x : sinks) request.add_sinks(x);
    }
    std::vector<float> rel_table;
    if (o.relative_table > 0) {
      v1::RelativeBias* rb = request.mutable_relative_bias();
      for (int64_t e = 0; e < o.relative_table; ++e) {
        rel_table.push_back(0.3f * static_cast<float>(e % 5) - 0.6f);
        rb->add_table(rel_table.back());
      }
      rb->set_num_buckets(6);
      rb->set_max_distance(16);
    }
    request.set_return_weights(o.weights);
    request.set_output_dtype(v1::FLOAT32);
    std::vector<std::vector<float>> queries;
    std::vector<std::pair<std::vector<float>, std::vector<float>>> appends;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& step = steps[i];
      // A session the client does not know is sent with a default shape (to
      // see the server's answer).
      const bool known = mirrors_.count(step.id) > 0;
      const MirrorShape s =
          known ? mirrors_.at(step.id).shape() : MirrorShape{};
      v1::SessionQuery* q = request.add_sessions();
      q->set_session_id(step.id);
      queries.push_back(
          RandomValues(seed * 31 + i, step.lnew * o.hq * s.head_dim));
      *q->mutable_query() =
          WireRows(o.query_dtype, step.lnew, o.hq, s.head_dim, queries.back());
      std::vector<float> k, v;
      if (step.append > 0) {
        k = RandomValues(seed * 37 + i, step.append * s.kv_heads * s.head_dim);
        v = RandomValues(seed * 41 + i, step.append * s.kv_heads * s.value_dim);
        *q->mutable_key() =
            WireRows(DType::kFloat32, step.append, s.kv_heads, s.head_dim, k);
        *q->mutable_value() =
            WireRows(DType::kFloat32, step.append, s.kv_heads, s.value_dim, v);
        if (known) q->set_position(mirrors_.at(step.id).tokens(o.layer));
      }
      appends.emplace_back(std::move(k), std::move(v));
    }
    v1::AttendSessionsResponse response;
    const grpc::Status st = Send(request, &response);
    if (!st.ok()) return st;
    EXPECT_EQ(response.request_id(), request.request_id());
    EXPECT_EQ(response.results_size(), static_cast<int>(steps.size()));
    double flops = 0;
    for (size_t i = 0; i < steps.size() && i < size_t(response.results_size());
         ++i) {
      SessionMirror& m = mirrors_.at(steps[i].id);
      if (steps[i].append > 0) {
        m.Append(o.layer, appends[i].first, appends[i].second);
      }
      const v1::SessionResult& r = response.results(static_cast<int>(i));
      EXPECT_EQ(r.session_id(), steps[i].id);
      EXPECT_EQ(r.tokens(), m.tokens(o.layer));
      std::vector<float> ref_w;
      // The server rounds queries to the storage dtype, which the mirror does
      // too; the wire's rounding comes first.
      std::vector<float> sent = WireFloats(request.sessions(int(i)).query());
      PagedAttentionInputs step;
      step.causal = o.causal;
      step.window_left = o.window_left;
      step.alibi_slopes = slopes;
      step.scale = o.scale;
      step.softcap = o.softcap;
      step.sinks = sinks;
      if (!rel_table.empty()) {
        RelativeBiasSpec rb;
        rb.table = rel_table;
        rb.num_buckets = 6;
        rb.max_distance = 16;
        step.relative_bias = rb;
      }
      absl::StatusOr<std::vector<float>> ref =
          m.Reference(o.layer, o.hq, sent, step, &ref_w);
      if (!ref.ok()) {
        ADD_FAILURE() << ref.status();
        continue;
      }
      const std::vector<float> got = WireFloats(r.output());
      EXPECT_EQ(r.output().shape_size(), 3);
      if (got.size() != ref->size()) {
        ADD_FAILURE() << "output size " << got.size() << " vs " << ref->size();
        continue;
      }
      // An int8 cache computes over the values it holds, in f32, or where
      // the server has AVX512-VNNI with its queries and weights rounded to
      // 16-bit integers (core/vec_ops.h).
      const DType dtype = m.shape().dtype;
      const float int8_tol = HasAvx512Vnni() ? 2e-4f : 2e-5f;
      const float tol = dtype == DType::kFloat32 ? 2e-5f
                        : dtype == DType::kInt8  ? int8_tol
                                                 : 2e-2f;
      for (size_t e = 0; e < got.size(); ++e) {
        if (!(std::fabs(got[e] - (*ref)[e]) <=
              tol * (1 + std::fabs((*ref)[e])))) {
          ADD_FAILURE() << "session " << steps[i].id << " element " << e << ": "
                        << got[e] << " vs " << (*ref)[e];
          break;
        }
      }
      if (o.weights) {
        const std::vector<float> w = WireFloats(r.weights());
        EXPECT_EQ(w.size(), ref_w.size());
        for (size_t e = 0; e < w.size() && e < ref_w.size(); ++e) {
          if (!(std::fabs(w[e] - ref_w[e]) <= tol)) {
            ADD_FAILURE() << "weights element " << e;
            break;
          }
        }
      }
      const MirrorShape& s = m.shape();
      // Over the keys the step can reach (a sink + window session's sinks,
      // window and new tokens).
      int64_t keys = m.tokens(o.layer);
      if (s.window_tokens > 0) {
        keys =
            std::min(keys, s.sink_tokens + s.window_tokens + steps[i].lnew - 1);
      }
      flops += 2.0 * o.hq * steps[i].lnew * keys * (s.head_dim + s.value_dim);
    }
    EXPECT_EQ(response.timing().flops(), flops);
    return st;
  }

  // From now on steps go over one AttendSessionsStream (false: unary calls;
  // the stream is closed and must end OK).
  void UseStream(bool on) {
    if (stream_ != nullptr) {
      stream_->WritesDone();
      const grpc::Status st = stream_->Finish();
      EXPECT_TRUE(st.ok()) << st.error_message();
      stream_.reset();
      stream_context_.reset();
    }
    if (on) {
      stream_context_ = std::make_unique<grpc::ClientContext>();
      Deadline(stream_context_.get());
      stream_ = stub_->AttendSessionsStream(stream_context_.get());
    }
  }

  // One step, unary or on the stream; a step's error on the stream becomes
  // its status (and the stream goes on).
  grpc::Status Send(const v1::AttendSessionsRequest& request,
                    v1::AttendSessionsResponse* response) {
    if (stream_ == nullptr) {
      grpc::ClientContext context;
      Deadline(&context);
      return stub_->AttendSessions(&context, request, response);
    }
    if (!stream_->Write(request) || !stream_->Read(response)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream broke");
    }
    EXPECT_EQ(response->request_id(), request.request_id());
    if (response->error_code() != 0) {
      EXPECT_EQ(response->results_size(), 0);
      return grpc::Status(static_cast<grpc::StatusCode>(response->error_code()),
                          response->error_message());
    }
    return grpc::Status::OK;
  }

  v1::SessionService::Stub& stub() { return *stub_; }
  SessionMirror& mirror(const std::string& id) { return mirrors_.at(id); }
  void Forget(const std::string& id) { mirrors_.erase(id); }
  void Adopt(const std::string& child, const std::string& parent) {
    mirrors_[child] = mirrors_.at(parent);
  }

  template <typename Request, typename Method>
  grpc::Status Call(Method method, const Request& request,
                    v1::SessionInfo* info) {
    grpc::ClientContext context;
    Deadline(&context);
    return (stub_.get()->*method)(&context, request, info);
  }

 private:
  static void Deadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(60));
  }

  std::unique_ptr<v1::SessionService::Stub> stub_;
  std::map<std::string, SessionMirror> mirrors_;
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AttendSessionsRequest,
                                           v1::AttendSessionsResponse>>
      stream_;
};

grpc::Status Fork(Client& c, const std::string& parent,
                  const std::string& child, v1::SessionInfo* info = nullptr) {
  v1::ForkSessionRequest r;
  r.set_session_id(parent);
  r.set_child_id(child);
  v1::SessionInfo response;
  const grpc::Status st =
      c.Call(&v1::SessionService::Stub::ForkSession, r, &response);
  if (st.ok()) c.Adopt(child, parent);
  if (info != nullptr) *info = response;
  return st;
}

grpc::Status Truncate(Client& c, const std::string& id, int64_t tokens) {
  v1::TruncateSessionRequest r;
  r.set_session_id(id);
  r.set_tokens(tokens);
  v1::SessionInfo info;
  const grpc::Status st =
      c.Call(&v1::SessionService::Stub::TruncateSession, r, &info);
  if (st.ok()) c.mirror(id).Truncate(tokens);
  return st;
}

grpc::Status Close(Client& c, const std::string& id) {
  v1::CloseSessionRequest r;
  r.set_session_id(id);
  v1::SessionInfo info;
  const grpc::Status st =
      c.Call(&v1::SessionService::Stub::CloseSession, r, &info);
  if (st.ok()) c.Forget(id);
  return st;
}

grpc::Status Get(Client& c, const std::string& id, v1::SessionInfo* info) {
  v1::GetSessionRequest r;
  r.set_session_id(id);
  return c.Call(&v1::SessionService::Stub::GetSession, r, info);
}

class E2eSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        StartServer({"--kv_cache_bytes=268435456", "--kv_block_tokens=16"})
            .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* E2eSessionTest::server_ = nullptr;

// Steps over unary calls or over one AttendSessionsStream (`stream`), between
// the other calls of the same sessions.
void RandomOperations(const ServerProcess& server, bool stream) {
  Client c(server);
  c.UseStream(stream);
  base::SplitMix64 rng(stream ? 2027 : 2026);
  const DType dtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16,
                          DType::kInt8, DType::kBFloat16};
  const int kv_heads[] = {2, 1, 4, 2, 2};  // GQA 4/2, MQA 4/1, MHA 4/4
  for (int round = 0; round < 5; ++round) {
    MirrorShape shape;
    shape.layers = 2;
    shape.kv_heads = kv_heads[round];
    shape.head_dim = 16;
    shape.value_dim = round == 1 ? 8 : 16;
    shape.dtype = dtypes[round];
    if (round == 4) {
      // Sink + window sessions (blocks of 16 tokens): the middle dropped as
      // the steps go, truncate refused where it would need it.
      shape.window_tokens = 24;
      shape.sink_tokens = 3;
    }
    std::vector<std::string> live;
    for (int i = 0; i < 3; ++i) {
      const std::string id = absl::StrCat(stream ? "sr" : "r", round, "-s", i);
      ASSERT_TRUE(c.Create(id, shape).ok());
      live.push_back(id);
    }
    for (int op = 0; op < 40; ++op) {
      SCOPED_TRACE(absl::StrCat("round ", round, " op ", op));
      const std::string& id = live[rng.Below(live.size())];
      const int layer = static_cast<int>(rng.Below(2));
      const uint64_t seed = rng.Next() % 100000;
      switch (rng.Below(7)) {
        case 0:
        case 1: {  // prefill chunks, unary or streamed, from a f16 or f32
                   // source
          const bool stream = rng.OneIn(2);
          const grpc::Status st =
              c.Append(id, layer, 1 + rng.Below(60), seed, stream,
                       1 + static_cast<int>(rng.Below(3)),
                       rng.OneIn(2) ? DType::kFloat16 : DType::kFloat32);
          ASSERT_TRUE(st.ok()) << st.error_message();
          break;
        }
        case 2:
        case 3:
        case 4: {  // a step: one or all sessions, new tokens, mixed Lnew
          std::vector<Client::Step> steps;
          for (const std::string& s : live) {
            if (s != id && rng.OneIn(2)) continue;
            Client::Step step;
            step.id = s;
            step.lnew = rng.OneIn(3) ? 1 + rng.Below(6) : 1;
            step.append = rng.OneIn(2) ? step.lnew : 0;
            steps.push_back(step);
          }
          Client::StepOptions o;
          o.layer = layer;
          o.hq = 4;
          o.causal = !rng.OneIn(5);
          if (rng.OneIn(4)) o.window_left = rng.Below(20);
          o.alibi = rng.OneIn(4);
          if (rng.OneIn(5)) o.scale = 0.3f;
          if (rng.OneIn(4)) o.softcap = 0.4f;
          o.sinks = rng.OneIn(4) ? o.hq : 0;
          o.relative_table = rng.OneIn(4) ? o.hq * 6 : 0;
          o.weights = rng.OneIn(6);
          o.query_dtype = rng.OneIn(2) ? DType::kBFloat16 : DType::kFloat32;
          const grpc::Status st = c.AttendAndCheck(steps, o, seed);
          ASSERT_TRUE(st.ok()) << st.error_message();
          break;
        }
        case 5: {  // fork, then the child diverges
          const std::string child = absl::StrCat(id, "-f", op);
          ASSERT_TRUE(Fork(c, id, child).ok());
          live.push_back(child);
          break;
        }
        case 6: {  // truncate (rejected speculative tokens) or close
          if (rng.OneIn(3) && live.size() > 1) {
            ASSERT_TRUE(Close(c, id).ok());
            live.erase(std::find(live.begin(), live.end(), id));
          } else {
            const int64_t most =
                std::max(c.mirror(id).tokens(0), c.mirror(id).tokens(1));
            const int64_t tokens =
                most - static_cast<int64_t>(rng.Below(most / 2 + 1));
            const bool can = c.mirror(id).CanTruncate(tokens);
            const grpc::Status st = Truncate(c, id, tokens);
            if (can) {
              ASSERT_TRUE(st.ok()) << st.error_message();
            } else {
              ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
                  << tokens << ": " << st.error_message();
              EXPECT_THAT(st.error_message(), HasSubstr("it can go back to"));
            }
          }
          break;
        }
      }
    }
    if (shape.window_tokens > 0) {
      // Back past the last append: refused, and the session goes on as the
      // mirror says.
      const std::string& id = live[0];
      for (int layer = 0; layer < 2; ++layer) {
        ASSERT_TRUE(c.Append(id, layer, 60, 70 + layer).ok());
        ASSERT_TRUE(c.Append(id, layer, 40, 77 + layer).ok());
      }
      const int64_t most =
          std::max(c.mirror(id).tokens(0), c.mirror(id).tokens(1));
      EXPECT_FALSE(c.mirror(id).CanTruncate(most - 41));
      const grpc::Status st = Truncate(c, id, most - 41);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(st.error_message(),
                  HasSubstr(absl::StrCat("it can go back to ", most - 40)));
      Client::StepOptions o;
      const grpc::Status step = c.AttendAndCheck({{id, 2, 2}}, o, 99);
      ASSERT_TRUE(step.ok()) << step.error_message();
    }
    for (const std::string& id : live) ASSERT_TRUE(Close(c, id).ok());
  }
  c.UseStream(false);
}

TEST_F(E2eSessionTest, RandomOperationSequencesMatchTheStatelessReference) {
  ASSERT_NE(server_, nullptr);
  RandomOperations(*server_, /*stream=*/false);
}

TEST_F(E2eSessionTest, TheSameOverAStepStream) {
  ASSERT_NE(server_, nullptr);
  RandomOperations(*server_, /*stream=*/true);
}

TEST_F(E2eSessionTest, ABatchOfManySessionsInOneCall) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  shape.kv_heads = 2;
  shape.head_dim = 32;
  shape.value_dim = 32;
  shape.dtype = DType::kBFloat16;
  std::vector<Client::Step> steps;
  for (int i = 0; i < 64; ++i) {
    const std::string id = absl::StrCat("batch-", i);
    ASSERT_TRUE(c.Create(id, shape).ok());
    ASSERT_TRUE(c.Append(id, 0, 1 + (i * 53) % 300, 1000 + i).ok());
    steps.push_back({id, 1, 1});
  }
  Client::StepOptions o;
  o.hq = 8;
  for (int step = 0; step < 3; ++step) {
    const grpc::Status st = c.AttendAndCheck(steps, o, 500 + step);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  for (const auto& s : steps) ASSERT_TRUE(Close(c, s.id).ok());
}

TEST_F(E2eSessionTest, ErrorsNameTheFieldAndTheValues) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("err", shape).ok());
  ASSERT_TRUE(c.Append("err", 0, 8, 1).ok());
  const auto expect = [](const grpc::Status& st, grpc::StatusCode code,
                         const std::string& part) {
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(part));
  };

  v1::AppendKvRequest append;
  append.set_session_id("err");
  append.set_position(10);
  *append.mutable_key() =
      WireRows(DType::kFloat32, 1, 2, 16, RandomValues(1, 32));
  *append.mutable_value() =
      WireRows(DType::kFloat32, 1, 2, 16, RandomValues(2, 32));
  v1::SessionInfo info;
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT,
         "position: 10 leaves a gap after the 8 tokens layer 0 holds");
  append.set_position(3);
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT,
         "position: 3 overlaps the 8 tokens");
  append.clear_position();
  *append.mutable_key() =
      WireRows(DType::kFloat32, 1, 3, 16, RandomValues(1, 48));
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT,
         "key.shape: expected [Lnew, num_kv_heads = 2, head_dim = 16], got [1, "
         "3, 16]");
  *append.mutable_key() =
      WireRows(DType::kFloat32, 1, 2, 8, RandomValues(1, 16));
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT, "head_dim = 16], got [1, 2, 8]");
  append.mutable_key()->set_data("xx");
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT, "key: 2 bytes do not match shape");
  append.clear_key();
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT, "key: missing");
  append.set_layer(1);
  *append.mutable_key() =
      WireRows(DType::kFloat32, 1, 2, 16, RandomValues(1, 32));
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT, "layer: 1 is outside [0, 1)");

  // Creation.
  MirrorShape bad = shape;
  bad.head_dim = 600;
  expect(c.Create("bad", bad), grpc::StatusCode::INVALID_ARGUMENT,
         "shape.head_dim: 600 is outside [1, 576]");
  MirrorShape other = shape;
  other.layers = 2;
  expect(c.Create("err", other), grpc::StatusCode::ALREADY_EXISTS,
         "session \"err\" exists with shape layers 1");
  v1::SessionInfo again;
  ASSERT_TRUE(c.Create("err", shape, &again).ok());  // an idempotent retry
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.layer_tokens(0), 8);

  // Int8 storage: quantized rows and their scales; keys and values finite,
  // and INT8 is no tensor's dtype.
  MirrorShape int8 = shape;
  int8.dtype = DType::kInt8;
  v1::SessionInfo created;
  ASSERT_TRUE(c.Create("int8", int8, &created).ok());
  EXPECT_EQ(created.shape().storage_dtype(), v1::INT8);
  ASSERT_TRUE(c.Append("int8", 0, 16, 3).ok());
  ASSERT_TRUE(Get(c, "int8", &info).ok());
  // One block of 16 tokens × 2 kv heads × (16 + 16) int8 + 2 scales of f32.
  EXPECT_EQ(info.kv_bytes(), 16 * 2 * (32 + 8));
  append.set_session_id("int8");
  append.set_layer(0);
  *append.mutable_key() =
      WireRows(DType::kFloat32, 1, 2, 16, RandomValues(1, 32));
  std::vector<float> inf = RandomValues(2, 32);
  inf[7] = std::numeric_limits<float>::infinity();
  *append.mutable_value() = WireRows(DType::kFloat32, 1, 2, 16, inf);
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT,
         "value: element 7 is not finite (int8 storage holds finite values "
         "only)");
  append.mutable_value()->set_dtype(v1::INT8);
  expect(c.Call(&v1::SessionService::Stub::AppendKv, append, &info),
         grpc::StatusCode::INVALID_ARGUMENT,
         "value.dtype: INT8 is only for SessionShape.storage_dtype");
  ASSERT_TRUE(Get(c, "int8", &info).ok());
  EXPECT_EQ(info.layer_tokens(0), 16);
  ASSERT_TRUE(Close(c, "int8").ok());

  // Attention.
  MirrorShape wide = shape;
  wide.head_dim = 32;
  ASSERT_TRUE(c.Create("wide", wide).ok());
  Client::StepOptions o;
  expect(c.AttendAndCheck({{"err", 1, 0}, {"wide", 1, 0}}, o, 1),
         grpc::StatusCode::INVALID_ARGUMENT,
         "sessions[1].session_id: session \"wide\" has layers 1, kv heads 2, "
         "head_dim 32");
  expect(c.AttendAndCheck({{"err", 1, 0}, {"err", 1, 0}}, o, 1),
         grpc::StatusCode::INVALID_ARGUMENT,
         "sessions[1].session_id: \"err\" is also sessions[0].session_id");
  o.hq = 3;
  expect(c.AttendAndCheck({{"err", 1, 0}}, o, 1),
         grpc::StatusCode::INVALID_ARGUMENT,
         "sessions[0].query.shape: expected [Lnew, Hq = 3 (a multiple of "
         "num_kv_heads = 2), head_dim = 16]");
  o.hq = 4;
  expect(c.AttendAndCheck({{"nobody", 1, 0}}, o, 1),
         grpc::StatusCode::NOT_FOUND,
         "sessions[0].session_id: session \"nobody\" is unknown here");
  v1::AttendSessionsRequest empty;
  v1::AttendSessionsResponse response;
  {
    grpc::ClientContext context;
    expect(c.stub().AttendSessions(&context, empty, &response),
           grpc::StatusCode::INVALID_ARGUMENT,
           "sessions: 0 sessions (expected 1 to 4096)");
  }
  // The new keys of a refused call are not appended.
  const int64_t before = c.mirror("err").tokens(0);
  o.hq = 3;
  EXPECT_FALSE(c.AttendAndCheck({{"err", 1, 1}}, o, 2).ok());
  o.hq = 4;
  o.softcap = -1.0f;
  expect(c.AttendAndCheck({{"err", 1, 1}}, o, 3),
         grpc::StatusCode::INVALID_ARGUMENT,
         "softcap: must be finite and > 0, got -1");
  o.softcap.reset();
  o.sinks = 3;
  expect(c.AttendAndCheck({{"err", 1, 1}}, o, 4),
         grpc::StatusCode::INVALID_ARGUMENT,
         "sinks: expected 4 entries (one per query head), got 3");
  o.sinks = 0;
  o.relative_table = 5;
  expect(c.AttendAndCheck({{"err", 1, 1}}, o, 5),
         grpc::StatusCode::INVALID_ARGUMENT,
         "relative_bias.table: expected Hq × num_buckets = 4 × 6 = 24 "
         "entries, got 5");
  o.relative_table = 0;
  ASSERT_TRUE(Get(c, "err", &info).ok());
  EXPECT_EQ(info.layer_tokens(0), before);

  // Ended sessions say so.
  ASSERT_TRUE(Close(c, "err").ok());
  expect(Get(c, "err", &info), grpc::StatusCode::NOT_FOUND,
         "session \"err\" was closed at ");
  expect(Truncate(c, "nobody", 0), grpc::StatusCode::NOT_FOUND,
         "is unknown here");
  ASSERT_TRUE(Close(c, "wide").ok());
}

// Several steps written before any answer is read: answered in order, a failed
// step with its code and message (its session unchanged), and the stream goes
// on.
TEST_F(E2eSessionTest, AStepStreamAnswersEveryStepInOrderAndGoesOnAfterErrors) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  shape.layers = 2;
  ASSERT_TRUE(c.Create("pipe", shape).ok());
  ASSERT_TRUE(c.Append("pipe", 0, 5, 1).ok());
  const auto step = [&](const std::string& id, int layer, int64_t hq,
                        int64_t append, std::optional<int64_t> position) {
    v1::AttendSessionsRequest r;
    r.set_request_id(absl::StrCat("m", id, layer, hq, append));
    r.set_layer(layer);
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id(id);
    *q->mutable_query() =
        WireRows(DType::kFloat32, 1, hq, 16, RandomValues(hq, hq * 16));
    if (append > 0) {
      *q->mutable_key() = WireRows(DType::kFloat32, append, 2, 16,
                                   RandomValues(7, append * 32));
      *q->mutable_value() = WireRows(DType::kFloat32, append, 2, 16,
                                     RandomValues(8, append * 32));
      if (position) q->set_position(*position);
    }
    return r;
  };
  const std::vector<v1::AttendSessionsRequest> requests = {
      step("pipe", 0, 4, 1, 5),     // OK: 6 tokens
      step("nobody", 0, 4, 0, {}),  // NOT_FOUND
      step("pipe", 0, 3, 1, 6),     // Hq 3: refused, nothing appended
      step("pipe", 0, 4, 1, 5),     // position 5 overlaps: refused
      step("pipe", 2, 4, 0, {}),    // no layer 2
      step("pipe", 1, 4, 2, 0),     // OK: layer 1 gets 2 tokens
      step("pipe", 0, 4, 1, 6),     // OK: 7 tokens
  };
  const grpc::StatusCode codes[] = {grpc::StatusCode::OK,
                                    grpc::StatusCode::NOT_FOUND,
                                    grpc::StatusCode::INVALID_ARGUMENT,
                                    grpc::StatusCode::INVALID_ARGUMENT,
                                    grpc::StatusCode::INVALID_ARGUMENT,
                                    grpc::StatusCode::OK,
                                    grpc::StatusCode::OK};
  const char* messages[] = {"",
                            "sessions[0].session_id: session \"nobody\"",
                            "sessions[0].query.shape: expected [Lnew, Hq = 3",
                            "sessions[0].position: 5 overlaps the 6 tokens",
                            "layer: 2 is outside [0, 2)",
                            "",
                            ""};
  const int64_t tokens[] = {6, 0, 0, 0, 0, 2, 7};
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  auto stream = c.stub().AttendSessionsStream(&context);
  for (const auto& r : requests) ASSERT_TRUE(stream->Write(r));
  stream->WritesDone();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("message ", i));
    v1::AttendSessionsResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.request_id(), requests[i].request_id());
    EXPECT_EQ(response.error_code(), static_cast<int>(codes[i]));
    EXPECT_THAT(response.error_message(), HasSubstr(messages[i]));
    if (codes[i] == grpc::StatusCode::OK) {
      ASSERT_EQ(response.results_size(), 1);
      EXPECT_EQ(response.results(0).tokens(), tokens[i]);
      EXPECT_EQ(response.results(0).output().shape_size(), 3);
    } else {
      EXPECT_EQ(response.results_size(), 0);
    }
  }
  v1::AttendSessionsResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  const grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  v1::SessionInfo info;
  ASSERT_TRUE(Get(c, "pipe", &info).ok());
  EXPECT_EQ(info.layer_tokens(0), 7);
  EXPECT_EQ(info.layer_tokens(1), 2);
  ASSERT_TRUE(Close(c, "pipe").ok());
}

// A client that goes away mid-stream leaves nothing behind: the session can
// be closed and its blocks are freed.
TEST_F(E2eSessionTest, AStreamCancelledMidwayLeavesNothingPinned) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("gone", shape).ok());
  ASSERT_TRUE(c.Append("gone", 0, 100, 1).ok());
  auto stub = v1::AttentionService::NewStub(server_->Channel());
  const auto kv_bytes_used = [&] {
    v1::GetServerInfoRequest request;
    v1::ServerInfo info;
    grpc::ClientContext context;
    EXPECT_TRUE(stub->GetServerInfo(&context, request, &info).ok());
    return info.sessions().kv_bytes_used();
  };
  const int64_t before = kv_bytes_used();
  {
    grpc::ClientContext context;
    auto stream = c.stub().AttendSessionsStream(&context);
    v1::AttendSessionsRequest r;
    r.set_layer(0);
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id("gone");
    *q->mutable_query() =
        WireRows(DType::kFloat32, 1, 4, 16, RandomValues(3, 64));
    for (int i = 0; i < 50; ++i) {
      if (!stream->Write(r)) break;
    }
    v1::AttendSessionsResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.error_code(), 0) << response.error_message();
    context.TryCancel();
    while (stream->Read(&response)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  ASSERT_TRUE(Close(c, "gone").ok());
  // The session's blocks go once no step pins them.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (kv_bytes_used() > before - 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(kv_bytes_used(), before);
}

TEST_F(E2eSessionTest, AStreamedPrefillNamesTheFailingChunk) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("chunks", shape).ok());
  v1::SessionInfo info;
  grpc::ClientContext context;
  auto writer = c.stub().AppendKvStream(&context, &info);
  for (int i = 0; i < 3; ++i) {
    v1::AppendKvRequest r;
    r.set_session_id("chunks");
    r.set_position(i == 2 ? 99 : i * 4);
    *r.mutable_key() =
        WireRows(DType::kFloat32, 4, 2, 16, RandomValues(i, 128));
    *r.mutable_value() =
        WireRows(DType::kFloat32, 4, 2, 16, RandomValues(i + 9, 128));
    writer->Write(r);
  }
  writer->WritesDone();
  const grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      st.error_message(),
      HasSubstr("chunk 2: position: 99 leaves a gap after the 8 tokens"));
  ASSERT_TRUE(Get(c, "chunks", &info).ok());
  EXPECT_EQ(info.layer_tokens(0), 8);  // the chunks before it stay
  ASSERT_TRUE(Close(c, "chunks").ok());
}

// A client that goes away in the middle of a streamed prefill: the chunks
// the server applied stay (whole chunks, never part of one), nothing is left
// pinned, the session goes on from there and closes like any other.
TEST_F(E2eSessionTest, AnAppendStreamCancelledMidwayKeepsWholeChunks) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("vanished", shape).ok());
  auto chunk = [](int i, int64_t position) {
    v1::AppendKvRequest r;
    r.set_session_id("vanished");
    r.set_position(position);
    *r.mutable_key() =
        WireRows(DType::kFloat32, 4, 2, 16, RandomValues(i, 128));
    *r.mutable_value() =
        WireRows(DType::kFloat32, 4, 2, 16, RandomValues(i + 9, 128));
    return r;
  };
  {
    grpc::ClientContext context;
    v1::SessionInfo info;
    auto writer = c.stub().AppendKvStream(&context, &info);
    for (int i = 0; i < 20; ++i) {
      if (!writer->Write(chunk(i, 4 * i))) break;
    }
    context.TryCancel();  // no WritesDone: the client is gone
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  v1::SessionInfo info;
  ASSERT_TRUE(Get(c, "vanished", &info).ok());
  const int64_t tokens = info.layer_tokens(0);
  EXPECT_EQ(tokens % 4, 0) << "a chunk is appended whole or not at all";
  EXPECT_LE(tokens, 80);
  // The session goes on where the applied chunks end.
  v1::SessionInfo after;
  ASSERT_TRUE(
      c.Call(&v1::SessionService::Stub::AppendKv, chunk(99, tokens), &after)
          .ok());
  EXPECT_EQ(after.layer_tokens(0), tokens + 4);
  ASSERT_TRUE(Close(c, "vanished").ok());
  EXPECT_EQ(Get(c, "vanished", &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(E2eSessionTest, AForkCostsNoKvMemoryUntilItDiverges) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  shape.layers = 2;
  ASSERT_TRUE(c.Create("parent", shape).ok());
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(c.Append("parent", layer, 1000, 5 + layer, true, 4).ok());
  }
  auto used = [&] {
    auto stub = v1::AttentionService::NewStub(server_->Channel());
    v1::ServerInfo info;
    grpc::ClientContext context;
    EXPECT_TRUE(
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    return info.sessions().kv_bytes_used();
  };
  // One block: 16 tokens × 2 kv heads × (16 + 16) × 4 bytes.
  const int64_t block = 16 * 2 * 32 * 4;
  v1::SessionInfo parent;
  ASSERT_TRUE(Get(c, "parent", &parent).ok());
  EXPECT_EQ(parent.kv_bytes(), 2 * 63 * block);  // ceil(1000 / 16) per layer
  const int64_t before = used();
  v1::SessionInfo child;
  ASSERT_TRUE(Fork(c, "parent", "child", &child).ok());
  EXPECT_EQ(child.parent_id(), "parent");
  EXPECT_EQ(child.kv_bytes(), parent.kv_bytes());
  EXPECT_EQ(used(), before);
  // Diverging by one token per layer copies the shared partial block.
  Client::StepOptions o;
  for (int layer = 0; layer < 2; ++layer) {
    o.layer = layer;
    ASSERT_TRUE(c.AttendAndCheck({{"child", 1, 1}}, o, 77 + layer).ok());
  }
  EXPECT_EQ(used(), before + 2 * block);
  ASSERT_TRUE(c.AttendAndCheck({{"parent", 1, 0}}, o, 99).ok());  // unchanged
  ASSERT_TRUE(Close(c, "parent").ok());
  ASSERT_TRUE(Close(c, "child").ok());
}

TEST_F(E2eSessionTest, SessionsWithTheSamePromptHoldOneCopyOfItsFullBlocks) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  MirrorShape shape;
  shape.kv_heads = 2;
  shape.head_dim = 32;
  shape.value_dim = 32;
  const auto used = [&] {
    return testing::MetricSample(*server_,
                                 "attnserve_kv_bytes{state=\"used\"}");
  };
  const double shared =
      testing::MetricSample(*server_, "attnserve_kv_blocks_shared_total");
  ASSERT_TRUE(c.Create("prompt-a", shape).ok());
  ASSERT_TRUE(c.Create("prompt-b", shape).ok());
  ASSERT_TRUE(c.Append("prompt-a", 0, 40, 4242).ok());
  const double one = used();
  // The same 40 tokens (2 full blocks of 16 and a partial one): b holds the
  // two full blocks a holds, and its own partial block.
  ASSERT_TRUE(c.Append("prompt-b", 0, 40, 4242).ok());
  const int64_t block = 16 * 2 * 64 * 4;
  EXPECT_EQ(used() - one, block);
  EXPECT_EQ(testing::MetricSample(*server_, "attnserve_kv_blocks_shared_total"),
            shared + 2);
  v1::SessionInfo info;
  ASSERT_TRUE(Get(c, "prompt-b", &info).ok());
  EXPECT_EQ(info.kv_bytes(), 3 * block);  // what the session references
  // Each continues on its own; the shared blocks stay as they were.
  Client::StepOptions o;
  for (int step = 0; step < 30; ++step) {
    ASSERT_TRUE(c.AttendAndCheck({{"prompt-a", 1, 1}, {"prompt-b", 1, 1}}, o,
                                 300 + step)
                    .ok());
  }
  ASSERT_TRUE(Truncate(c, "prompt-b", 20).ok());
  ASSERT_TRUE(c.AttendAndCheck({{"prompt-b", 2, 2}}, o, 400).ok());
  ASSERT_TRUE(c.AttendAndCheck({{"prompt-a", 1, 0}}, o, 401).ok());
  ASSERT_TRUE(Close(c, "prompt-a").ok());
  ASSERT_TRUE(Close(c, "prompt-b").ok());
}

TEST_F(E2eSessionTest, ServerInfoAndMetricsCountSessions) {
  ASSERT_NE(server_, nullptr);
  Client c(*server_);
  auto stub = v1::AttentionService::NewStub(server_->Channel());
  v1::ServerInfo info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.sessions().kv_cache_bytes(), 268435456);
  EXPECT_EQ(info.sessions().block_tokens(), 16);
  EXPECT_EQ(info.sessions().eviction(), "none");
  EXPECT_EQ(info.sessions().default_ttl_ms(), 600000);
  const double appended =
      testing::MetricSample(*server_, "attnserve_kv_tokens_appended_total");
  const double closed = testing::MetricSample(
      *server_, "attnserve_kv_sessions_ended_total{reason=\"closed\"}");
  const double steps = testing::MetricSample(
      *server_,
      "attnserve_requests_total{code=\"OK\",method=\"AttendSessions\"}");
  MirrorShape shape;
  ASSERT_TRUE(c.Create("metered", shape).ok());
  ASSERT_TRUE(c.Append("metered", 0, 20, 3).ok());
  EXPECT_EQ(testing::MetricSample(*server_, "attnserve_kv_sessions"),
            info.sessions().live_sessions() + 1);
  EXPECT_GT(
      testing::MetricSample(*server_, "attnserve_kv_bytes{state=\"used\"}"), 0);
  ASSERT_TRUE(c.AttendAndCheck({{"metered", 1, 1}}, {}, 5).ok());
  EXPECT_EQ(
      testing::MetricSample(*server_, "attnserve_kv_tokens_appended_total"),
      appended + 21);
  testing::AwaitMetric(
      *server_,
      "attnserve_requests_total{code=\"OK\",method=\"AttendSessions\"}",
      steps + 1);
  EXPECT_EQ(
      testing::MetricSample(
          *server_,
          "attnserve_requests_total{code=\"OK\",method=\"AttendSessions\"}"),
      steps + 1);
  ASSERT_TRUE(Close(c, "metered").ok());
  EXPECT_EQ(
      testing::MetricSample(
          *server_, "attnserve_kv_sessions_ended_total{reason=\"closed\"}"),
      closed + 1);
}

TEST(E2eSessionLimitsTest, AFullCacheRefusesNamingTheBudget) {
  auto server = StartServer({"--kv_cache_bytes=65536", "--kv_block_tokens=16"});
  ASSERT_NE(server, nullptr);
  Client c(*server);
  MirrorShape shape;  // one block: 4096 bytes
  ASSERT_TRUE(c.Create("a", shape).ok());
  ASSERT_TRUE(c.Append("a", 0, 256, 1).ok());  // 16 blocks: the whole budget
  const grpc::Status st = c.Append("a", 0, 1, 2);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(),
              HasSubstr("KV cache full for session \"a\" layer 0: 4096 bytes "
                        "asked, 65536 of the 65536 bytes of the KV cache "
                        "(--kv_cache_bytes) in use"));
}

// Session calls count against --max_inflight_bytes like the others: a call
// whose request and response do not fit is refused before anything is
// appended, naming the budget, and the session is as it was.
TEST(E2eSessionLimitsTest, CallsPastTheMemoryBudgetAreRefusedAndLeaveNoTrace) {
  auto server = StartServer({"--max_inflight_bytes=200000"});
  ASSERT_NE(server, nullptr);
  Client c(*server);
  MirrorShape shape;  // 2 kv heads x 16 dims, f32: 256 bytes a token
  ASSERT_TRUE(c.Create("a", shape).ok());
  ASSERT_TRUE(c.Append("a", 0, 256, 1).ok());  // 64 KiB
  const auto budget_message = HasSubstr("--max_inflight_bytes = 200000");
  v1::SessionInfo info0;
  // 1024 tokens (256 KiB) in one AppendKv.
  grpc::Status st = c.Append("a", 0, 1024, 2);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), budget_message);
  // The same in one chunk of an AppendKvStream: refused as its chunk 0.
  st = c.Append("a", 0, 1024, 2, /*stream=*/true);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), budget_message);
  EXPECT_THAT(st.error_message(), HasSubstr("chunk 0: "));
  // In four chunks of 64 KiB each fits: one chunk is held at a time.
  ASSERT_TRUE(c.Append("a", 0, 1024, 5, /*stream=*/true, /*chunks=*/4).ok());
  ASSERT_TRUE(Get(c, "a", &info0).ok());
  EXPECT_EQ(info0.layer_tokens(0), 256 + 1024);
  // A step of 512 queries (128 KiB) appending 512 tokens (128 KiB).
  st = c.AttendAndCheck({{"a", 512, 512}}, {}, 3);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), budget_message);
  v1::SessionInfo info;
  ASSERT_TRUE(Get(c, "a", &info).ok());
  EXPECT_EQ(info.layer_tokens(0), 256 + 1024);
  // What fits is served, against the mirror of the 1280 tokens.
  EXPECT_TRUE(c.AttendAndCheck({{"a", 4, 4}}, {}, 4).ok());
  EXPECT_EQ(
      testing::AwaitMetric(
          *server, R"(attnserve_rejected_total{reason="memory_budget"})", 3),
      3);
}

TEST(E2eSessionLimitsTest, LruEvictsIdleSessionsAndSaysSo) {
  auto server = StartServer(
      {"--kv_cache_bytes=65536", "--kv_block_tokens=16", "--kv_eviction=lru"});
  ASSERT_NE(server, nullptr);
  Client c(*server);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("old", shape).ok());
  ASSERT_TRUE(c.Append("old", 0, 128, 1).ok());
  ASSERT_TRUE(c.Create("new", shape).ok());
  ASSERT_TRUE(c.Append("new", 0, 128, 2).ok());
  ASSERT_TRUE(c.Append("new", 0, 16, 3).ok());  // evicts "old"
  v1::SessionInfo info;
  const grpc::Status st = Get(c, "old", &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("session \"old\" was evicted at "));
  EXPECT_THAT(st.error_message(), HasSubstr("--kv_eviction=lru"));
  EXPECT_EQ(
      testing::MetricSample(
          *server, "attnserve_kv_sessions_ended_total{reason=\"evicted\"}"),
      1);
  ASSERT_TRUE(c.AttendAndCheck({{"new", 1, 0}}, {}, 4).ok());
}

TEST(E2eSessionLimitsTest, IdleSessionsExpireAfterTheirTtl) {
  auto server = StartServer({"--kv_session_ttl=300ms"});
  ASSERT_NE(server, nullptr);
  Client c(*server);
  MirrorShape shape;
  ASSERT_TRUE(c.Create("brief", shape).ok());
  v1::SessionInfo info;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  grpc::Status st;
  do {
    absl::SleepFor(absl::Milliseconds(100));
    st = Get(c, "brief", &info);  // not a use: the TTL runs on
  } while (st.ok() && absl::Now() < give_up);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(),
              HasSubstr("idle for longer than its TTL of 300ms"));
}

// Steps in flight when SIGTERM arrives finish; later ones are refused:
// UNAVAILABLE while the server drains, or CANCELLED when one reaches it just as
// gRPC closes (after the in-flight work is done). Nothing else, and the server
// exits 0.
TEST(E2eSessionShutdownTest, SigtermDuringDecodeFinishesOrRefusesEveryStep) {
  auto server = StartServer({"--shutdown_grace=10s"});
  ASSERT_NE(server, nullptr);
  Client setup(*server);
  MirrorShape shape;
  shape.kv_heads = 8;
  shape.head_dim = 64;
  shape.value_dim = 64;
  ASSERT_TRUE(setup.Create("long", shape).ok());
  ASSERT_TRUE(setup.Append("long", 0, 4096, 1, true, 8).ok());
  std::atomic<int64_t> signalled_ns{std::numeric_limits<int64_t>::max()};
  std::atomic<int> ok{0}, refused{0}, unexpected{0};
  std::mutex mu;
  std::string first_unexpected;
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      auto stub = v1::SessionService::NewStub(server->Channel());
      while (true) {
        v1::AttendSessionsRequest r;
        v1::SessionQuery* q = r.add_sessions();
        q->set_session_id("long");
        *q->mutable_query() =
            WireRows(DType::kFloat32, 1, 8, 64, RandomValues(t, 512));
        v1::AttendSessionsResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(20));
        const bool before_signal =
            absl::ToUnixNanos(absl::Now()) < signalled_ns.load();
        const grpc::Status st = stub->AttendSessions(&context, r, &response);
        const bool answered =
            st.ok() && response.results_size() == 1 &&
            response.results(0).output().data().size() == 8 * 64 * 4;
        if (answered) {
          ++ok;
          continue;
        }
        const bool fine =
            st.error_code() == grpc::StatusCode::UNAVAILABLE ||
            (!before_signal && st.error_code() == grpc::StatusCode::CANCELLED);
        if (fine) {
          ++refused;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          if (unexpected++ == 0) {
            first_unexpected =
                absl::StrCat(st.error_code(), " ", st.error_message(),
                             before_signal ? " (sent before SIGTERM)" : "");
          }
        }
        return;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  signalled_ns.store(absl::ToUnixNanos(absl::Now()));
  server->Kill(SIGTERM);
  absl::StatusOr<int> code = server->WaitForExit(absl::Seconds(30));
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(refused.load(), 3);  // each client's last call
  EXPECT_EQ(unexpected.load(), 0) << first_unexpected;
}

}  // namespace
}  // namespace attnserve
