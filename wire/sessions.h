#ifndef ATTNSERVE_WIRE_SESSIONS_H_
#define ATTNSERVE_WIRE_SESSIONS_H_

// The session messages (attnserve/v1/sessions.proto) as the KV-cache store's
// and the engine's types, and back: a session's shape and info, a TTL, an
// append's key and value, an AttendSessionsRequest checked field by field.
// Views borrow from the message. Errors name the message's fields; the store's
// errors about one part of a call are spelled with that part's field path
// here too (SpellStoreError), so that only this codec knows proto field names.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnserve/v1/sessions.pb.h"
#include "core/paged.h"
#include "core/tensor.h"
#include "kvcache/session_store.h"

namespace attnserve::wire {

// Sessions in one AttendSessions call at most.
inline constexpr int kMaxSessionsPerCall = 4096;

// The wire shape (value_dim 0 = head_dim, unspecified dtype = FLOAT32) as the
// store's. InvalidArgument naming "shape.storage_dtype" for BOOL, INT32 or
// unknown values; the store checks the ranges.
absl::StatusOr<kvcache::SessionShape> DecodeShape(const v1::SessionShape& wire);
void EncodeInfo(const kvcache::SessionInfo& info, v1::SessionInfo* wire);

// A wire ttl_ms as a duration: InvalidArgument for a negative value.
absl::StatusOr<absl::Duration> DecodeTtl(int64_t ttl_ms);

// An AppendKvRequest's key and value as views into it. InvalidArgument naming
// the field for a missing tensor, a non-float dtype or data that does not
// match its shape; the store checks the shape against the session's.
struct DecodedAppend {
  TensorView key;
  TensorView value;
};
absl::StatusOr<DecodedAppend> DecodeAppend(const v1::AppendKvRequest& request);

// An AttendSessionsRequest checked field by field, with everything the engine
// checks that needs no session (the first query's Hq in [1,
// kMaxPagedQueryHeads], none or Hq finite ALiBi slopes), so that nothing is
// refused after the appends; views borrow from it.
struct DecodedSessionsRequest {
  int layer = 0;
  std::vector<kvcache::AttendPart> parts;
  std::vector<TensorView> queries;  // [Lnew, Hq, D], wire dtypes
  PagedCallOptions options;
  bool return_weights = false;
  bool return_weight_stats = false;
  DType output_dtype = DType::kFloat32;
};
absl::StatusOr<DecodedSessionsRequest> DecodeAttendSessions(
    const v1::AttendSessionsRequest& request);

// "sessions[i].": where the fields of the call's part i are.
std::string PartField(int part);
// A store error that concerns one part (kvcache::FailedPart), its message
// prefixed with that part's PartField; other errors as they are.
absl::Status SpellStoreError(const absl::Status& status);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_SESSIONS_H_
