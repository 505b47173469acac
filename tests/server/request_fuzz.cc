// Fuzz target for request parsing, validation and compute: any bytes that parse
// as an AttendRequest must either be rejected with INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED, or decode into views the engine accepts and computes.
// Built with libFuzzer (clang -fsanitize=fuzzer) or with request_fuzz_main.cc's
// seeded driver.

#include "tests/server/request_fuzz.h"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "google/protobuf/stubs/logging.h"
#include "server/request_codec.h"

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

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "request_fuzz: %s: %s\n", what,
               status.ToString().c_str());
  std::abort();
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
  absl::StatusOr<DecodedRequest> decoded =
      DecodeRequest(request, engine, limits);
  if (!decoded.ok()) {
    const absl::StatusCode code = decoded.status().code();
    // No registry here: a shared-memory reference is refused as the server
    // without --shared_memory refuses it.
    const bool shared_memory_off =
        code == absl::StatusCode::kFailedPrecondition &&
        absl::StrContains(decoded.status().message(), "--shared_memory");
    if (code != absl::StatusCode::kInvalidArgument &&
        code != absl::StatusCode::kResourceExhausted && !shared_memory_off) {
      Fail("DecodeRequest returned an unexpected code", decoded.status());
    }
    if (decoded.status().message().empty()) {
      Fail("DecodeRequest returned an empty message", decoded.status());
    }
    ++g_counts.rejected;
    return;
  }
  if (decoded->response_payload_bytes > kMaxResponseBytes) {
    Fail("response_payload_bytes exceeds the limit", absl::OkStatus());
  }
  if (decoded->shape.flops > kMaxFlops) return;

  v1::AttendResponse response;
  const AttentionOutputs outputs = PrepareResponse(*decoded, &response);
  const int64_t prepared = static_cast<int64_t>(
      response.output().data().size() + response.weights().data().size());
  if (prepared != decoded->response_payload_bytes) {
    Fail("PrepareResponse size differs from response_payload_bytes",
         absl::OkStatus());
  }
  // A request that decoded is one the engine must compute.
  const absl::Status run = engine.Run(decoded->inputs, outputs);
  if (!run.ok()) Fail("Run failed on a decoded request", run);
  ++g_counts.computed;
  if (decoded->shape.flops > 0) ++g_counts.computed_nonempty;
}

}  // namespace

const RequestFuzzCounts& RequestFuzzCountsSoFar() { return g_counts; }

}  // namespace attnserve::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnserve::server::FuzzOneRequest(data, size);
  return 0;
}
