#include "base/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve::base {

absl::Status ApplyMallocPolicy() {
  std::string refused;
  const auto set = [&refused](int option, int value, const char* name) {
    if (mallopt(option, value) != 1) {
      absl::StrAppend(&refused, refused.empty() ? "" : ", ", name);
    }
  };
  set(M_MMAP_THRESHOLD, 32 << 20, "M_MMAP_THRESHOLD");
  set(M_TRIM_THRESHOLD, 1 << 30, "M_TRIM_THRESHOLD");
  set(M_TOP_PAD, 64 << 20, "M_TOP_PAD");
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr &&
      (tunables == nullptr ||
       std::strstr(tunables, "glibc.malloc.arena_max") == nullptr)) {
    set(M_ARENA_MAX, 2, "M_ARENA_MAX");
  }
  if (!refused.empty()) {
    return absl::InternalError(
        absl::StrCat("the allocator refused mallopt ", refused));
  }
  return absl::OkStatus();
}

void TouchHeap(int64_t bytes) {
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  constexpr size_t kPiece = size_t{1} << 20;
  constexpr size_t kPage = 4096;
  std::vector<std::unique_ptr<char[]>> pieces;
  for (int64_t left = bytes; left > 0; left -= static_cast<int64_t>(kPiece)) {
    pieces.emplace_back(new char[kPiece]);
    volatile char* piece = pieces.back().get();
    for (size_t i = 0; i < kPiece; i += kPage) piece[i] = 0;
  }
}

}  // namespace attnserve::base
