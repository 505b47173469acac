#ifndef ATTNSERVE_CLIENT_EXIT_CODES_H_
#define ATTNSERVE_CLIENT_EXIT_CODES_H_

namespace attnserve::client {

// attnctl's exit codes, documented in docs/attnctl.md and `attnctl --help`.
enum ExitCode : int {
  kExitOk = 0,
  // An RPC failed, or the server is not SERVING (health).
  kExitRpcFailed = 1,
  // Bad flags or flag values.
  kExitUsage = 2,
  // infer --check: the output differs from the reference beyond the tolerance.
  kExitCheckFailed = 3,
  // A file could not be read or written, or a .npy file is malformed or holds
  // a dtype or shape that cannot be used.
  kExitFileError = 4,
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_EXIT_CODES_H_
