#ifndef ATTNSERVE_CLIENT_LOAD_BENCH_LEVELS_H_
#define ATTNSERVE_CLIENT_LOAD_BENCH_LEVELS_H_

// The load levels of attnctl bench: "--concurrency 1:64:x2", "--rate 100".

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::client {

inline constexpr int kMaxLevels = 64;

// Parses `text` for the flag `flag`:
//   "N"              one level
//   "A,B,C"          these levels, in this order
//   "START:END"      START, START+1, ..., END
//   "START:END:STEP" START, START+STEP, ... up to END
//   "START:END:xF"   START, START*F, START*F*F, ... up to END (F > 1)
// Every level must be > 0 (and a whole number when `integer`); END >= START;
// at most kMaxLevels levels. InvalidArgument naming the flag otherwise.
absl::StatusOr<std::vector<double>> ParseLevels(absl::string_view flag,
                                                absl::string_view text,
                                                bool integer);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_BENCH_LEVELS_H_
