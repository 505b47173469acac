#ifndef ATTNSERVE_TESTS_FUZZ_CODEC_CHECKS_H_
#define ATTNSERVE_TESTS_FUZZ_CODEC_CHECKS_H_

// The server's promise for any message a client can send, checked on one
// message at a time: it is refused with one of the codes its call documents
// and a message saying why, or it decodes into inputs that the engine (or the
// hosted layer) runs without error, with responses of the sizes decoded. The
// one home of that check: the libFuzzer target (tests/fuzz/fuzz_target.cc),
// the seeded request driver (tests/server/unit/request_fuzz.cc) and the seeded
// model and session suites (tests/server/unit/*_fuzz_test.cc) all call it.
//
// Each Check* returns what became of the message, or Internal naming the
// broken promise (a bug in the server code, never in the message). Not
// thread-safe: the callers fuzz on one thread.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "attnserve/v1/sessions.pb.h"
#include "core/attention.h"
#include "inference/grpc_predict_v2.pb.h"
#include "kvcache/session_store.h"
#include "model/model_repository.h"
#include "server/kserve/infer_codec.h"
#include "server/model_registry.h"
#include "server/request_codec.h"

namespace attnserve::fuzz {

enum class Outcome {
  kUnparsed,  // not a message of its family (only protobuf was tested)
  kRefused,   // a documented code and a message
  kDecoded,   // decoded, but above the caller's compute bound: not run
  kComputed,  // decoded and computed
};

struct Verdict {
  Outcome outcome = Outcome::kRefused;
  // Of a decoded message: the FLOPs its response reports.
  double flops = 0;
  // Of a refused one: why.
  absl::Status refusal;
};

// AttendRequest: DecodeRequest refuses with INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED, or decodes into a response payload within
// limits.max_response_bytes that PrepareResponse sizes exactly and the
// engine computes into `response` — when its FLOPs are at most
// `max_compute_flops`.
absl::StatusOr<Verdict> CheckAttendRequest(const v1::AttendRequest& request,
                                           AttentionEngine& engine,
                                           const server::RequestLimits& limits,
                                           double max_compute_flops,
                                           v1::AttendResponse* response);

// ModelRequest: DecodeModelRequest refuses with INVALID_ARGUMENT, NOT_FOUND or
// RESOURCE_EXHAUSTED, or the hosted layer computes what it decoded into
// `response` (sized as decoded).
absl::StatusOr<Verdict> CheckModelRequest(const v1::ModelRequest& request,
                                          const server::ModelRegistry& registry,
                                          AttentionEngine& engine,
                                          const server::RequestLimits& limits,
                                          v1::AttendResponse* response);

// ModelInferRequest (the Open Inference Protocol), as InferenceService takes
// it: kserve::FindModel (NOT_FOUND), kserve::ToNative (INVALID_ARGUMENT),
// then the native request through CheckAttendRequest or CheckModelRequest
// and, once computed, ToInferResponse with one output per one asked for.
// Moves the raw contents out of `request`.
absl::StatusOr<Verdict> CheckInferRequest(
    inference::ModelInferRequest& request,
    const std::vector<server::kserve::ModelInterface>& interfaces,
    const server::ModelRegistry& registry, AttentionEngine& engine,
    const server::RequestLimits& limits, double max_compute_flops);

// AttendSessionsRequest: PrepareAttendSessions refuses with INVALID_ARGUMENT,
// NOT_FOUND, OUT_OF_RANGE or RESOURCE_EXHAUSTED, or RunPaged computes the
// call into `response`, one result per session (it may not refuse: the keys
// and values are appended by then); the store stays within its budget either
// way.
absl::StatusOr<Verdict> CheckAttendSessions(
    const v1::AttendSessionsRequest& request, kvcache::SessionStore& store,
    AttentionEngine& engine, const server::RequestLimits& limits,
    v1::AttendSessionsResponse* response);

// The calls answered with a SessionInfo (Create, AppendKv, Fork, Truncate,
// Close, Get): refused with a code the store documents and a message, or
// answered with the session named in the request (or, for an empty create id,
// a fresh one) and layer tokens within its max_tokens; the store stays within
// its budget.
absl::StatusOr<Verdict> CheckCreateSession(
    const v1::CreateSessionRequest& request, kvcache::SessionStore& store);
absl::StatusOr<Verdict> CheckAppendKv(const v1::AppendKvRequest& request,
                                      kvcache::SessionStore& store);
absl::StatusOr<Verdict> CheckForkSession(const v1::ForkSessionRequest& request,
                                         kvcache::SessionStore& store);
absl::StatusOr<Verdict> CheckTruncateSession(
    const v1::TruncateSessionRequest& request, kvcache::SessionStore& store);
absl::StatusOr<Verdict> CheckCloseSession(
    const v1::CloseSessionRequest& request, kvcache::SessionStore& store);
absl::StatusOr<Verdict> CheckGetSession(const v1::GetSessionRequest& request,
                                        kvcache::SessionStore& store);

// SessionTransferChunk (ImportSessions): its data read as snapshots and
// imported, as the server does; a refusal carries a documented code and a
// message; every session imported reads back (Export) into the same bytes
// its snapshot had.
absl::StatusOr<Verdict> CheckImportSessions(
    const v1::SessionTransferChunk& chunk, kvcache::SessionStore& store);

// RequestPiece (AttendPieces): its data sent as one piece and again cut into
// pieces of 1 to 7 bytes (request_bytes in the first only) give the same
// answer: refused by RequestPieces with INVALID_ARGUMENT, or the request
// protobuf parses from the data, checked as CheckAttendRequest checks it.
absl::StatusOr<Verdict> CheckAttendPieces(const v1::RequestPiece& piece,
                                          AttentionEngine& engine,
                                          const server::RequestLimits& limits,
                                          double max_compute_flops,
                                          v1::AttendResponse* response);

// Ends every session of `store` and checks that its blocks were all given
// back (used bytes 0): the accounting of whatever the calls before did.
absl::Status CheckStoreEmptiesOnClose(kvcache::SessionStore& store);

// Three small hosted layers with seeded weights, covering the layer's kinds:
// "dot" (d_model 16, 2 heads of 8, dot-product, bias), "additive" (d_model 12,
// 4 query and 2 kv heads of 4, additive scoring of dim 5, RoPE, pre-norm),
// "general" (d_model 8, 2 query heads and 1 kv head of 6, general scoring,
// sinusoidal positions, no norm or bias, bf16 weights).
model::RepositoryContents SmallModels(uint64_t seed);

}  // namespace attnserve::fuzz

#endif  // ATTNSERVE_TESTS_FUZZ_CODEC_CHECKS_H_
