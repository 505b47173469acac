#ifndef ATTNSERVE_BASE_MEMORY_LIMIT_H_
#define ATTNSERVE_BASE_MEMORY_LIMIT_H_

// How much memory this process may use: the physical memory, capped by the
// cgroup memory limit a container runtime sets (the limit a process is killed
// at, which it cannot see in the machine's memory size).

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace attnserve::base {

// The smaller of the physical memory and the cgroup memory limit (v2
// /sys/fs/cgroup/memory.max, else v1 memory/memory.limit_in_bytes), in bytes.
// Files it cannot read count as no limit. Thread-safe.
int64_t AvailableMemoryBytes();

// The limit in a cgroup `memory.max` / `memory.limit_in_bytes` text, in
// bytes; nullopt for "max", malformed text or values beyond 2^62 (v1's "no
// limit" is a huge number). Exposed for tests.
std::optional<int64_t> MemoryLimitFromCgroup(absl::string_view text);

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_MEMORY_LIMIT_H_
