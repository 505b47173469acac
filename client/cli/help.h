#ifndef ATTNSERVE_CLIENT_CLI_HELP_H_
#define ATTNSERVE_CLIENT_CLI_HELP_H_

// Help and usage-error text shared by attnctl's subcommands.

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/exit_codes.h"

namespace attnserve::client {

// A titled list of flag names, e.g. {"connection", {"target", "timeout"}}.
struct FlagGroup {
  absl::string_view title;
  std::vector<absl::string_view> names;
};

// Every name of `groups`, in order.
std::vector<absl::string_view> FlagNames(const std::vector<FlagGroup>& groups);

// "usage: <usage>\n\n<description>\n\n<title> flags:\n  --name=<default>..."
// followed by the exit codes.
std::string SubcommandHelp(absl::string_view usage,
                           absl::string_view description,
                           const std::vector<FlagGroup>& groups);

// The table of exit codes, one "  N  meaning" line each.
absl::string_view ExitCodesHelp();

// Prints "error: <message>" and where to find the flags of `subcommand` to
// `err`; returns kExitUsage.
ExitCode UsageError(std::ostream& err, absl::string_view subcommand,
                    const absl::Status& status);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CLI_HELP_H_
