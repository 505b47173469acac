#ifndef ATTNSERVE_CLIENT_LOAD_BENCH_REPORT_H_
#define ATTNSERVE_CLIENT_LOAD_BENCH_REPORT_H_

// attnctl bench's final report: a table for people, CSV and JSON for
// scripts (docs/attnctl.md documents every column and key).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/load/latency_histogram.h"
#include "client/load/load_tally.h"

namespace attnserve::client {

enum class OutputFormat { kTable, kCsv, kJson };

// "table", "csv" or "json".
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text);

struct LevelReport {
  // The level's closed-loop concurrency, or its open-loop rate (req/s).
  int concurrency = 0;
  double rate = 0;
  LoadResult result;
};

struct BenchReport {
  bool open_loop = false;
  // "constant" or "poisson" (open loop).
  std::string arrival;
  bool stream = false;
  // Unary Attend calls whose request is larger than one piece go in pieces
  // (AttendPieces), as attnserve's clients send them.
  bool pieces = false;
  // The load was Open Inference Protocol ModelInfer calls (--protocol v2).
  bool v2 = false;
  // The hosted model called (AttendModel/AttendModelStream); empty = Attend.
  std::string model;
  std::vector<std::string> targets;
  int connections_per_target = 1;
  // The count was --connections=auto's choice (ConnectionsFor).
  bool connections_auto = false;
  absl::Duration warmup;
  absl::Duration duration;
  // "f32 q [1, 8, 128, 64] k [...] v [...]; causal top_left", for people.
  std::string request_text;
  // The serialized request message, and the FLOPs of one request as the
  // server counted them (Timing.flops; every request of a run is the same
  // message; 0 when no answer was OK).
  int64_t request_bytes = 0;
  double request_flops = 0;
  std::vector<LevelReport> levels;
  // The round trips of the first calls of new connections (--new_connections);
  // empty = none made.
  LatencyHistogram first_calls;
};

// The first calls' p50 over the first level's p50 (0 when either is empty).
double FirstCallRatio(const BenchReport& report);

// What one level (or the sum of all levels) comes to.
struct LevelFigures {
  int64_t requests = 0;
  int64_t ok = 0;
  double throughput_rps = 0;
  double gflops = 0;
  double mb_per_s = 0;
};
LevelFigures Figures(const BenchReport& report, const LoadResult& result);

// Every level's results added up (histograms merged, elapsed summed).
LoadResult Total(const BenchReport& report);

// OK requests per target (the pool's channel i went to target i % targets).
std::vector<int64_t> OkPerTarget(const BenchReport& report,
                                 const LoadResult& result);

std::string FormatReport(const BenchReport& report, OutputFormat format);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_BENCH_REPORT_H_
