#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/request_flags.h"
#include "client/cli/subcommands.h"
#include "client/heatmap/heatmap.h"

ABSL_FLAG(std::string, png, "", "write the heatmap here as a PNG");
ABSL_FLAG(bool, ascii, false,
          "draw the heatmap as text on stdout (with --png: both)");
ABSL_FLAG(std::string, color, "auto",
          "--ascii in 256 ANSI colours: auto (when stdout is a terminal and "
          "NO_COLOR is unset), always or never");
ABSL_FLAG(std::string, tokens, "",
          "labels of the keys, split on whitespace (\"Life is short, eat "
          "dessert first\": 6 tokens, punctuation stays with its word); one "
          "per key, and also the queries' labels when Lq == Lk. Random "
          "inputs: Lk (and Lq) default to their count");
ABSL_FLAG(std::string, query_tokens, "",
          "labels of the queries, one per query (when they differ from "
          "--tokens, e.g. Lq != Lk); random inputs: Lq defaults to their "
          "count");
ABSL_FLAG(int64_t, batch_index, 0, "the batch element to draw");
ABSL_FLAG(int64_t, head, -1, "the query head to draw; -1 = every head");
ABSL_FLAG(double, vmax, 0,
          "top of the colour scale (weights are in [0, 1]); 0 = the largest "
          "weight drawn");

namespace attnserve::client {
namespace {

// Lq of random inputs when neither --lq nor tokens give it: heatmaps are for
// small requests (the shared --lq default, 128, suits infer).
constexpr int64_t kDefaultHeatmapLength = 16;

bool ColorWanted(absl::string_view mode, absl::Status* status) {
  const std::string m = absl::AsciiStrToLower(mode);
  if (m == "always") return true;
  if (m == "never") return false;
  if (m != "auto") {
    *status = absl::InvalidArgumentError(
        absl::StrCat("--color: unknown value \"", mode,
                     "\" (expected auto, always or never)"));
    return false;
  }
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return isatty(STDOUT_FILENO) == 1 &&
         (no_color == nullptr || *no_color == '\0') &&
         !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

}  // namespace

int HeatmapMain(absl::Span<char* const> args) {
  const FlagGroup random = RandomInputFlagGroup();
  // The weights are what heatmap is for: --return_weights is always on.
  FlagGroup call = CallFlagGroup();
  call.names.erase(
      std::remove(call.names.begin(), call.names.end(), "return_weights"),
      call.names.end());
  const std::vector<FlagGroup> groups = {
      {"heatmap",
       {"png", "ascii", "color", "tokens", "query_tokens", "batch_index",
        "head", "vmax"}},
      InputFileFlagGroup(),
      random,
      call,
      VariantFlagGroup(),
      ConnectionFlagGroup()};
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "heatmap", parsed.status());
  if (parsed->help) {
    std::cout << SubcommandHelp(
        "attnctl heatmap (--png=FILE | --ascii) [flags]",
        absl::StrCat(
            "Sends one small Attend call with random inputs, or --q/--k "
            ".npy files\n(--v optional: without it the value is zeros, the "
            "weights do not\ndepend on it), and draws the weights of one "
            "batch element: one panel\nper query head, query rows down, "
            "key columns across, with a colour\nscale from 0 to the largest "
            "weight (--vmax) and the tokens as labels.\nRandom inputs here "
            "have Lq = ",
            kDefaultHeatmapLength,
            " unless --lq or tokens say otherwise.\nLimits: Lq, Lk <= ",
            kMaxHeatmapLength, "; <= ", kMaxHeatmapPanels, " panels; <= ",
            kMaxHeatmapTokens, " tokens;\n--ascii: Lk <= ", kMaxTextKeys,
            ", Lq <= ", kMaxTextQueries, "."),
        groups);
    return kExitOk;
  }
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "heatmap", connection.status());
  }
  absl::StatusOr<RequestSpec> spec = RequestSpecFromFlags();
  if (!spec.ok()) return UsageError(std::cerr, "heatmap", spec.status());

  HeatmapOptions options;
  options.connection = *std::move(connection);
  options.spec = *std::move(spec);
  absl::StatusOr<InputFiles> files =
      InputFilesFromFlags(*parsed, "--q/--k", options.spec);
  if (!files.ok()) return UsageError(std::cerr, "heatmap", files.status());
  options.files = *std::move(files);
  options.png_file = absl::GetFlag(FLAGS_png);
  options.text = absl::GetFlag(FLAGS_ascii);
  absl::Status color = absl::OkStatus();
  options.text_color =
      options.text && ColorWanted(absl::GetFlag(FLAGS_color), &color);
  if (!color.ok()) return UsageError(std::cerr, "heatmap", color);
  options.batch_index = absl::GetFlag(FLAGS_batch_index);
  if (options.batch_index < 0) {
    return UsageError(
        std::cerr, "heatmap",
        absl::InvalidArgumentError(absl::StrCat(
            "--batch_index must be >= 0; got ", options.batch_index)));
  }
  const int64_t head = absl::GetFlag(FLAGS_head);
  if (head < -1) {
    return UsageError(
        std::cerr, "heatmap",
        absl::InvalidArgumentError(absl::StrCat(
            "--head must be >= 0, or -1 for every head; got ", head)));
  }
  if (head >= 0) options.head = head;
  const double vmax = absl::GetFlag(FLAGS_vmax);
  if (vmax != 0) options.vmax = static_cast<float>(vmax);
  if (parsed->Specified("tokens")) {
    options.key_tokens = SplitTokens(absl::GetFlag(FLAGS_tokens));
    if (options.key_tokens.empty()) {
      return UsageError(std::cerr, "heatmap",
                        absl::InvalidArgumentError("--tokens has no tokens"));
    }
  }
  if (parsed->Specified("query_tokens")) {
    options.query_tokens = SplitTokens(absl::GetFlag(FLAGS_query_tokens));
    if (options.query_tokens.empty()) {
      return UsageError(
          std::cerr, "heatmap",
          absl::InvalidArgumentError("--query_tokens has no tokens"));
    }
  }

  if (!options.files.HasTensors()) {
    // Random inputs take their lengths from the tokens unless told.
    RandomInputs& shape = options.spec.random;
    if (!parsed->Specified("lq")) {
      shape.q_len = !options.query_tokens.empty()
                        ? static_cast<int64_t>(options.query_tokens.size())
                    : !options.key_tokens.empty()
                        ? static_cast<int64_t>(options.key_tokens.size())
                        : kDefaultHeatmapLength;
    }
    if (!parsed->Specified("lk") && !options.key_tokens.empty()) {
      shape.k_len = static_cast<int64_t>(options.key_tokens.size());
    }
  }
  return RunHeatmap(options, std::cout, std::cerr);
}

}  // namespace attnserve::client
