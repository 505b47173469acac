#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/subcommands.h"
#include "client/health.h"

ABSL_FLAG(std::string, service, "",
          "service to ask about; empty = the server as a whole (also "
          "attnserve.v1.AttentionService)");

namespace attnserve::client {

int HealthMain(absl::Span<char* const> args) {
  const std::vector<FlagGroup> groups = {{"health", {"service"}},
                                         ConnectionFlagGroup()};
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "health", parsed.status());
  if (parsed->help) {
    std::cout << SubcommandHelp(
        "attnctl health [flags]",
        "Asks grpc.health.v1.Health/Check and prints SERVING, NOT_SERVING, "
        "...\nExits with 0 only when every target is SERVING.",
        groups);
    return kExitOk;
  }
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "health", connection.status());
  }
  return RunHealth(*connection, absl::GetFlag(FLAGS_service), std::cout,
                   std::cerr);
}

}  // namespace attnserve::client
