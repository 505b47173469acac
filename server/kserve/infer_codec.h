#ifndef ATTNSERVE_SERVER_KSERVE_INFER_CODEC_H_
#define ATTNSERVE_SERVER_KSERVE_INFER_CODEC_H_

// The Open Inference Protocol (KServe v2) in terms of the native API: the v2
// models attnserve serves (their inputs, outputs and parameters), a
// ModelInferRequest turned into the native AttendRequest or ModelRequest it
// means, and the native answer turned into a ModelInferResponse. Only what is
// v2-specific is checked here (names, datatype strings, contents forms,
// parameter kinds); shapes, sizes, dtypes, masks and limits are the native
// decoder's (server/request_codec.h, server/model_codec.h), so both protocols
// accept and refuse the same requests. Tensor bytes are moved, never copied,
// on the raw path.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/model_registry.h"

namespace attnserve::server::kserve {

// Every v2 model has this one version.
inline constexpr char kModelVersion[] = "1";

// One input or output of a v2 model.
struct TensorSpec {
  std::string name;
  // The datatypes accepted; the first is the one metadata reports.
  std::vector<v1::DataType> datatypes;
  // For metadata; -1 = variable.
  std::vector<int64_t> shape;
  bool optional = false;
};

// A v2 model: `attention` (hosted == null) or a hosted layer.
struct ModelInterface {
  std::string name;
  const HostedModel* hosted = nullptr;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // The request parameters it takes.
  std::vector<std::string> parameters;
};

// `attention` first, then each model of `models` (null = none) in its order.
// A hosted model named `attention` is left out: the name is the native
// Attend's (the server warns at start-up).
std::vector<ModelInterface> ModelInterfaces(const ModelRegistry* models);

// The index in `interfaces` of the v2 model `name`; NotFound listing the
// models when none has that name, or naming the versions when `version` is
// neither empty nor kModelVersion.
absl::StatusOr<int> FindModel(const std::vector<ModelInterface>& interfaces,
                              absl::string_view name,
                              absl::string_view version);

// A ModelInferRequest as the native request it maps to.
struct NativeCall {
  const ModelInterface* model = nullptr;
  // Set when model->hosted is null.
  v1::AttendRequest attend;
  // Set otherwise.
  v1::ModelRequest hosted;
  // The outputs to answer, in order, as indices into model->outputs.
  std::vector<int> outputs;
};

// Fills `call` from `request`, whose raw_input_contents it moves into the
// native tensors (so `request` loses them). InvalidArgument naming the input
// or parameter ("inputs[1] (key).datatype: ...", "parameters[\"causal\"]:
// ...") for an unknown, duplicate or missing input or output, a datatype
// string that is unknown or not one the input takes, raw and typed contents
// together, a raw_input_contents count other than that of the inputs not in
// shared memory, typed contents of the wrong kind or count, FP16/BF16 typed
// contents, an unknown parameter or one of the wrong kind or range.
//
// Inputs and requested outputs take Triton's shared-memory parameters
// (shared_memory_region, shared_memory_offset, shared_memory_byte_size;
// docs/api.md): they become the native SharedMemoryRefs (Tensor.shared_memory,
// output_shared_memory, weights_shared_memory), which the native decoder
// resolves and checks (region, bounds, alignment, sizes, overlaps) as for
// attnserve.v1. InvalidArgument here for any other input or output
// parameter, a parameter of the wrong kind, a negative offset or byte_size,
// an offset or byte_size without a region, a region without a byte_size,
// contents together with a region, and shared memory on a tensor other than
// query, key, value, output and weights of model `attention`.
absl::Status ToNative(const ModelInterface& model,
                      inference::ModelInferRequest& request, NativeCall* call);

// Fills `response` from the native answer to `call`, moving the output (and
// weights) bytes of `native` into raw_output_contents. An output written into
// shared memory has its three shared-memory parameters in the response and
// an empty raw_output_contents entry (entries stay one per output). The
// response carries the native timing as the parameters "timing.queue_us",
// "timing.compute_us", "timing.total_us" and "timing.flops" (int64).
void ToInferResponse(const NativeCall& call,
                     const inference::ModelInferRequest& request,
                     v1::AttendResponse& native,
                     inference::ModelInferResponse* response);

}  // namespace attnserve::server::kserve

#endif  // ATTNSERVE_SERVER_KSERVE_INFER_CODEC_H_
