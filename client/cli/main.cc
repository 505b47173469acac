// attnctl: the command-line client of attnserve. Dispatches to a subcommand;
// flags are read only in the subcommands' entry files.

#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "base/malloc_policy.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/subcommands.h"
#include "client/exit_codes.h"

namespace {

using attnserve::client::ExitCodesHelp;
using attnserve::client::FlagsHelp;

struct Subcommand {
  const char* name;
  const char* summary;
  int (*main)(absl::Span<char* const> args);
};

constexpr Subcommand kSubcommands[] = {
    {"health", "check a server's health (grpc.health.v1)",
     attnserve::client::HealthMain},
    {"info", "print a server's version, ISA, workers, limits and models",
     attnserve::client::InfoMain},
    {"infer",
     "one attention call with random or .npy inputs, checked on request",
     attnserve::client::InferMain},
    {"heatmap",
     "the weights of a small call as a PNG or text, one panel per head",
     attnserve::client::HeatmapMain},
    {"bench", "load test: closed or open loop, sweeps, percentiles, CSV/JSON",
     attnserve::client::BenchMain},
    {"session",
     "KV-cache sessions: create, append, step, info, fork, truncate, close",
     attnserve::client::SessionMain},
};

std::string Usage() {
  std::string text =
      "attnctl: the command-line client of attnserve (attention over gRPC).\n"
      "\n"
      "usage: attnctl <subcommand> [flags]\n"
      "       attnctl <subcommand> --help   (that subcommand's flags)\n"
      "\n"
      "subcommands:\n";
  for (const Subcommand& sub : kSubcommands) {
    absl::StrAppendFormat(&text, "  %-8s %s\n", sub.name, sub.summary);
  }
  absl::StrAppend(&text, "\nconnection flags (every subcommand):\n",
                  FlagsHelp(attnserve::client::ConnectionFlagGroup().names),
                  "\nexit codes:\n", ExitCodesHelp());
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  // The server's heap settings: the MB-sized buffers of requests and answers
  // are reused instead of faulted in again, and gRPC's threads share two
  // heaps, so a new connection's calls find warm memory (docs/benchmarks.md,
  // "A new connection's first call"). Only a sanitizer's allocator refuses
  // them, and it keeps a heap of its own anyway.
  attnserve::base::ApplyMallocPolicy().IgnoreError();
  const absl::Span<char* const> args(argv, static_cast<size_t>(argc));
  if (argc < 2) {
    std::cerr << Usage();
    return attnserve::client::kExitUsage;
  }
  const std::string command = args[1];
  if (command == "--help" || command == "-help" || command == "-h" ||
      command == "help") {
    if (command == "help" && argc > 2) {
      // "attnctl help infer" is "attnctl infer --help".
      for (const Subcommand& sub : kSubcommands) {
        if (args[2] == std::string(sub.name)) {
          char help[] = "--help";
          char* help_args[] = {help};
          return sub.main(absl::MakeConstSpan(help_args));
        }
      }
    } else {
      std::cout << Usage();
      return attnserve::client::kExitOk;
    }
  }
  for (const Subcommand& sub : kSubcommands) {
    if (command == sub.name) return sub.main(args.subspan(2));
  }
  const std::string unknown = command == "help" ? args[2] : command;
  if (unknown[0] == '-') {
    std::cerr << "error: \"" << unknown
              << "\" comes before a subcommand; flags go after it: attnctl "
                 "<subcommand> [flags]\n";
    return attnserve::client::kExitUsage;
  }
  std::cerr << "error: unknown subcommand \"" << unknown
            << "\" (attnctl --help lists them)\n";
  return attnserve::client::kExitUsage;
}
