#include "server/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>

namespace attnserve::server {

absl::Status ApplyMallocPolicy() {
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 ||
      mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1 ||
      mallopt(M_TOP_PAD, 64 << 20) != 1) {
    return absl::InternalError("mallopt refused the heap thresholds");
  }
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr &&
      mallopt(M_ARENA_MAX, 2) != 1) {
    return absl::InternalError("mallopt refused M_ARENA_MAX");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
