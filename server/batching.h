#ifndef ATTNSERVE_SERVER_BATCHING_H_
#define ATTNSERVE_SERVER_BATCHING_H_

// Dynamic batching of Attend requests (docs/architecture.md, "Dynamic
// batching"): which decoded requests may share one engine run, and that run.
// The scheduler decides when a batch forms (server/scheduler.h); this file
// decides what may be in one and computes it.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "server/request_codec.h"

namespace attnserve::server {

// The key under which a decoded Attend request may share an engine run;
// requests of equal keys are compatible, "" = never batched. Compatible
// requests use no shared memory (server/shared_memory_codec.h), have the
// softmax method, no explicit mask tensor and no
// block-sparse layout, dense query/key/value, a kernel other than decode
// (whose key split depends on the batch's size), and equal: layout, dtype,
// output dtype, return_weights, requested and chosen kernel, Hq, Hkv, Lq, Lk,
// D, Dv, scale (given or default), causal and its alignment, window sides,
// ALiBi slopes (their values) and whether key_lengths are given. Only the
// batch size B may differ.
std::string AttendBatchKey(const DecodedRequest& decoded);

// One request of a batched run.
struct BatchedAttend {
  const DecodedRequest* decoded = nullptr;
  v1::AttendResponse* response = nullptr;
};

// What a batched run of `members` holds beyond the members' own requests and
// responses (their inputs gathered, and the batch's output and weights): the
// bytes it reserves in the memory budget.
int64_t AttendBatchBytes(absl::Span<const BatchedAttend> members);

// Computes `members` (at least one, equal non-empty AttendBatchKey) in one
// engine run: their inputs (and key_lengths) concatenated along the batch
// axis, one Run, then each member's rows of the output (and weights) copied
// into its response, which PrepareResponse sizes. Each member's rows are
// computed exactly as a run of its own would compute them (the kernels treat
// every batch row alone), so the results are bit-identical. The engine's
// errors; on error the responses are unspecified.
absl::Status RunAttendBatch(absl::Span<const BatchedAttend> members,
                            AttentionEngine& engine);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_BATCHING_H_
