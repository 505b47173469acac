#ifndef ATTNSERVE_SERVER_BATCHING_H_
#define ATTNSERVE_SERVER_BATCHING_H_

// Dynamic batching of Attend requests (docs/operations.md, "Small requests and
// batching"): which decoded requests may share one engine run, and that run.
// The scheduler decides when a batch forms (server/scheduler.h); the engine
// runs the members' plans as one item list (AttentionEngine::RunBatch), each
// into its own response.

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "server/request_codec.h"

namespace attnserve::server {

// The key under which a decoded Attend request may share an engine run;
// "" = never batched. Every request planned for the flash or materialized
// kernel that uses no shared memory (server/shared_memory_codec.h: its
// regions are checked after its own kernel) has the same key, whatever its
// shape, dtypes and mask: the engine computes each member as its own run
// would, on any number of threads. Decode, linear and LSH plans, whose
// results depend on the thread count, run alone.
std::string AttendBatchKey(const DecodedRequest& decoded);

// One request of a batched run.
struct BatchedAttend {
  const DecodedRequest* decoded = nullptr;
  v1::AttendResponse* response = nullptr;
};

// Computes `members` (non-empty AttendBatchKey) in one engine run
// (AttentionEngine::RunBatch): each member's output (and weights) written
// straight into its response, which PrepareResponse sizes, bit-identical to
// a run of its own. The engine's errors, naming the member ("calls[2]: ...");
// on error the responses are unspecified.
absl::Status RunAttendBatch(absl::Span<const BatchedAttend> members,
                            AttentionEngine& engine);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_BATCHING_H_
