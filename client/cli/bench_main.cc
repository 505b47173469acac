#include <unistd.h>

#include <iostream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/request_flags.h"
#include "client/cli/subcommands.h"
#include "client/load/bench.h"
#include "client/load/bench_levels.h"
#include "client/load/decode_bench.h"
#include "client/tensors/wire_names.h"

ABSL_FLAG(std::string, concurrency, "1",
          "closed loop: requests outstanding at all times; a sweep as "
          "START:END:STEP, START:END:xFACTOR or A,B,C (e.g. 1:64:x2)");
ABSL_FLAG(std::string, rate, "",
          "open loop instead: requests per second, sent on schedule whatever "
          "the answers do (latency counts from the scheduled time); a sweep "
          "as for --concurrency");
ABSL_FLAG(std::string, arrival, "constant",
          "open loop: constant (evenly spaced) or poisson (exponential gaps)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5),
          "measurement window of each level");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "load before each level's window, not measured");
ABSL_FLAG(bool, stream, false,
          "send stream messages instead of unary calls (AttendStream, "
          "AttendModelStream with --model, ModelStreamInfer with "
          "--protocol=v2, AttendSessionsStream with --decode: one per "
          "sequence); closed loop: one stream per outstanding request; "
          "open loop: one stream per connection)");
ABSL_FLAG(std::string, connections, "auto",
          "TCP connections per target (1-256), or auto: min(concurrency, 8) "
          "(open loop: 8; --decode: min(sequences, 8)); calls go to the "
          "connection with the fewest in flight");
ABSL_FLAG(int, max_outstanding, 1024,
          "open loop: most requests outstanding; a send beyond it waits and "
          "counts as late");
ABSL_FLAG(int, new_connections, 0,
          "after the load, this many Attend calls each on a new connection "
          "of its own (connected first), their round trips set against the "
          "first level's p50 (closed loop, unary native Attend); 0 = none");
ABSL_FLAG(std::string, output_format, "table", "table, csv or json");
ABSL_FLAG(std::string, output, "",
          "write the report to this file (a table still goes to stdout)");
ABSL_FLAG(bool, progress, true,
          "a live progress line on stderr (only when it is a terminal)");

ABSL_FLAG(bool, decode, false,
          "decode load instead: --sequences sessions, each prefilled with "
          "--prefill tokens per layer, then --steps decode steps over "
          "--layers layers; and the same through stateless Attend calls");
ABSL_FLAG(int, sequences, 4, "decode: concurrent sequences (sessions)");
ABSL_FLAG(int64_t, prefill, 1024, "decode: tokens per layer before stepping");
ABSL_FLAG(int64_t, steps, 32, "decode: steps per sequence");
ABSL_FLAG(int64_t, stateless_steps, 8,
          "decode: steps per sequence of the stateless comparison (each "
          "resends the cache); 0 = none");
ABSL_FLAG(bool, tcp_channel, false,
          "decode: steps through a TCP step channel per sequence (the "
          "server runs with --step_channels and --step_channel_listen)");
// Defined by attnctl infer.
ABSL_DECLARE_FLAG(bool, shm);
// Shared with attnctl session.
ABSL_DECLARE_FLAG(int, layers);
ABSL_DECLARE_FLAG(std::string, storage_dtype);

