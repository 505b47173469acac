#ifndef ATTNSERVE_CLIENT_INFER_H_
#define ATTNSERVE_CLIENT_INFER_H_

// attnctl infer: one Attend call with random or .npy inputs, its results
// summarized and optionally saved as .npy and checked against the reference;
// or one AttendModel call of a hosted model with random hidden states.

#include <optional>
#include <ostream>
#include <string>

#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/exit_codes.h"
#include "client/request_builder.h"
#include "client/tensors/input_files.h"
#include "client/v2_messages.h"

namespace attnserve::client {

struct InferOptions {
  ConnectionOptions connection;
  // The random inputs' shape (ignored with input files) and the call options.
  RequestSpec spec;
  // .npy query/key/value: all three or none (default none). Their shapes are
  // the tensors' shapes, in spec.call.layout's order; and the mask file.
  InputFiles files;
  // Where to save the output and the weights (the latter implies
  // return_weights); empty (default) = not saved.
  std::string output_file;
  std::string weights_file;
  // Recompute with the reference and compare (default off).
  bool check = false;
  // Send query, key and value through a shared-memory region and take the
  // output (and weights) back through it (client/shared_memory.h; default
  // off). Attend only; the server must run with --shared_memory.
  bool shared_memory = false;
  // When model.name is set, an AttendModel call instead: random hidden states
  // [spec.random.batch, spec.random.q_len, d_model] (d_model from the
  // server's GetServerInfo), spec.call's mask parts, weights flag and output
  // dtype, and the mask file; the input files and `check` must be unset.
  ModelSpec model;
  std::string request_id = "attnctl-infer";
  // kV2: the same call as an Open Inference Protocol ModelInfer call (model
  // "attention" or the hosted model; client/v2_messages.h), its answer read
  // back as the native response. Default native.
  Protocol protocol = Protocol::kNative;
};

// Runs the call and prints shapes, timing and a summary to `out`; errors go
// to `err`. Returns kExitUsage for options that cannot make a request,
// kExitFileError when a file cannot be read or written or an input file holds
// an unusable dtype, kExitRpcFailed when a call fails (with a model: also
// GetServerInfo, and a model the server does not host, reported with the
// server's NOT_FOUND), kExitCheckFailed when --check finds an error beyond
// the tolerance, else kExitOk.
ExitCode RunInfer(const InferOptions& options, std::ostream& out,
                  std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_INFER_H_
