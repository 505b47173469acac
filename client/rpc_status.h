#ifndef ATTNSERVE_CLIENT_RPC_STATUS_H_
#define ATTNSERVE_CLIENT_RPC_STATUS_H_

// How attnctl names a failed RPC's status.

#include <string>

#include "grpcpp/support/status.h"

namespace attnserve::client {

// "UNAVAILABLE", "INVALID_ARGUMENT", ...
std::string StatusCodeName(grpc::StatusCode code);

// "error: <CODE_NAME>: <message>", the line attnctl prints for a failed RPC.
std::string RpcErrorLine(const grpc::Status& status);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_RPC_STATUS_H_
