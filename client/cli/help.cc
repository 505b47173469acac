#include "client/cli/help.h"

#include "absl/strings/str_cat.h"
#include "client/cli/flag_parser.h"

namespace attnserve::client {

std::vector<absl::string_view> FlagNames(const std::vector<FlagGroup>& groups) {
  std::vector<absl::string_view> names;
  for (const FlagGroup& group : groups) {
    names.insert(names.end(), group.names.begin(), group.names.end());
  }
  return names;
}

std::string SubcommandHelp(absl::string_view usage,
                           absl::string_view description,
                           const std::vector<FlagGroup>& groups) {
  std::string text = absl::StrCat("usage: ", usage, "\n\n", description, "\n");
  for (const FlagGroup& group : groups) {
    absl::StrAppend(&text, "\n", group.title, " flags:\n",
                    FlagsHelp(group.names));
  }
  absl::StrAppend(&text, "\nexit codes:\n", ExitCodesHelp());
  return text;
}

absl::string_view ExitCodesHelp() {
  return "  0  ok\n"
         "  1  an RPC failed (\"error: <CODE_NAME>: <message>\"), or health "
         "is\n     not SERVING\n"
         "  2  usage error: unknown flag, bad flag value, flags that do not "
         "go\n     together\n"
         "  3  infer --check: results differ from the reference beyond the\n"
         "     tolerance\n"
         "  4  file error: a file cannot be read or written, or a .npy file "
         "is\n     malformed or holds an unusable dtype\n";
}

ExitCode UsageError(std::ostream& err, absl::string_view subcommand,
                    const absl::Status& status) {
  err << "error: " << status.message() << "\n"
      << "(attnctl " << subcommand << " --help lists its flags)\n";
  return kExitUsage;
}

}  // namespace attnserve::client
