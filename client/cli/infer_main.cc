#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/request_flags.h"
#include "client/cli/subcommands.h"
#include "client/infer.h"

ABSL_FLAG(std::string, out, "",
          "write the output here as .npy (bf16 as '<u2' bits)");
ABSL_FLAG(std::string, weights_out, "",
          "write the weights here as .npy (implies --return_weights)");
ABSL_FLAG(bool, shm, false,
          "send query, key and value through a POSIX shared-memory region and "
          "take the output back through it (same host; the server runs with "
          "--shared_memory)");
ABSL_FLAG(bool, check, false,
          "recompute with the reference and compare: tolerance "
          "1e-5*(1+|ref|) for f32, 2e-2*(1+|ref|) with bf16/f16; exit 3 "
          "beyond it");

namespace attnserve::client {

int InferMain(absl::Span<char* const> args) {
  const FlagGroup random = RandomInputFlagGroup();
  const std::vector<FlagGroup> groups = {
      {"input and output",
       {"q", "k", "v", "mask", "out", "weights_out", "check", "shm",
        "protocol"}},
      random,
      CallFlagGroup(),
      VariantFlagGroup(),
      ModelFlagGroup(),
      ConnectionFlagGroup()};
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "infer", parsed.status());
  if (parsed->help) {
    std::cout << SubcommandHelp(
        "attnctl infer [flags]",
        "Sends one Attend call with random inputs of the given shape, or "
        "with\n--q/--k/--v .npy files, and prints the shapes, the server's "
        "and the\nclient's timing and a summary of the results. With "
        "--model NAME, one\nAttendModel call of a hosted model instead, with "
        "random hidden states\n[--batch, --lq, d_model] (and --memory_len "
        "memory); the head and dimension\nflags, --layout, --scale, "
        "--q/--k/--v and --check do not apply.\n--protocol=v2 sends either "
        "as an Open Inference Protocol ModelInfer call.",
        groups);
    return kExitOk;
  }
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "infer", connection.status());
  }
  absl::StatusOr<RequestSpec> spec = RequestSpecFromFlags();
  if (!spec.ok()) return UsageError(std::cerr, "infer", spec.status());
  if (const absl::Status use = CheckModelFlagUse(*parsed); !use.ok()) {
    return UsageError(std::cerr, "infer", use);
  }
  absl::StatusOr<ModelSpec> model = ModelSpecFromFlags(*parsed);
  if (!model.ok()) return UsageError(std::cerr, "infer", model.status());

  InferOptions options;
  options.connection = *std::move(connection);
  options.spec = *std::move(spec);
  options.model = *std::move(model);
  absl::StatusOr<InputFiles> files =
      InputFilesFromFlags(*parsed, "--q/--k/--v", options.spec);
  if (!files.ok()) return UsageError(std::cerr, "infer", files.status());
  options.files = *std::move(files);
  options.output_file = absl::GetFlag(FLAGS_out);
  options.weights_file = absl::GetFlag(FLAGS_weights_out);
  options.check = absl::GetFlag(FLAGS_check);
  options.shared_memory = absl::GetFlag(FLAGS_shm);
  absl::StatusOr<Protocol> protocol = ProtocolFromFlag();
  if (!protocol.ok()) return UsageError(std::cerr, "infer", protocol.status());
  options.protocol = *protocol;
  return RunInfer(options, std::cout, std::cerr);
}

}  // namespace attnserve::client
