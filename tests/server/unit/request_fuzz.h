#ifndef ATTNSERVE_TESTS_SERVER_REQUEST_FUZZ_H_
#define ATTNSERVE_TESTS_SERVER_REQUEST_FUZZ_H_

#include <cstdint>

namespace attnserve::server {

// What LLVMFuzzerTestOneInput did with its inputs so far, so a driver can tell
// whether its mutations still reach validation and compute. Not thread-safe.
struct RequestFuzzCounts {
  uint64_t inputs = 0;
  uint64_t parsed = 0;  // parsed as an AttendRequest
  uint64_t rejected =
      0;  // DecodeRequest said INVALID_ARGUMENT/RESOURCE_EXHAUSTED
  uint64_t computed = 0;           // decoded and run by the engine
  uint64_t computed_nonempty = 0;  // of those, with at least one q·k product
};
const RequestFuzzCounts& RequestFuzzCountsSoFar();

}  // namespace attnserve::server

#endif  // ATTNSERVE_TESTS_SERVER_REQUEST_FUZZ_H_
