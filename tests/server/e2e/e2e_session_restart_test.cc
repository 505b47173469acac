// Sessions kept across a restart of one server (--session_snapshot_dir): a
// real server drains on SIGTERM and writes its sessions to the directory, a
// new process restores them and the sequences continue where they were; a
// damaged snapshot file is set aside and the server starts and serves the
// rest.

#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"
#include "tests/util/session_mirror.h"
#include "tests/util/temp_dir.h"

namespace attnserve {
namespace {

using ::attnserve::testing::MirrorShape;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::SessionMirror;
using ::attnserve::testing::TempDir;
using ::attnserve::testing::WireShape;
using ::testing::HasSubstr;

// The files of `dir` whose names end with `suffix`.
std::vector<std::string> Files(const std::string& dir,
                               const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (absl::EndsWith(e.path().string(), suffix)) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

struct Sequence {
  std::string id;
  SessionMirror mirror;
};

void Create(v1::SessionService::Stub& stub, Sequence& seq) {
  v1::CreateSessionRequest r;
  r.set_session_id(seq.id);
  *r.mutable_shape() = WireShape(seq.mirror.shape());
  v1::SessionInfo info;
  grpc::ClientContext context;
  ASSERT_TRUE(stub.CreateSession(&context, r, &info).ok());
}

// A step appending one token, checked against the mirror.
void Step(v1::SessionService::Stub& stub, Sequence& seq, uint64_t seed) {
  const testing::OneTokenStep step =
      testing::MakeOneTokenStep(seq.id, seq.mirror, 4, seed);
  v1::AttendSessionsResponse response;
  grpc::ClientContext context;
  const grpc::Status st =
      stub.AttendSessions(&context, step.request, &response);
  ASSERT_TRUE(st.ok()) << seq.id << ": " << st.error_message();
  const double tolerance =
      seq.mirror.shape().dtype == DType::kFloat32 ? 1e-5 : 2e-3;
  EXPECT_EQ(testing::CheckOneTokenStep(step, response, tolerance, &seq.mirror),
            "")
      << seq.id;
}

TEST(E2eSessionRestartTest, SessionsKeptInADirectoryContinueAfterARestart) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::vector<std::string> flags = {
      "--workers=1", "--threads_per_worker=1",
      "--session_snapshot_dir=" + dir.path()};
  std::vector<Sequence> seqs;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt8}) {
    MirrorShape shape;
    shape.dtype = dtype;
    seqs.push_back(
        {absl::StrCat("kept-", DTypeName(dtype)), SessionMirror(shape)});
  }
  {
    auto first = ServerProcess::Start(flags);
    ASSERT_TRUE(first.ok()) << first.status();
    auto stub = v1::SessionService::NewStub((*first)->Channel());
    for (Sequence& seq : seqs) {
      Create(*stub, seq);
      for (int t = 0; t < 20; ++t) Step(*stub, seq, 100 * t);
    }
    (*first)->Kill(SIGTERM);
    ASSERT_EQ((*first)->WaitForExit(absl::Seconds(30)).value_or(-1), 0);
    EXPECT_THAT((*first)->Log(), HasSubstr("kept 3 sessions"));
  }
  ASSERT_EQ(Files(dir.path(), ".snap").size(), 1u);
  // A damaged file beside it, older by name: set aside, the rest restored.
  dir.Write("sessions-0.snap", "these bytes are not a snapshot");

  auto second = ServerProcess::Start(flags);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT((*second)->Log(), HasSubstr("restored 3 sessions"));
  EXPECT_THAT((*second)->Log(),
              HasSubstr("session snapshot refused: " + dir.path() +
                        "/sessions-0.snap (renamed"));
  EXPECT_TRUE(Files(dir.path(), ".snap").empty());
  EXPECT_EQ(Files(dir.path(), ".snap.bad").size(), 1u);
  auto stub = v1::SessionService::NewStub((*second)->Channel());
  for (Sequence& seq : seqs) {
    for (int t = 20; t < 25; ++t) Step(*stub, seq, 100 * t);
  }
  EXPECT_EQ(
      testing::MetricSample(**second, "attnserve_kv_sessions_imported_total"),
      3);
}

}  // namespace
}  // namespace attnserve
