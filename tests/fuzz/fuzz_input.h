#ifndef ATTNSERVE_TESTS_FUZZ_FUZZ_INPUT_H_
#define ATTNSERVE_TESTS_FUZZ_FUZZ_INPUT_H_

// What an input of the libFuzzer target (fuzz_target.cc) means, shared with
// the corpus generator (make_corpus.cc), so that its seeds are valid, and
// with the replay tool (replay.cc):
//
//   byte 0        bits 0-6: the message family, modulo kFamilyCount;
//                 bit 7: the session store evicts (--kv_eviction=lru)
//   bytes 1..     one serialized message of that family
//
// Every input starts from the same state: the model registry of
// fuzz::SmallModels(kModelSeed), and a fresh session store made by
// MakeSessionStore holding the sessions described there.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kvcache/session_store.h"
#include "tests/fuzz/codec_checks.h"

namespace attnserve::fuzz {

enum class Family : uint8_t {
  kAttend = 0,          // v1::AttendRequest
  kModel = 1,           // v1::ModelRequest
  kInfer = 2,           // inference::ModelInferRequest
  kAttendSessions = 3,  // v1::AttendSessionsRequest
  kCreateSession = 4,   // v1::CreateSessionRequest
  kAppendKv = 5,        // v1::AppendKvRequest
  kForkSession = 6,     // v1::ForkSessionRequest
  kTruncateSession = 7,
  kCloseSession = 8,
  kGetSession = 9,
  kImportSessions = 10,  // v1::SessionTransferChunk
  kAttendPieces = 11,    // v1::RequestPiece (its data cut into many pieces)
};
inline constexpr int kFamilyCount = 12;

inline constexpr uint64_t kModelSeed = 20261201;

// Byte 0 of an input.
inline uint8_t HeaderByte(Family family, bool evict) {
  return static_cast<uint8_t>(static_cast<uint8_t>(family) |
                              (evict ? 0x80 : 0));
}
inline Family FamilyOf(uint8_t header) {
  return static_cast<Family>((header & 0x7f) % kFamilyCount);
}

// The store's options: blocks of kBlockTokens, a budget of kBudgetBytes (a
// few blocks beyond the sessions below, so that appends run out of it).
inline constexpr int kBlockTokens = 4;
inline constexpr int64_t kBudgetBytes = 4096;

// The sessions every input finds, all of kNumLayers layers:
//   "a"  FLOAT32, 2 kv heads, head_dim = value_dim = 8, max_tokens 64;
//        layer 0 holds 6 tokens, layer 1 holds 3
//   "b"  as "a" but BFLOAT16; layer 0 holds 5 tokens
//   "c"  a fork of "a" (its blocks shared, copy-on-write)
//   "d"  FLOAT16, 1 kv head, head_dim 4, value_dim 6, max_tokens 16; empty
// Their keys and values are seeded, in [-1, 1).
inline constexpr int kNumLayers = 2;
inline constexpr int kHeadsAB = 2, kDimAB = 8;
inline constexpr int kHeadsD = 1, kHeadDimD = 4, kValueDimD = 6;

absl::StatusOr<std::unique_ptr<kvcache::SessionStore>> MakeSessionStore(
    bool evict);

// Runs one input as the libFuzzer target does: parses the message of its
// family (kUnparsed when it does not parse, or is empty) and holds it to
// codec_checks.h's promise, with response bytes at most 256 KiB and 1e6 FLOPs
// (every decoded request computes in well under a millisecond, even under
// ASan). A session family's message runs against a fresh MakeSessionStore,
// which must give back every block once its sessions close. Internal names a
// broken promise. Not thread-safe.
absl::StatusOr<Verdict> RunInput(const uint8_t* data, size_t size);

}  // namespace attnserve::fuzz

#endif  // ATTNSERVE_TESTS_FUZZ_FUZZ_INPUT_H_
