#ifndef ATTNSERVE_CLIENT_LOAD_BENCH_H_
#define ATTNSERVE_CLIENT_LOAD_BENCH_H_

// attnctl bench: load-tests one server or several (round-robin) with random
// requests of a given shape (Attend, or a hosted model's AttendModel), closed
// loop or open loop, one level or a sweep, and reports throughput and latency
// percentiles as a table, CSV or JSON.

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/connection.h"
#include "client/exit_codes.h"
#include "client/load/bench_report.h"
#include "client/load/load_generator.h"
#include "client/request_builder.h"

namespace attnserve::client {

inline constexpr int kMaxNewConnections = 1000;

struct BenchOptions {
  ConnectionOptions connection;
  // The random request every call sends.
  RequestSpec spec;
  // When model.name is set, AttendModel (or AttendModelStream) calls of that
  // model instead, built as infer builds them from spec.random's batch,
  // q_len, dtype and seed and spec.call's mask, weights and output dtype.
  // Every target must host the model with the same config.
  ModelSpec model;
  // Closed-loop levels (default {1}), run in order; ignored with `rates`.
  std::vector<int> concurrency = {1};
  // Open-loop levels in requests per second; empty (default) = closed loop.
  std::vector<double> rates;
  Arrival arrival = Arrival::kConstant;
  // Stream messages (AttendStream, AttendModelStream, ModelStreamInfer)
  // instead of unary calls (default off).
  bool stream = false;
  // kV2: the same requests as the Open Inference Protocol's ModelInfer calls
  // (ModelStreamInfer messages with `stream`) of model "attention", or the
  // hosted model, raw contents, so that the two protocols can be compared on
  // one server. Default kNative.
  Protocol protocol = Protocol::kNative;
  // Before each level, and its measurement window (defaults 1 s and 5 s).
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration duration = absl::Seconds(5);
  // Attend tensors through one shared-memory region (client/shared_memory.h)
  // registered once before the load: the calls carry references, and every
  // call writes its output into the same span of the region (the bench does
  // not read it). One target; Attend calls, native (Attend, AttendStream) or
  // v2 (ModelInfer, ModelStreamInfer). Default off.
  bool shared_memory = false;
  // TCP connections per target, or kAutoConnections (the default):
  // ConnectionsFor the largest concurrency level (open loop:
  // max_outstanding).
  int connections = kAutoConnections;
  // Open loop: most requests outstanding (default 1024).
  int max_outstanding = 1024;
  // After the levels, this many calls each on a new connection of its own
  // (client/load/first_calls.h), reported against the first level's p50.
  // Closed-loop unary native Attend calls only, 0 to kMaxNewConnections;
  // default 0 (none).
  int new_connections = 0;
  OutputFormat format = OutputFormat::kTable;
  // When set, the report in `format` goes to this file and a table to `out`;
  // otherwise the report goes to `out`.
  std::string output_file;
  // A live progress line on `err`, rewritten about once a second (default
  // off; attnctl turns it on when stderr is a terminal).
  bool progress = false;
};

// Checks every target (GetServerInfo: reachable, hosting the model, the
// request within its limits), runs the levels and writes the report. Returns
// kExitUsage for options that cannot make a request, kExitRpcFailed when a
// target does not answer, does not host the model (the server's NOT_FOUND) or
// hosts another config of it, a request is refused up front, or any measured
// request failed (the report is written first), kExitFileError when the
// report cannot be written, else kExitOk.
ExitCode RunBench(const BenchOptions& options, std::ostream& out,
                  std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_BENCH_H_
