// The seeded driver's target (request_fuzz_main.cc): any bytes that parse as
// an AttendRequest must either be rejected with INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED, or decode into views the engine accepts and computes
// (fuzz::CheckAttendRequest, which the libFuzzer target in tests/fuzz/ calls
// too).

#include "tests/server/unit/request_fuzz.h"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "google/protobuf/stubs/logging.h"
#include "server/request_codec.h"
#include "tests/fuzz/codec_checks.h"

namespace attnserve::server {
namespace {

RequestFuzzCounts g_counts;

// Small enough that every accepted request computes in milliseconds, even under
// ASan.
constexpr int64_t kMaxResponseBytes = int64_t{1} << 20;
constexpr double kMaxFlops = 1e8;

AttentionEngine& Engine() {
  static AttentionEngine* const engine = [] {
    // Invalid UTF-8 in request_id is logged on every parse; the log is noise
    // here.
    google::protobuf::SetLogHandler(nullptr);
    EngineOptions options;
    options.num_threads = 1;
    auto created = AttentionEngine::Create(options);
    if (!created.ok()) {
      std::fprintf(stderr, "request_fuzz: %s\n",
                   created.status().ToString().c_str());
      std::abort();
    }
    return created->release();
  }();
  return *engine;
}

void FuzzOneRequest(const uint8_t* data, size_t size) {
  AttentionEngine& engine = Engine();
  ++g_counts.inputs;
  if (size > static_cast<size_t>(INT_MAX)) return;
  v1::AttendRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  ++g_counts.parsed;

  RequestLimits limits;
  limits.max_response_bytes = kMaxResponseBytes;
  v1::AttendResponse response;
  const absl::StatusOr<fuzz::Verdict> verdict =
      fuzz::CheckAttendRequest(request, engine, limits, kMaxFlops, &response);
  if (!verdict.ok()) {
    std::fprintf(stderr, "request_fuzz: %s\n",
                 verdict.status().ToString().c_str());
    std::abort();
  }
  switch (verdict->outcome) {
    case fuzz::Outcome::kRefused:
      ++g_counts.rejected;
      break;
    case fuzz::Outcome::kUnparsed:
    case fuzz::Outcome::kDecoded:
      break;
    case fuzz::Outcome::kComputed:
      ++g_counts.computed;
      if (verdict->flops > 0) ++g_counts.computed_nonempty;
      break;
  }
}

}  // namespace

const RequestFuzzCounts& RequestFuzzCountsSoFar() { return g_counts; }

}  // namespace attnserve::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnserve::server::FuzzOneRequest(data, size);
  return 0;
}
