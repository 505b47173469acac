// The coverage-guided fuzz target of everything a client's bytes reach before
// compute: native AttendRequest decoding with the engine's Validate (and the
// run of what decodes), hosted-model ModelRequests, the Open Inference
// Protocol's ModelInferRequest conversion, and every session message. Byte 0
// picks the message family, the rest is one serialized message
// (fuzz_input.h), held to the promise of codec_checks.h. A broken promise
// aborts with its description, which libFuzzer reports as a crash and saves.
//
// One target for all families rather than one per family: they share the
// wire/ decoders, core's Validate and the limits, so one build and one link
// serve them all, and libFuzzer spends a run's fixed time on whichever family
// still finds new coverage instead of an even split decided in advance. The
// family byte costs a little: a mutation of byte 0 reinterprets the rest as
// another message, which mostly fails to parse, cheaply.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::StatusOr<attnserve::fuzz::Verdict> verdict =
      attnserve::fuzz::RunInput(data, size);
  if (!verdict.ok()) {
    std::fprintf(stderr, "attnserve_fuzz: broken promise: %s\n",
                 verdict.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
