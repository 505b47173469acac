#ifndef ATTNSERVE_CLIENT_REQUEST_FLAGS_H_
#define ATTNSERVE_CLIENT_REQUEST_FLAGS_H_

// The request flags of the subcommands that send Attend calls (infer; bench
// and heatmap): the random inputs' shape and the call options. Part of the
// attnctl binary, not of the library: only entry files read flags.

#include <string>

#include "absl/status/statusor.h"
#include "client/help.h"
#include "client/request_builder.h"

namespace attnserve::client {

// --batch --heads --kv_heads --lq --lk --dim --dv --dtype --seed
FlagGroup RandomInputFlagGroup();
// --layout --causal --alignment --window_left --window_right --key_lengths
// --scale --return_weights --output_dtype
FlagGroup CallFlagGroup();

// --q --k --v --mask: .npy inputs instead of random ones, and an explicit
// mask.
FlagGroup InputFileFlagGroup();

// What --q --k --v --mask hold (empty = not given).
struct InputFiles {
  std::string query;
  std::string key;
  std::string value;
  std::string mask;
};
InputFiles InputFilesFromFlags();

// What the random input and call flags hold. InvalidArgument (a usage error)
// for unknown names, a window below -1, a malformed --key_lengths or --scale.
absl::StatusOr<RequestSpec> RequestSpecFromFlags();

// True when --dtype names a dtype (rather than the default "").
bool DTypeFlagSet();

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_REQUEST_FLAGS_H_
