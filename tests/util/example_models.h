#ifndef ATTNSERVE_TESTS_UTIL_EXAMPLE_MODELS_H_
#define ATTNSERVE_TESTS_UTIL_EXAMPLE_MODELS_H_

// Runs examples/make_model_repository as a user (and `make run`) runs it.

#include <string>

namespace attnserve::testing {

struct ScriptRun {
  // -1 when the script could not be run or was killed.
  int exit_code = -1;
  // stdout and stderr together.
  std::string output;
};

// `python3 examples/make_model_repository DIR` with whichever python3 is
// first on PATH.
ScriptRun MakeExampleModels(const std::string& dir);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_EXAMPLE_MODELS_H_
