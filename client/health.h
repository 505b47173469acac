#ifndef ATTNSERVE_CLIENT_HEALTH_H_
#define ATTNSERVE_CLIENT_HEALTH_H_

// attnctl health: grpc.health.v1.Health/Check against every target.

#include <ostream>
#include <string>

#include "client/connection.h"
#include "client/exit_codes.h"

namespace attnserve::client {

// Asks each target for the health of `service` ("" = the server as a whole)
// and prints its status ("SERVING", "NOT_SERVING", ...) to `out`, prefixed
// with the target when there are several. RPC errors go to `err` as
// "error: <CODE>: <message>". kExitOk only when every target is SERVING, else
// kExitRpcFailed; kExitFileError when the CA file cannot be read.
ExitCode RunHealth(const ConnectionOptions& connection,
                   const std::string& service, std::ostream& out,
                   std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEALTH_H_