namespace attnserve::client {
namespace {

ExitCode DecodeMain(const ParsedFlags& parsed, ConnectionOptions connection,
                    const RequestSpec& spec) {
  DecodeBenchOptions o;
  o.connection = std::move(connection);
  o.sequences = absl::GetFlag(FLAGS_sequences);
  absl::StatusOr<int> connections =
      ParseConnections(absl::GetFlag(FLAGS_connections));
  if (!connections.ok()) {
    return UsageError(std::cerr, "bench", connections.status());
  }
  o.connections = *connections;
  o.prefill = absl::GetFlag(FLAGS_prefill);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.stateless_steps =
      parsed.Specified("stateless_steps")
          ? absl::GetFlag(FLAGS_stateless_steps)
          : std::min(absl::GetFlag(FLAGS_stateless_steps), o.steps);
  o.layers = absl::GetFlag(FLAGS_layers);
  o.stream = absl::GetFlag(FLAGS_stream);
  o.same_host = absl::GetFlag(FLAGS_shm);
  o.tcp_channel = absl::GetFlag(FLAGS_tcp_channel);
  // The random-input flags' defaults are Attend's; decode's are a GQA 32/8,
  // D128 model unless given.
  o.heads = parsed.Specified("heads") ? spec.random.heads : 32;
  o.kv_heads = parsed.Specified("kv_heads") ? spec.random.kv_heads
               : parsed.Specified("heads")  ? spec.random.heads
                                            : 8;
  o.head_dim = parsed.Specified("dim") ? spec.random.head_dim : 128;
  absl::StatusOr<v1::DataType> storage =
      ParseStorageDataType("storage_dtype", absl::GetFlag(FLAGS_storage_dtype));
  if (!storage.ok()) return UsageError(std::cerr, "bench", storage.status());
  o.storage_dtype = *storage;
  const std::string format = absl::GetFlag(FLAGS_output_format);
  if (format != "table" && format != "json") {
    return UsageError(std::cerr, "bench",
                      absl::InvalidArgumentError(
                          "--decode reports as --output_format table or json"));
  }
  o.json = format == "json";
  return RunDecodeBench(o, std::cout, std::cerr);
}

absl::StatusOr<BenchOptions> BenchOptionsFromFlags(const ParsedFlags& parsed) {
  BenchOptions options;
  const std::string rate = absl::GetFlag(FLAGS_rate);
  if (!rate.empty()) {
    if (parsed.Specified("concurrency")) {
      return absl::InvalidArgumentError(
          "--concurrency (closed loop) and --rate (open loop) do not go "
          "together");
    }
    absl::StatusOr<std::vector<double>> rates =
        ParseLevels("rate", rate, /*integer=*/false);
    if (!rates.ok()) return rates.status();
    options.rates = *std::move(rates);
  } else {
    absl::StatusOr<std::vector<double>> levels = ParseLevels(
        "concurrency", absl::GetFlag(FLAGS_concurrency), /*integer=*/true);
    if (!levels.ok()) return levels.status();
    options.concurrency.assign(levels->begin(), levels->end());
  }
  const std::string arrival =
      absl::AsciiStrToLower(absl::GetFlag(FLAGS_arrival));
  if (arrival == "poisson") {
    options.arrival = Arrival::kPoisson;
  } else if (arrival != "constant") {
    return absl::InvalidArgumentError(
        absl::StrCat("--arrival \"", absl::GetFlag(FLAGS_arrival),
                     "\" is not constant or poisson"));
  }
  if (parsed.Specified("arrival") && options.rates.empty()) {
    return absl::InvalidArgumentError("--arrival applies to --rate only");
  }
  options.duration = absl::GetFlag(FLAGS_duration);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  if (options.duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--duration must be positive, got ",
                     absl::FormatDuration(options.duration)));
  }
  if (options.warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup must not be negative, got ",
                     absl::FormatDuration(options.warmup)));
  }
  options.stream = absl::GetFlag(FLAGS_stream);
  absl::StatusOr<Protocol> protocol = ProtocolFromFlag();
  if (!protocol.ok()) return protocol.status();
  options.protocol = *protocol;
  absl::StatusOr<int> connections =
      ParseConnections(absl::GetFlag(FLAGS_connections));
  if (!connections.ok()) return connections.status();
  options.connections = *connections;
  options.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  if (options.max_outstanding < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_outstanding must be >= 1, got ", options.max_outstanding));
  }
  absl::StatusOr<OutputFormat> format =
      ParseOutputFormat(absl::GetFlag(FLAGS_output_format));
  if (!format.ok()) return format.status();
  options.format = *format;
  options.output_file = absl::GetFlag(FLAGS_output);
  options.progress = absl::GetFlag(FLAGS_progress) && isatty(STDERR_FILENO);
  options.shared_memory = absl::GetFlag(FLAGS_shm);
  options.new_connections = absl::GetFlag(FLAGS_new_connections);
  return options;
}

}  // namespace

int BenchMain(absl::Span<char* const> args) {
  const std::vector<FlagGroup> groups = {
      {"load",
       {"concurrency", "rate", "arrival", "duration", "warmup", "stream",
        "protocol", "connections", "max_outstanding", "shm",
        "new_connections"}},
      {"report", {"output_format", "output", "progress"}},
      {"decode",
       {"decode", "sequences", "prefill", "steps", "stateless_steps", "layers",
        "storage_dtype", "tcp_channel"}},
      RandomInputFlagGroup(),
      CallFlagGroup(),
      VariantFlagGroup(),
      ModelFlagGroup(),
      ConnectionFlagGroup()};
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "bench", parsed.status());
  if (parsed->help) {
    std::cout << SubcommandHelp(
        "attnctl bench [flags]",
        "Load-tests attnserve with random requests of the given shape: "
        "closed loop\n(--concurrency) or open loop (--rate), one level or a "
        "sweep, over one\nserver or several (--target a,b,c: round-robin). "
        "Reports requests, errors\nby code, throughput and latency "
        "percentiles. Exit code 1 when any\nmeasured request failed. With "
        "--model NAME, AttendModel calls (AttendModelStream\nwith --stream) "
        "of a hosted model with random hidden states, as infer\n--model "
        "sends them. With --decode, KV-cache session decoding (see the "
        "decode flags)\nagainst the same decoding through stateless Attend "
        "calls.",
        groups);
    return kExitOk;
  }
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "bench", connection.status());
  }
  absl::StatusOr<RequestSpec> spec = RequestSpecFromFlags();
  if (!spec.ok()) return UsageError(std::cerr, "bench", spec.status());
  if (absl::GetFlag(FLAGS_decode)) {
    return DecodeMain(*parsed, *std::move(connection), *spec);
  }
  if (const absl::Status use = CheckModelFlagUse(*parsed); !use.ok()) {
    return UsageError(std::cerr, "bench", use);
  }
  absl::StatusOr<ModelSpec> model = ModelSpecFromFlags(*parsed);
  if (!model.ok()) return UsageError(std::cerr, "bench", model.status());
  absl::StatusOr<BenchOptions> options = BenchOptionsFromFlags(*parsed);
  if (!options.ok()) return UsageError(std::cerr, "bench", options.status());
  options->connection = *std::move(connection);
  options->spec = *std::move(spec);
  options->model = *std::move(model);
  return RunBench(*options, std::cout, std::cerr);
}

}  // namespace attnserve::client
