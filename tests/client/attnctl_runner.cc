#include "tests/client/attnctl_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#ifndef ATTNSERVE_ATTNCTL_BINARY
#error "ATTNSERVE_ATTNCTL_BINARY must name the attnctl binary"
#endif

extern char** environ;

namespace attnserve::testing {
namespace {

// A temporary file, removed when this goes out of scope.
class TempFile {
 public:
  TempFile() {
    path_ = ::testing::TempDir() + "attnctl_output_XXXXXX";
    const int fd = mkstemp(path_.data());
    if (fd >= 0) close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  std::string Read() const {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    return contents.str();
  }

 private:
  std::string path_;
};

}  // namespace

CommandResult RunAttnctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv_strings = {ATTNSERVE_ATTNCTL_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  TempFile out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.path().c_str(),
                                   O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.path().c_str(),
                                   O_WRONLY | O_TRUNC, 0);
  CommandResult result;
  pid_t pid;
  const int spawned =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    result.err = absl::StrCat("posix_spawn failed with error ", spawned);
    return result;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.out = out.Read();
  result.err = err.Read();
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else {
    absl::StrAppend(&result.err, "\n[attnctl killed by signal ",
                    WTERMSIG(status), "]");
  }
  return result;
}

std::string Describe(const CommandResult& r) {
  return absl::StrCat("exit ", r.exit_code, "\nstdout:\n", r.out, "\nstderr:\n",
                      r.err);
}

nlohmann::json ParseJson(const CommandResult& r) {
  nlohmann::json j =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << Describe(r);
  return j;
}

}  // namespace attnserve::testing
