#ifndef ATTNSERVE_TESTS_CLIENT_ATTNCTL_RUNNER_H_
#define ATTNSERVE_TESTS_CLIENT_ATTNCTL_RUNNER_H_

// Runs the real attnctl binary as a subprocess and captures what it prints.

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace attnserve::testing {

struct CommandResult {
  // The exit code; -1 when the process could not be started or was killed by
  // a signal (then `err` says which).
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `attnctl args...` to completion.
CommandResult RunAttnctl(const std::vector<std::string>& args);

// "exit N", stdout and stderr, for failure messages.
std::string Describe(const CommandResult& r);

// stdout as JSON; a test failure (and a discarded value) when it is not.
nlohmann::json ParseJson(const CommandResult& r);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_CLIENT_ATTNCTL_RUNNER_H_
