#ifndef ATTNSERVE_BASE_MALLOC_POLICY_H_
#define ATTNSERVE_BASE_MALLOC_POLICY_H_

// The heap settings of the attnserve and attnctl processes (glibc mallopt),
// and the heap warm-up the server's workers run under them.

#include <cstdint>

#include "absl/status/status.h"

namespace attnserve::base {

// To be applied at the top of main, before any thread starts:
// - freed memory stays in the process: blocks under 32 MiB come from the heap
//   (M_MMAP_THRESHOLD), which is not trimmed below 1 GiB free (M_TRIM_
//   THRESHOLD) and grows 64 MiB at a time (M_TOP_PAD), so multi-MB request
//   and response buffers are reused instead of page-faulted back in on every
//   call; the resident size stays near its peak;
// - in at most two heaps (M_ARENA_MAX) unless the operator set the count
//   (MALLOC_ARENA_MAX, or glibc.malloc.arena_max in GLIBC_TUNABLES). glibc's
//   default of 8 heaps per core lets each of gRPC's and the scheduler's
//   threads fill a heap of its own, and a buffer freed into one heap is not
//   reused by a thread allocating from another: kept memory then grows with
//   the number of heaps, slowly, like a leak (docs/operations.md, "Threads and
//   memory").
// Fails, naming the settings not applied, if the allocator refuses one
// (ASan's refuses them all).
absl::Status ApplyMallocPolicy();

// Allocates `bytes` of the calling thread's heap in 1 MiB pieces (below the
// mmap threshold, so they come from the heap), writes one byte per page and
// frees them. Under ApplyMallocPolicy the pages stay resident, and later
// buffers up to that size are carved from them without page faults. One call
// at a time in the process: concurrent calls would each take fresh pages of
// a shared heap where one after the other reuse them.
void TouchHeap(int64_t bytes);

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_MALLOC_POLICY_H_
