#ifndef ATTNSERVE_TESTS_SERVER_E2E_SERVER_FIXTURE_H_
#define ATTNSERVE_TESTS_SERVER_E2E_SERVER_FIXTURE_H_

// The start-up the server's end-to-end suites share: a real attnserve process
// (tests/util/server_process.h) with the suite's or the test's flags, and
// channels to it.
//
// A suite whose tests share one server starts it in its SetUpTestSuite, and
// the base's TearDownTestSuite stops it:
//
//   class AttendE2eTest : public ServerTest {
//    protected:
//     static void SetUpTestSuite() { StartSuiteServer({"--workers=1"}); }
//   };
//
// When that server does not start, each of the suite's tests fails in SetUp
// with the reason (a failure inside SetUpTestSuite would only skip them). A
// test that needs a server of its own (its flags, or a server it stops)
// calls StartServer instead; that one is stopped at the end of the test.

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/util/server_process.h"

namespace attnserve::testing {

class ServerTest : public ::testing::Test {
 protected:
  // From a suite's SetUpTestSuite: starts the server its tests share, with
  // `args` as ServerProcess::Start takes them.
  static void StartSuiteServer(std::vector<std::string> args);
  // Stops the suite's server. A suite with a TearDownTestSuite of its own
  // calls StopSuiteServer from it.
  static void StopSuiteServer();
  static void TearDownTestSuite() { StopSuiteServer(); }

  // Fails the test when the suite's server was started and did not come up.
  // A suite that overrides SetUp calls it first:
  // ASSERT_NO_FATAL_FAILURE(ServerTest::SetUp()).
  void SetUp() override;

  // Starts a server for this test alone (a fatal failure when it does not
  // start); server() and channel() are that one from then on.
  void StartServer(std::vector<std::string> args);

  // The test's own server when it started one, else the suite's.
  ServerProcess& server() const;
  // A new channel to server() (ServerProcess::Channel).
  std::shared_ptr<grpc::Channel> channel() const { return server().Channel(); }

 private:
  // The running suite's server, or why it did not start: GoogleTest runs one
  // suite at a time. Pointers, so that nothing is destroyed at exit.
  static ServerProcess* suite_server_;
  static std::string* suite_error_;
  std::unique_ptr<ServerProcess> own_server_;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_SERVER_E2E_SERVER_FIXTURE_H_
