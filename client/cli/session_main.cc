#include <iostream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "client/cli/connection_flags.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/cli/request_flags.h"
#include "client/cli/subcommands.h"
#include "client/session.h"
#include "client/tensors/wire_names.h"

ABSL_FLAG(std::string, session, "",
          "the session id; step takes a comma list (one call over all); "
          "create: empty = the server picks one");
ABSL_FLAG(std::string, route_key, "",
          "value of the attnserve-session routing header; empty = the first "
          "--session");
ABSL_FLAG(int, layers, 1, "create: layers of the cache");
ABSL_FLAG(std::string, storage_dtype, "f32", "create: f32, bf16, f16 or int8");
ABSL_FLAG(int64_t, max_tokens, 8192,
          "create: tokens one layer may hold (with --window_tokens: its "
          "positions)");
ABSL_FLAG(int64_t, window_tokens, 0,
          "create: a sink + window session keeping each layer's last "
          "window_tokens tokens (and its first --sink_tokens); 0 = every "
          "token");
ABSL_DECLARE_FLAG(int32_t, sink_tokens);
ABSL_FLAG(absl::Duration, ttl, absl::ZeroDuration(),
          "create, fork: idle TTL; 0 = the server's (fork: the parent's)");
ABSL_FLAG(int, layer, 0, "append, step: the layer");
ABSL_FLAG(int64_t, kv_tokens, 16,
          "append: random tokens to append; truncate: tokens to keep");
ABSL_FLAG(int64_t, position, -1,
          "append: the first token's position, checked by the server; -1 = "
          "at the end, unchecked");
ABSL_FLAG(
    int64_t, chunk_tokens, 0,
    "append: tokens per message; fewer than --kv_tokens streams the chunks "
    "(AppendKvStream); 0 = one message");
ABSL_FLAG(int64_t, lnew, 1, "step: new queries per session");
ABSL_FLAG(bool, append_kv, true,
          "step: append --lnew new random tokens with the queries");
ABSL_FLAG(std::string, child, "", "fork: the child's id; empty = the server's");
ABSL_FLAG(std::string, file, "",
          "export: the file the snapshots are written to; import: the file "
          "they are read from");
ABSL_FLAG(bool, remove, false,
          "export: end the sessions on the server once exported (a move)");

namespace attnserve::client {

int SessionMain(absl::Span<char* const> args) {
  const std::vector<FlagGroup> groups = {
      {"session",
       {"session",       "route_key",   "layers",        "kv_heads",
        "dim",           "dv",          "storage_dtype", "max_tokens",
        "window_tokens", "sink_tokens", "ttl",           "layer",
        "kv_tokens",     "position",    "chunk_tokens",  "dtype",
        "seed",          "heads",       "lnew",          "append_kv",
        "causal",        "window_left", "scale",         "return_weights",
        "child",         "file",        "remove"}},
      ConnectionFlagGroup()};
  const std::string usage =
      "attnctl session "
      "create|append|step|info|fork|truncate|close|export|import [flags]";
  if (args.empty() || args[0][0] == '-') {
    const bool help = !args.empty() && (std::string(args[0]) == "--help" ||
                                        std::string(args[0]) == "-h");
    (help ? std::cout : std::cerr) << SubcommandHelp(
        usage,
        "KV-cache sessions (SessionService): keys and values that live on "
        "the server.\n  create    a session of --layers --kv_heads --dim --dv "
        "--storage_dtype\n  append    --kv_tokens random tokens to --layer "
        "(streamed with --chunk_tokens)\n  step      --lnew queries per "
        "session of --session a,b,c over --layer, with\n            new "
        "tokens unless --noappend_kv; causal unless --causal=false\n  info"
        "      the session's tokens, bytes and TTL\n  fork      a "
        "copy-on-write child (--child)\n  truncate  keep --kv_tokens tokens of "
        "every layer\n  close     end the session\n  export    snapshots of "
        "--session a,b (none = every live one) into --file;\n            "
        "--remove ends them on the server (a move)\n  import    the "
        "sessions of --file",
        groups);
    return help ? kExitOk : kExitUsage;
  }
  SessionCommand c;
  c.action = args[0];
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags(args.subspan(1), FlagNames(groups));
  if (!parsed.ok()) return UsageError(std::cerr, "session", parsed.status());
  absl::StatusOr<ConnectionOptions> connection = ConnectionOptionsFromFlags();
  if (!connection.ok()) {
    return UsageError(std::cerr, "session", connection.status());
  }
  absl::StatusOr<RequestSpec> spec = RequestSpecFromFlags();
  if (!spec.ok()) return UsageError(std::cerr, "session", spec.status());
  c.connection = *std::move(connection);
  const std::string ids = absl::GetFlag(FLAGS_session);
  if (!ids.empty()) c.sessions = absl::StrSplit(ids, ',');
  c.route_key = absl::GetFlag(FLAGS_route_key);
  c.layers = absl::GetFlag(FLAGS_layers);
  c.kv_heads = static_cast<int>(
      spec->random.kv_heads > 0 ? spec->random.kv_heads : spec->random.heads);
  c.head_dim = static_cast<int>(spec->random.head_dim);
  c.value_dim = static_cast<int>(spec->random.value_dim);
  absl::StatusOr<v1::DataType> storage =
      ParseStorageDataType("storage_dtype", absl::GetFlag(FLAGS_storage_dtype));
  if (!storage.ok()) return UsageError(std::cerr, "session", storage.status());
  c.storage_dtype = *storage;
  c.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  c.window_tokens = absl::GetFlag(FLAGS_window_tokens);
  c.sink_tokens = absl::GetFlag(FLAGS_sink_tokens);
  c.ttl = absl::GetFlag(FLAGS_ttl);
  c.layer = absl::GetFlag(FLAGS_layer);
  c.tokens = absl::GetFlag(FLAGS_kv_tokens);
  if (absl::GetFlag(FLAGS_position) >= 0) {
    c.position = absl::GetFlag(FLAGS_position);
  }
  c.chunk_tokens = absl::GetFlag(FLAGS_chunk_tokens);
  c.input_dtype = spec->random.dtype;
  c.seed = spec->random.seed;
  c.heads = spec->random.heads;
  c.lnew = absl::GetFlag(FLAGS_lnew);
  c.append = absl::GetFlag(FLAGS_append_kv);
  // Sessions attend causally (bottom-right) unless told otherwise.
  c.causal = !parsed->Specified("causal") || spec->call.causal;
  if (spec->call.window_left) c.window_left = *spec->call.window_left;
  c.scale = spec->call.scale;
  c.return_weights = spec->call.return_weights;
  c.child = absl::GetFlag(FLAGS_child);
  c.file = absl::GetFlag(FLAGS_file);
  c.remove = absl::GetFlag(FLAGS_remove);
  if (c.tokens < 0 || c.lnew < 1 || c.chunk_tokens < 0) {
    return UsageError(
        std::cerr, "session",
        absl::InvalidArgumentError("--kv_tokens must be >= 0, --lnew >= 1 and "
                                   "--chunk_tokens >= 0"));
  }
  return RunSessionCommand(c, std::cout, std::cerr);
}

}  // namespace attnserve::client
