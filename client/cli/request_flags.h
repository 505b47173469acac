#ifndef ATTNSERVE_CLIENT_CLI_REQUEST_FLAGS_H_
#define ATTNSERVE_CLIENT_CLI_REQUEST_FLAGS_H_

// The request flags of the subcommands that send Attend calls (infer; bench
// and heatmap): the random inputs' shape and the call options. Part of the
// attnctl binary, not of the library: only entry files read flags.

#include <string>

#include "absl/status/statusor.h"
#include "client/cli/flag_parser.h"
#include "client/cli/help.h"
#include "client/request_builder.h"
#include "client/tensors/input_files.h"
#include "client/v2_messages.h"

namespace attnserve::client {

// --batch --heads --kv_heads --lq --lk --dim --dv --dtype --seed
FlagGroup RandomInputFlagGroup();
// --layout --causal --alignment --window_left --window_right --key_lengths
// --scale --return_weights --return_weight_stats --output_dtype
FlagGroup CallFlagGroup();

// --method --feature_map --num_features --num_hashes --num_buckets
// --chunk_size --method_seed and the block-sparse layout's --block_size
// --local_left --local_right --stride --stride_pattern --random_blocks
// --layout_seed --global_tokens (docs/long_sequences.md).
FlagGroup VariantFlagGroup();

// --q --k --v --mask: .npy inputs instead of random ones, and an explicit
// mask.
FlagGroup InputFileFlagGroup();

// What --q --k --v --mask hold (empty = not given). With any of --q/--k/--v
// the files' shapes are the shapes, so a random-input shape flag given beside
// them is InvalidArgument (a usage error; `file_flags`, e.g. "--q/--k/--v",
// names the file flags in its message), and --dtype, when given, is the dtype
// the files must hold (InputFiles::dtype).
absl::StatusOr<InputFiles> InputFilesFromFlags(const ParsedFlags& parsed,
                                               absl::string_view file_flags,
                                               const RequestSpec& spec);

// What the random input, call and variant flags hold. InvalidArgument (a
// usage error) for unknown names, a window below -1, a malformed
// --key_lengths, --scale or --global_tokens, --method=lsh with a --kv_heads or
// --lk of its own. The variants' ranges are the server's checks.
absl::StatusOr<RequestSpec> RequestSpecFromFlags();

// True when --dtype names a dtype (rather than the default "").
bool DTypeFlagSet();

// What --protocol holds (native or v2, in any case); InvalidArgument (a
// usage error) for anything else.
absl::StatusOr<Protocol> ProtocolFromFlag();

// --model --memory_len --position_offset: a hosted model's call instead of
// Attend.
FlagGroup ModelFlagGroup();

// What the model flags hold. InvalidArgument (a usage error) for an empty
// --model given explicitly, or a --position_offset below -1.
absl::StatusOr<ModelSpec> ModelSpecFromFlags(const ParsedFlags& parsed);

// InvalidArgument (a usage error) naming a flag given on the command line
// that does not go with --model or its absence: with --model, the flags that
// shape Attend's query, key and value (--heads --kv_heads --dim --dv --lk
// --layout --scale --q --k --v --method; infer's --check is refused by
// RunInfer);
// without it, --memory_len and --position_offset.
absl::Status CheckModelFlagUse(const ParsedFlags& parsed);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CLI_REQUEST_FLAGS_H_
