#ifndef ATTNSERVE_CLIENT_CLI_SUBCOMMANDS_H_
#define ATTNSERVE_CLIENT_CLI_SUBCOMMANDS_H_

// The entry points of attnctl's subcommands. Each takes the arguments after
// the subcommand's name, reads its flags and returns the process exit code.

#include "absl/types/span.h"

namespace attnserve::client {

int HealthMain(absl::Span<char* const> args);
int InfoMain(absl::Span<char* const> args);
int InferMain(absl::Span<char* const> args);
int HeatmapMain(absl::Span<char* const> args);
int BenchMain(absl::Span<char* const> args);
int SessionMain(absl::Span<char* const> args);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CLI_SUBCOMMANDS_H_
