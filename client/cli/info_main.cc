#include <iostream>

#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/subcommands.h"
#include "client/info.h"

namespace attnserve::client {

int InfoMain(absl::Span<char* const> args) {
  const std::vector<FlagGroup> groups = {ConnectionFlagGroup()};
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "info", parsed.status());
  if (parsed->help) {
    std::cout << SubcommandHelp(
        "attnctl info [flags]",
        "Prints the server's version, oneDNN version, ISA, workers and "
        "limits\n(AttentionService/GetServerInfo), one \"key: value\" line "
        "each, then its\nhosted models: name, sizes and config JSON.",
        groups);
    return kExitOk;
  }
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "info", connection.status());
  }
  return RunInfo(*connection, std::cout, std::cerr);
}

}  // namespace attnserve::client
