#ifndef ATTNSERVE_CLIENT_INFO_H_
#define ATTNSERVE_CLIENT_INFO_H_

// attnctl info: AttentionService/GetServerInfo against every target.

#include <ostream>
#include <string>

#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/exit_codes.h"

namespace attnserve::client {

// Every field of `info`, one "name: value" line each, in the proto's order,
// then "models: N" and for each model "  NAME: d_model D, heads Hq/Hkv,
// head_dim hd" and "    config: {...}" (the config JSON on one line).
std::string FormatServerInfo(const v1::ServerInfo& info);

// Prints each target's ServerInfo to `out` (preceded by "target: <target>"
// when there are several). RPC errors go to `err` as "error: <CODE>:
// <message>" (prefixed with the target when there are several) and give
// kExitRpcFailed; kExitFileError when the CA file cannot be read.
ExitCode RunInfo(const ConnectionOptions& connection, std::ostream& out,
                 std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_INFO_H_
