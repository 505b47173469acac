#ifndef ATTNSERVE_WIRE_ATTEND_CALL_H_
#define ATTNSERVE_WIRE_ATTEND_CALL_H_

// One Attend call as attnserve's clients make it (attnctl, the benchmarks,
// the tests): a request that fits in one piece (kRequestPieceBytes) goes as
// one message (Attend), a larger one
// in pieces (AttendPieces), so that the server admits it against its memory
// budget before the rest is sent and no message passes the server's
// --max_message_bytes.

#include <cstddef>

#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace attnserve::wire {

grpc::Status CallAttend(v1::AttentionService::StubInterface& stub,
                        grpc::ClientContext* context,
                        const v1::AttendRequest& request,
                        v1::AttendResponse* response);

// The piece of the serialized request `request_bytes` that starts at `at`
// (at most kRequestPieceBytes; the first also announces the size).
v1::RequestPiece PieceAt(absl::string_view request_bytes, size_t at);

// An Attend call in pieces whatever the size, of a request already
// serialized (`request_bytes`, not empty).
grpc::Status CallAttendInPieces(v1::AttentionService::StubInterface& stub,
                                grpc::ClientContext* context,
                                absl::string_view request_bytes,
                                v1::AttendResponse* response);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_ATTEND_CALL_H_
