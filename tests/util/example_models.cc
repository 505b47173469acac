#include "tests/util/example_models.h"

#include <stdio.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"

#ifndef ATTNSERVE_MAKE_MODEL_REPOSITORY
#error "ATTNSERVE_MAKE_MODEL_REPOSITORY must name the example script"
#endif

namespace attnserve::testing {

ScriptRun MakeExampleModels(const std::string& dir) {
  const std::string command =
      absl::StrCat("/usr/bin/env python3 '", ATTNSERVE_MAKE_MODEL_REPOSITORY,
                   "' '", dir, "' 2>&1");
  ScriptRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    run.output = "popen failed";
    return run;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace attnserve::testing
