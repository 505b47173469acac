#ifndef ATTNSERVE_SERVER_CALL_STAGES_H_
#define ATTNSERVE_SERVER_CALL_STAGES_H_

// The stage times of one computed call, for benchmarks
// (ServiceOptions::observe_stages): where a call's time on the server goes.

#include "absl/time/time.h"

namespace attnserve::server {

// When one computed call passed each stage, for benchmarks
// (ServiceOptions::observe_stages).
struct CallStages {
  // The handler was called (gRPC has parsed the request).
  absl::Time received;
  // Decoded, checked and reserved; handed to the scheduler.
  absl::Time submitted;
  // Taken by a worker, or run inline: compute starts.
  absl::Time started;
  // The response's tensors are filled.
  absl::Time computed;
  // The answer (timing, metrics, the reactor's Finish) has been handed back.
  absl::Time answered;
  // Calls in the engine run (1 = alone).
  int batch_size = 1;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_CALL_STAGES_H_
