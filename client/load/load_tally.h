#ifndef ATTNSERVE_CLIENT_LOAD_LOAD_TALLY_H_
#define ATTNSERVE_CLIENT_LOAD_LOAD_TALLY_H_

// What a load-test level measured (LoadResult), and the thread-safe tally the
// load generator's completion callbacks add to (LoadTally).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/load/latency_histogram.h"

namespace attnserve::client {

struct ErrorCount {
  int64_t count = 0;
  // The message of the first error with this code.
  std::string first_message;
};

struct LoadResult {
  // Measured requests: those scheduled inside the measurement window. Every
  // one is awaited, so requests == ok + the sum of the error counts.
  int64_t requests = 0;
  int64_t ok = 0;
  // By gRPC status code name ("UNAVAILABLE", ...); stream messages answered
  // with an error count under their own code; "RESPONSE_MISMATCH" counts OK
  // responses whose output does not have the expected size.
  std::map<std::string, ErrorCount> errors;
  // Bytes of the OK requests' answers (serialized messages).
  int64_t response_bytes = 0;
  // The sum of the OK answers' Timing.flops: the server's own count of the
  // work, so the client never recomputes a FLOPs formula.
  double server_flops = 0;
  // OK requests per channel of the pool, in the pool's order.
  std::vector<int64_t> ok_per_channel;
  // Client-side latency of the OK requests, from the scheduled send time.
  LatencyHistogram latency;
  // The server's Timing of the OK requests.
  LatencyHistogram server_queue;
  LatencyHistogram server_compute;
  // From the first measured request's scheduled send time to the last
  // measured completion (zero when nothing was measured).
  absl::Duration elapsed;
  // Open loop: measured sends that left more than 1 ms after their scheduled
  // time (the client or --max_outstanding held them back).
  int64_t late_sends = 0;
  // Set when the level ended before its duration (every stream failed).
  std::string stopped_early;

  int64_t error_total() const;
  double throughput_rps() const;
};

class LoadTally {
 public:
  explicit LoadTally(int channels);

  // One measured request: `scheduled` is its scheduled send time, `done` when
  // its answer arrived; the server's times and FLOPs come from its Timing.
  void RecordOk(int channel, absl::Time scheduled, absl::Time done,
                absl::Duration server_queue, absl::Duration server_compute,
                double server_flops, int64_t response_bytes);
  void RecordError(const std::string& code, const std::string& message,
                   absl::Time scheduled, absl::Time done);
  void RecordLateSend();
  void StopEarly(const std::string& reason);

  // A copy of everything so far (for the progress line and the report).
  LoadResult Snapshot() const;

 private:
  void Span(absl::Time scheduled, absl::Time done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  LoadResult result_ ABSL_GUARDED_BY(mu_);
  absl::Time first_scheduled_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time last_done_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_LOAD_TALLY_H_
