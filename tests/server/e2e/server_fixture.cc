#include "tests/server/e2e/server_fixture.h"

#include <utility>

namespace attnserve::testing {

ServerProcess* ServerTest::suite_server_ = nullptr;
std::string* ServerTest::suite_error_ = nullptr;

void ServerTest::StartSuiteServer(std::vector<std::string> args) {
  StopSuiteServer();
  auto server = ServerProcess::Start(std::move(args));
  if (server.ok()) {
    suite_server_ = server->release();
  } else {
    suite_error_ = new std::string(server.status().ToString());
  }
}

void ServerTest::StopSuiteServer() {
  delete suite_server_;
  suite_server_ = nullptr;
  delete suite_error_;
  suite_error_ = nullptr;
}

void ServerTest::SetUp() {
  if (suite_error_ != nullptr) {
    FAIL() << "the suite's server did not start: " << *suite_error_;
  }
}

void ServerTest::StartServer(std::vector<std::string> args) {
  auto server = ServerProcess::Start(std::move(args));
  ASSERT_TRUE(server.ok()) << server.status();
  own_server_ = *std::move(server);
}

ServerProcess& ServerTest::server() const {
  return own_server_ != nullptr ? *own_server_ : *suite_server_;
}

}  // namespace attnserve::testing
