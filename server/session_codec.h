#ifndef ATTNSERVE_SERVER_SESSION_CODEC_H_
#define ATTNSERVE_SERVER_SESSION_CODEC_H_

// SessionService's calls short of gRPC: a decoded AttendSessionsRequest
// (wire/sessions.h) planned against the KV-cache store, admitted against the
// server's limits, committed, and turned into the paged engine call (the
// queries converted to the storage dtype when it differs); the other session
// calls applied to the store.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnserve/v1/sessions.pb.h"
#include "core/paged.h"
#include "core/tensor.h"
#include "kvcache/session_store.h"
#include "server/request_codec.h"
#include "wire/sessions.h"

namespace attnserve::server {

// The checks that need each session's shape and tokens, made before anything
// is appended: the sessions share num_kv_heads, head_dim, value_dim and
// storage dtype; each query is [Lnew, Hq, head_dim] with one Hq for all, a
// multiple of num_kv_heads; the response fits limits.max_response_bytes and
// the work limits.max_flops.
struct SessionsAdmission {
  double flops = 0;            // the call's dense FLOPs
  int64_t response_bytes = 0;  // its outputs (and weights)
};
absl::StatusOr<SessionsAdmission> AdmitSessions(
    const wire::DecodedSessionsRequest& decoded,
    absl::Span<const kvcache::PartPlan> plans, const RequestLimits& limits);

// What the engine run needs, owned: converted queries (when the storage dtype
// differs from the wire's) and the block pointers, pinned.
struct SessionsCall {
  // The request's decoded form: its views and mask parts outlive the run.
  std::shared_ptr<const wire::DecodedSessionsRequest> decoded;
  std::vector<kvcache::PinnedPart> pinned;
  std::vector<std::vector<char>> converted_queries;
  std::vector<PagedSequence> sequences;
  PagedAttentionInputs inputs;
  double flops = 0;
};

// Sets each result's output (and weights) tensors in `response` and builds
// the engine's inputs over them. `decoded` and `response` must outlive the
// returned call, which must not be moved once built (sequences point into
// it).
void PrepareSessionsCall(const wire::DecodedSessionsRequest& decoded,
                         std::vector<kvcache::PinnedPart> pinned,
                         int block_tokens, v1::AttendSessionsResponse* response,
                         SessionsCall* call);

// SessionService's calls without gRPC, as the service runs them: decode the
// request, apply it to `store`, encode the session into `response`. The
// returned status is the call's (the store's and the codec's codes and
// messages); `response` is filled only when it is OK.
absl::Status ApplyCreateSession(const v1::CreateSessionRequest& request,
                                kvcache::SessionStore& store,
                                v1::SessionInfo* response);
absl::Status ApplyAppendKv(const v1::AppendKvRequest& request,
                           kvcache::SessionStore& store,
                           v1::SessionInfo* response);
absl::Status ApplyForkSession(const v1::ForkSessionRequest& request,
                              kvcache::SessionStore& store,
                              v1::SessionInfo* response);
absl::Status ApplyTruncateSession(const v1::TruncateSessionRequest& request,
                                  kvcache::SessionStore& store,
                                  v1::SessionInfo* response);
absl::Status ApplyCloseSession(const v1::CloseSessionRequest& request,
                               kvcache::SessionStore& store,
                               v1::SessionInfo* response);
absl::Status ApplyGetSession(const v1::GetSessionRequest& request,
                             kvcache::SessionStore& store,
                             v1::SessionInfo* response);

// AttendSessions up to the engine run, in the order the service runs its
// steps on receipt: DecodeAttendSessions; PlanSessions (the store's checks,
// nothing appended); AdmitSessions (limits); the service's memory budget;
// CommitSessions (the appends and the pins, then PrepareSessionsCall into
// `response` with the call's flops). A refusal before the commit leaves no
// trace in the store. `decoded`'s request and `response` must outlive the call.
absl::StatusOr<kvcache::SessionStore::AppendPlan> PlanSessions(
    const wire::DecodedSessionsRequest& decoded, kvcache::SessionStore& store);
absl::StatusOr<std::shared_ptr<SessionsCall>> CommitSessions(
    std::shared_ptr<const wire::DecodedSessionsRequest> decoded,
    kvcache::SessionStore::AppendPlan plan, const SessionsAdmission& admission,
    kvcache::SessionStore& store, v1::AttendSessionsResponse* response);

// Those steps without a memory budget (tests and the fuzz target).
absl::StatusOr<std::shared_ptr<SessionsCall>> PrepareAttendSessions(
    const v1::AttendSessionsRequest& request, kvcache::SessionStore& store,
    const RequestLimits& limits, v1::AttendSessionsResponse* response);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_CODEC_H_
