#ifndef ATTNSERVE_CLIENT_CLI_FLAG_PARSER_H_
#define ATTNSERVE_CLIENT_CLI_FLAG_PARSER_H_

// Per-subcommand flag parsing for attnctl. Every ABSL_FLAG of a binary is
// global, so absl::ParseCommandLine would let `attnctl health --batch=3`
// through and exits with 1 on a bad flag; this parser accepts only the flags a
// subcommand lists and reports problems as a Status (attnctl exits with 2).

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace attnserve::client {

struct ParsedFlags {
  // --help (or -h) was given; nothing else was parsed.
  bool help = false;
  // The flags named on the command line (without "no"), e.g. {"batch"}.
  std::set<std::string, std::less<>> specified;

  bool Specified(absl::string_view name) const {
    return specified.find(name) != specified.end();
  }
};

// Parses `args` (the arguments after the subcommand name) into the registered
// absl flags named in `allowed`. Accepted forms, with one or two dashes:
// --name=value, --name value (not for bool flags), --name and --noname (bool
// flags). InvalidArgument, naming the argument, for a flag not in `allowed`,
// a value its flag does not parse, a missing value, or a positional argument.
// Flags parsed before an error keep their new values.
absl::StatusOr<ParsedFlags> ParseFlags(
    absl::Span<char* const> args, absl::Span<const absl::string_view> allowed);

// Help text for the flags `names`, in that order: "  --name=<default>" and the
// flag's help on the next line.
std::string FlagsHelp(absl::Span<const absl::string_view> names);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CLI_FLAG_PARSER_H_
