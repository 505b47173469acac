// Session routing with a real load balancer: a real haproxy process (the
// configuration of deploy/haproxy/haproxy.cfg: consistent hashing on the
// `attnserve-session` header, health from GET /ready) in front of two real
// attnserve replicas. Every session's calls reach the replica that holds it,
// the sessions spread over both, a draining replica gets no new calls, and a
// rolling restart of one replica moves its sessions to the other without
// losing a step.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/session_mirror.h"
#include "tests/util/temp_dir.h"

#ifndef ATTNSERVE_HAPROXY_BINARY
#error "ATTNSERVE_HAPROXY_BINARY must name the haproxy binary"
#endif
#ifndef ATTNSERVE_SOURCE_DIR
#error "ATTNSERVE_SOURCE_DIR must name the source tree"
#endif

namespace attnserve {
namespace {

using ::attnserve::testing::MetricSample;
using ::attnserve::testing::MirrorShape;
using ::attnserve::testing::RandomValues;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::SessionMirror;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::WireRows;
using ::attnserve::testing::WireShape;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// deploy/haproxy/haproxy.cfg with its listen port and servers replaced.
std::string ConfigFor(int port, const ServerProcess& a,
                      const ServerProcess& b) {
  std::ifstream in(std::string(ATTNSERVE_SOURCE_DIR) +
                   "/deploy/haproxy/haproxy.cfg");
  std::string cfg((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  EXPECT_FALSE(cfg.empty());
  const auto server = [](const ServerProcess& p) {
    return absl::StrCat(p.target(), " proto h2 check port ", p.metrics_port());
  };
  return absl::StrReplaceAll(
      cfg, {{"0.0.0.0:50050", absl::StrCat("127.0.0.1:", port)},
            {"attnserve-a:50051 proto h2 check port 9464", server(a)},
            {"attnserve-b:50051 proto h2 check port 9464", server(b)}});
}

// True once `port` on 127.0.0.1 accepts a TCP connection (at most 10 s), so
// that the gRPC channel made next does not start in connection backoff.
bool AwaitListening(int port) {
  for (int i = 0; i < 200; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok =
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (ok) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

class Haproxy {
 public:
  explicit Haproxy(const std::string& config_path) {
    pid_ = fork();
    if (pid_ == 0) {
      execl(ATTNSERVE_HAPROXY_BINARY, "haproxy", "-db", "-f",
            config_path.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Haproxy() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool running() const {
    return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0;
  }

 private:
  pid_t pid_ = -1;
};

void Route(grpc::ClientContext* context, const std::string& session) {
  context->AddMetadata("attnserve-session", session);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(30));
}

TEST(E2eSessionRoutingTest, TheShippedConfigIsValid) {
  const std::string command =
      absl::StrCat(ATTNSERVE_HAPROXY_BINARY, " -c -q -f ", ATTNSERVE_SOURCE_DIR,
                   "/deploy/haproxy/haproxy.cfg");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

// The shipped configuration over replicas `a` and `b` in a real haproxy,
// with a channel to it; up() once a call passes through it.
class Balancer {
 public:
  Balancer(const ServerProcess& a, const ServerProcess& b)
      : port_(FreePort()), config_(dir_.path() + "/haproxy.cfg") {
    {
      std::ofstream out(config_);
      out << ConfigFor(port_, a, b);
    }
    haproxy_ = std::make_unique<Haproxy>(config_);
    if (!AwaitListening(port_)) {
      why_ = absl::StrCat("haproxy is not listening on ", port_);
      return;
    }
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    auto info_stub = v1::AttentionService::NewStub(channel_);
    grpc::Status last;
    for (int i = 0; i < 100 && !up_ && haproxy_->running(); ++i) {
      v1::ServerInfo info;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(500));
      last = info_stub->GetServerInfo(&context, {}, &info);
      up_ = last.ok();
      if (!up_) absl::SleepFor(absl::Milliseconds(100));
    }
    if (!up_) {
      why_ =
          absl::StrCat("haproxy did not come up on port ", port_, ": ",
                       last.error_message(), " (running ", haproxy_->running(),
                       ") with\n", ConfigFor(port_, a, b));
    }
  }

  bool up() const { return up_; }
  const std::string& why() const { return why_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  TempDir dir_;
  const int port_;
  const std::string config_;
  std::unique_ptr<Haproxy> haproxy_;
  std::shared_ptr<grpc::Channel> channel_;
  bool up_ = false;
  std::string why_;
};

grpc::Status CreateRouted(v1::SessionService::Stub& stub,
                          const std::string& id) {
  v1::CreateSessionRequest r;
  r.set_session_id(id);
  *r.mutable_shape() = WireShape(MirrorShape{});
  v1::SessionInfo info;
  grpc::ClientContext context;
  Route(&context, id);
  return stub.CreateSession(&context, r, &info);
}

bool HoldsSession(const ServerProcess& replica, const std::string& id) {
  auto direct = v1::SessionService::NewStub(replica.Channel());
  v1::GetSessionRequest r;
  r.set_session_id(id);
  v1::SessionInfo info;
  grpc::ClientContext context;
  return direct->GetSession(&context, r, &info).ok();
}

TEST(E2eSessionRoutingTest, EachSessionStaysOnOneReplicaAndSessionsSpread) {
  auto a = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  auto b = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  ASSERT_TRUE(a.ok() && b.ok());
  Balancer balancer(**a, **b);
  ASSERT_TRUE(balancer.up()) << balancer.why();
  const std::shared_ptr<grpc::Channel>& channel = balancer.channel();

  auto stub = v1::SessionService::NewStub(channel);
  MirrorShape shape;
  constexpr int kSessions = 16, kSteps = 3;
  std::vector<std::string> ids;
  for (int s = 0; s < kSessions; ++s) {
    const std::string id = absl::StrCat("routed-", s);
    ids.push_back(id);
    ASSERT_TRUE(CreateRouted(*stub, id).ok());
    {
      v1::AppendKvRequest r;
      r.set_session_id(id);
      r.set_position(0);
      *r.mutable_key() =
          WireRows(DType::kFloat32, 32, 2, 16, RandomValues(s, 32 * 32));
      *r.mutable_value() =
          WireRows(DType::kFloat32, 32, 2, 16, RandomValues(s + 99, 32 * 32));
      v1::SessionInfo info;
      grpc::ClientContext context;
      Route(&context, id);
      const grpc::Status st = stub->AppendKv(&context, r, &info);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    for (int step = 0; step < kSteps; ++step) {
      v1::AttendSessionsRequest r;
      v1::SessionQuery* q = r.add_sessions();
      q->set_session_id(id);
      *q->mutable_query() =
          WireRows(DType::kFloat32, 1, 4, 16, RandomValues(step, 64));
      *q->mutable_key() =
          WireRows(DType::kFloat32, 1, 2, 16, RandomValues(step, 32));
      *q->mutable_value() =
          WireRows(DType::kFloat32, 1, 2, 16, RandomValues(step + 5, 32));
      q->set_position(32 + step);
      v1::AttendSessionsResponse response;
      grpc::ClientContext context;
      Route(&context, id);
      // A step landing on the other replica would be NOT_FOUND.
      const grpc::Status st = stub->AttendSessions(&context, r, &response);
      ASSERT_TRUE(st.ok()) << id << " step " << step << ": "
                           << st.error_message();
      EXPECT_EQ(response.results(0).tokens(), 33 + step);
    }
  }
  // Directly on each replica: every session is on exactly one.
  int on_a = 0, on_b = 0;
  for (const std::string& id : ids) {
    const bool in_a = HoldsSession(**a, id), in_b = HoldsSession(**b, id);
    EXPECT_NE(in_a, in_b) << id;
    on_a += in_a;
    on_b += in_b;
  }
  EXPECT_EQ(on_a + on_b, kSessions);
  EXPECT_GT(on_a, 0);
  EXPECT_GT(on_b, 0);
  // And each replica computed exactly its sessions' steps.
  const std::string steps =
      "attnserve_requests_total{code=\"OK\",method=\"AttendSessions\"}";
  EXPECT_EQ(testing::AwaitMetric(**a, steps, on_a * kSteps), on_a * kSteps);
  EXPECT_EQ(testing::AwaitMetric(**b, steps, on_b * kSteps), on_b * kSteps);
  EXPECT_EQ(MetricSample(**a, "attnserve_kv_sessions"), on_a);
  EXPECT_EQ(MetricSample(**b, "attnserve_kv_sessions"), on_b);
}

// A replica that starts draining (SIGTERM) is taken out of rotation at once,
// while it finishes the call it has: its GET /ready says
// "attnserve_serving 0", haproxy's check fails, and every new session lands on
// the other replica.
TEST(E2eSessionRoutingTest, ADrainingReplicaGetsNoNewCalls) {
  auto a = ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
  auto b = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1", "--shutdown_grace=60s"});
  ASSERT_TRUE(a.ok() && b.ok());
  Balancer balancer(**a, **b);
  ASSERT_TRUE(balancer.up()) << balancer.why();
  auto ready = [](const ServerProcess& p) {
    return testing::HttpGet(p.metrics_port(), "/ready");
  };
  ASSERT_TRUE(ready(**b).ok());
  EXPECT_THAT(*ready(**b), ::testing::HasSubstr("\nattnserve_serving 1\n"));

  // A prefill left open on b keeps it draining (not gone) after SIGTERM.
  auto b_stub = v1::SessionService::NewStub((*b)->Channel());
  ASSERT_TRUE(CreateRouted(*b_stub, "held").ok());
  grpc::ClientContext held_context;
  v1::SessionInfo held_info;
  auto held = b_stub->AppendKvStream(&held_context, &held_info);
  v1::AppendKvRequest chunk;
  chunk.set_session_id("held");
  *chunk.mutable_key() =
      WireRows(DType::kFloat32, 4, 2, 16, RandomValues(1, 4 * 32));
  *chunk.mutable_value() =
      WireRows(DType::kFloat32, 4, 2, 16, RandomValues(2, 4 * 32));
  ASSERT_TRUE(held->Write(chunk));
  // Written is not yet received: b must hold the call before it drains, or
  // the call is refused as new.
  const absl::Time received_by = absl::Now() + absl::Seconds(10);
  while (absl::Now() < received_by) {
    auto direct = v1::SessionService::NewStub((*b)->Channel());
    v1::GetSessionRequest r;
    r.set_session_id("held");
    v1::SessionInfo info;
    grpc::ClientContext context;
    if (direct->GetSession(&context, r, &info).ok() &&
        info.layer_tokens(0) == 4) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  (*b)->Kill(SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<std::string> body = ready(**b);
  while (body.ok() && !absl::StrContains(*body, "\nattnserve_serving 0\n") &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    body = ready(**b);
  }
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, ::testing::HasSubstr("\nattnserve_serving 0\n"));
  // haproxy checks every second and takes a replica out after two failures.
  absl::SleepFor(absl::Seconds(4));

  auto stub = v1::SessionService::NewStub(balancer.channel());
  for (int s = 0; s < 16; ++s) {
    const std::string id = absl::StrCat("after-drain-", s);
    const grpc::Status st = CreateRouted(*stub, id);
    ASSERT_TRUE(st.ok()) << id << ": " << st.error_message();
    EXPECT_TRUE(HoldsSession(**a, id)) << id;
  }
  // b finishes what it had, then exits.
  ASSERT_TRUE(held->Write(chunk));
  held->WritesDone();
  const grpc::Status finished = held->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(held_info.layer_tokens(0), 8);
  EXPECT_EQ((*b)->WaitForExit(absl::Seconds(30)).value_or(-1), 0);
}

// One decoding sequence of the rolling-restart test and what it went
// through.
struct Sequence {
  std::string id;
  SessionMirror mirror;
  int retries = 0;
};

// One decode step of `seq` through the balancer. UNAVAILABLE (the replica
// drains, hands the session over, or is gone) is retried until the step is
// taken, for at most 30 s; any other error fails the test. The output is
// checked against the reference.
void DecodeStep(v1::SessionService::Stub& stub, Sequence& seq, int step) {
  const testing::OneTokenStep s = testing::MakeOneTokenStep(
      seq.id, seq.mirror, 4, std::hash<std::string>()(seq.id) + 1000 * step);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  v1::AttendSessionsResponse response;
  grpc::Status st;
  while (true) {
    grpc::ClientContext context;
    Route(&context, seq.id);
    st = stub.AttendSessions(&context, s.request, &response);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE ||
        absl::Now() > give_up) {
      break;
    }
    ++seq.retries;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(st.ok()) << seq.id << " step " << step << ": " << st.error_code()
                       << " " << st.error_message();
  EXPECT_EQ(testing::CheckOneTokenStep(s, response, 1e-5, &seq.mirror), "")
      << seq.id << " step " << step;
}

// A rolling restart of one of two replicas while eight sequences decode: the
// draining replica hands its sessions to its peer (--handoff_to), haproxy's
// stick table follows them there, and every step of every sequence is
// answered as an undisturbed run would: no session lost, none re-created,
// no prefix re-sent. The restarted replica comes back empty and takes new
// sessions.
TEST(E2eSessionRoutingTest, ARollingRestartMovesSessionsAndLosesNoStep) {
  const auto flags = [](int port, int metrics, int peer) {
    return std::vector<std::string>{
        "--workers=1", "--threads_per_worker=1",
        absl::StrCat("--listen=127.0.0.1:", port),
        absl::StrCat("--metrics_listen=127.0.0.1:", metrics),
        absl::StrCat("--handoff_to=127.0.0.1:", peer)};
  };
  // Each replica names the other's port, so the ports are chosen before
  // either starts; one taken meanwhile by another process (a client's
  // outgoing connection) means other ports.
  const auto port_taken = [](const absl::Status& status) {
    return absl::StrContains(status.message(), "cannot listen") ||
           absl::StrContains(status.message(), "cannot serve metrics");
  };
  int a_port = 0, a_metrics = 0, b_port = 0, b_metrics = 0;
  absl::StatusOr<std::unique_ptr<ServerProcess>> a, b;
  for (int attempt = 0; attempt < 5; ++attempt) {
    a_port = FreePort(), a_metrics = FreePort();
    b_port = FreePort(), b_metrics = FreePort();
    a = ServerProcess::Start(flags(a_port, a_metrics, b_port));
    if (!a.ok() && port_taken(a.status())) continue;
    b = ServerProcess::Start(flags(b_port, b_metrics, a_port));
    if (!b.ok() && port_taken(b.status())) continue;
    break;
  }
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  Balancer balancer(**a, **b);
  ASSERT_TRUE(balancer.up()) << balancer.why();
  auto stub = v1::SessionService::NewStub(balancer.channel());

  MirrorShape shape;
  std::vector<Sequence> seqs(8);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& seq = seqs[i];
    seq.id = absl::StrCat("decode-", i);
    seq.mirror = SessionMirror(shape);
    ASSERT_TRUE(CreateRouted(*stub, seq.id).ok());
    const std::vector<float> k = RandomValues(i, 32 * 2 * shape.head_dim);
    const std::vector<float> v = RandomValues(i + 50, 32 * 2 * shape.value_dim);
    v1::AppendKvRequest r;
    r.set_session_id(seq.id);
    r.set_position(0);
    *r.mutable_key() = WireRows(DType::kFloat32, 32, 2, shape.head_dim, k);
    *r.mutable_value() = WireRows(DType::kFloat32, 32, 2, shape.value_dim, v);
    v1::SessionInfo info;
    grpc::ClientContext context;
    Route(&context, seq.id);
    ASSERT_TRUE(stub->AppendKv(&context, r, &info).ok());
    seq.mirror.Append(0, k, v);
  }
  std::vector<std::string> on_a;
  for (const Sequence& seq : seqs) {
    if (HoldsSession(**a, seq.id)) on_a.push_back(seq.id);
  }
  ASSERT_FALSE(on_a.empty()) << "every session hashed to b";

  constexpr int kSteps = 40, kRestartAt = 10;
  const absl::Time drain_start = absl::Now();
  for (int step = 0; step < kSteps; ++step) {
    if (step == kRestartAt) (*a)->Kill(SIGTERM);
    if (step == kRestartAt + 5) {
      // The old a is gone (it exits once its sessions are handed over); a new
      // one takes its place on the same ports, as a rolling update does.
      ASSERT_EQ((*a)->WaitForExit(absl::Seconds(60)).value_or(-1), 0)
          << (*a)->Log();
      EXPECT_THAT((*a)->Log(), ::testing::HasSubstr(absl::StrCat(
                                   "handed ", on_a.size(), " sessions")));
      a = ServerProcess::Start(flags(a_port, a_metrics, b_port));
      ASSERT_TRUE(a.ok()) << a.status();
    }
    for (Sequence& seq : seqs) {
      DecodeStep(*stub, seq, step);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const absl::Duration took = absl::Now() - drain_start;
  // Every sequence now lives on b, the moved ones included, and b imported
  // exactly the moved ones.
  int retries = 0;
  for (const Sequence& seq : seqs) {
    EXPECT_TRUE(HoldsSession(**b, seq.id)) << seq.id;
    EXPECT_FALSE(HoldsSession(**a, seq.id)) << seq.id;
    retries += seq.retries;
  }
  EXPECT_EQ(MetricSample(**b, "attnserve_kv_sessions_imported_total"),
            static_cast<double>(on_a.size()));
  // The restarted replica serves new sessions.
  for (int s = 0; s < 8; ++s) {
    EXPECT_TRUE(CreateRouted(*stub, absl::StrCat("after-", s)).ok());
  }
  std::printf(
      "rolling restart: %zu of %zu sequences moved, 0 lost, 0 re-prefilled, "
      "%d steps retried, %d steps in %s\n",
      on_a.size(), seqs.size(), retries, kSteps,
      absl::FormatDuration(took).c_str());
}

}  // namespace
}  // namespace attnserve
