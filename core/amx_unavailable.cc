// The AMX products where no CPU has AMX (every architecture but x86-64):
// AmxUsable() is false, so the flash kernel never calls the others, which
// abort if they are ever reached.

#include <cstdio>
#include <cstdlib>

#include "core/amx_products.h"

namespace attnserve {
namespace {

[[noreturn]] void Unreachable(const char* function) {
  std::fprintf(stderr, "%s: no AMX on this architecture\n", function);
  std::abort();
}

}  // namespace

bool AmxUsable() { return false; }

void AmxPackKeys(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {
  Unreachable(__func__);
}

void AmxPackValues(const uint16_t*, int64_t, int64_t, int64_t, uint16_t*) {
  Unreachable(__func__);
}

void AmxScores(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t,
               int64_t, float*, int64_t, AmxInterleave*) {
  Unreachable(__func__);
}

void AmxAccumulate(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t,
                   int64_t, int64_t, float*, int64_t, AmxInterleave*) {
  Unreachable(__func__);
}

}  // namespace attnserve
