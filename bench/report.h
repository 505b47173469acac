#ifndef ATTNSERVE_BENCH_REPORT_H_
#define ATTNSERVE_BENCH_REPORT_H_

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace attnserve::bench {

// One result line: a case, a summary or the run information. Fields keep the
// order they were set in.
using Json = nlohmann::ordered_json;

// Prints records as JSON lines (one object per line) or as table rows, and
// flushes after each so progress shows while the benchmark runs.
class Reporter {
 public:
  explicit Reporter(bool json) : json_(json) {}

  // `r` is a "run_info" record, a "summary_*" record or a case record (see
  // docs/benchmarks.md for the fields).
  void Emit(const Json& r);

 private:
  bool json_;
  bool summary_header_ = false;
};

}  // namespace attnserve::bench

#endif  // ATTNSERVE_BENCH_REPORT_H_
