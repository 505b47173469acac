#ifndef ATTNSERVE_SERVER_MALLOC_POLICY_H_
#define ATTNSERVE_SERVER_MALLOC_POLICY_H_

#include "absl/status/status.h"

namespace attnserve::server {

// The heap settings of the attnserve process (glibc mallopt), to be applied
// at the top of main, before any thread starts:
// - freed memory stays in the process: blocks under 32 MiB come from the heap
//   (M_MMAP_THRESHOLD), which is not trimmed below 1 GiB free (M_TRIM_
//   THRESHOLD) and grows 64 MiB at a time (M_TOP_PAD), so multi-MB request
//   and response buffers are reused instead of page-faulted back in on every
//   call; the resident size stays near its peak;
// - in at most two heaps (M_ARENA_MAX) unless MALLOC_ARENA_MAX is set. glibc's
//   default of 8 heaps per core lets each of gRPC's and the scheduler's
//   threads fill a heap of its own, and a buffer freed into one heap is not
//   reused by a thread allocating from another: kept memory then grows with
//   the number of heaps, slowly, like a leak (docs/operations.md, "Threads and
//   memory").
// Fails if the allocator refuses a setting (ASan's refuses them all).
absl::Status ApplyMallocPolicy();

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_MALLOC_POLICY_H_
