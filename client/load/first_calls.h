#ifndef ATTNSERVE_CLIENT_LOAD_FIRST_CALLS_H_
#define ATTNSERVE_CLIENT_LOAD_FIRST_CALLS_H_

// attnctl bench --new_connections: the first Attend call of new connections.
// Each call goes on a connection of its own, opened and connected just before
// it (the connecting is not timed), as attnctl infer makes its one call (in
// pieces when the request is larger than one), so that the report can set a
// new connection's first call against the warm calls of the load.

#include <cstdint>

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/load/latency_histogram.h"

namespace attnserve::client {

// `count` calls of `request`, call i on a new connection to target
// i % targets; their round trips. The first call that fails,
// or answers other than `expected_output_bytes` of output, ends it with its
// error (the RPC's status code, or Internal), naming the call.
absl::StatusOr<LatencyHistogram> TimeFirstCalls(
    const ConnectionOptions& connection, const v1::AttendRequest& request,
    int count, int64_t expected_output_bytes);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_FIRST_CALLS_H_
