#include "base/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "base/file.h"

namespace attnserve::base {

std::optional<int64_t> MemoryLimitFromCgroup(absl::string_view text) {
  const absl::string_view value = absl::StripAsciiWhitespace(text);
  int64_t bytes = 0;
  if (value == "max" || !absl::SimpleAtoi(value, &bytes) || bytes <= 0 ||
      bytes > (int64_t{1} << 62)) {
    return std::nullopt;
  }
  return bytes;
}

int64_t AvailableMemoryBytes() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page_size = sysconf(_SC_PAGE_SIZE);
  int64_t bytes =
      pages > 0 && page_size > 0 ? pages * page_size : (int64_t{1} << 62);
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    absl::StatusOr<std::string> text = ReadFile(path, 4096);
    if (!text.ok()) continue;
    if (std::optional<int64_t> limit = MemoryLimitFromCgroup(*text)) {
      bytes = std::min(bytes, *limit);
      break;
    }
  }
  return bytes;
}

}  // namespace attnserve::base
