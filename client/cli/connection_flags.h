#ifndef ATTNSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_
#define ATTNSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_

// The connection flags every attnctl subcommand takes (part of the attnctl
// binary, not of the library: only entry files read flags).

#include "absl/status/statusor.h"
#include "client/cli/help.h"
#include "client/connection.h"

namespace attnserve::client {

// --target, --timeout, --tls, --ca, --token, --max_message_bytes.
FlagGroup ConnectionFlagGroup();

// The options those flags hold; InvalidArgument (a usage error) for values
// ValidateConnectionOptions rejects or a malformed --target list.
absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags();

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CLI_CONNECTION_FLAGS_H_
