#ifndef ATTNSERVE_CLIENT_V2_MESSAGES_H_
#define ATTNSERVE_CLIENT_V2_MESSAGES_H_

// attnctl's --protocol v2: the Open Inference Protocol's (KServe v2)
// ModelInfer request that means the same call as a native AttendRequest
// (model "attention") or ModelRequest (a hosted model), as docs/api.md maps
// them, and the native response a ModelInferResponse means.

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::client {

// Which API a subcommand's calls use: attnserve.v1 (Attend, AttendModel) or
// the Open Inference Protocol's ModelInfer.
enum class Protocol { kNative, kV2 };

// OK when the v2 mapping (docs/api.md) can carry `request`; InvalidArgument
// naming what it cannot: the long-sequence variants (linear and LSH
// attention, block-sparse layouts) have no ModelInfer parameters, so such a
// request must go native.
absl::Status CheckV2CanCarry(const v1::AttendRequest& request);

// Every tensor's bytes in raw_input_contents — or, for an AttendRequest
// whose query, key, value or outputs refer to a shared-memory region
// (--shm), Triton's shared_memory_* parameters instead of their bytes (and
// the outputs in the region listed in `outputs`).
inference::ModelInferRequest ToModelInferRequest(
    const v1::AttendRequest& request);
inference::ModelInferRequest ToModelInferRequest(
    const v1::ModelRequest& request);

// The AttendResponse a ModelInferResponse means: its outputs "output" and
// "weights" as tensors (dtype, shape and their raw_output_contents entry, or,
// for an output written into a region, the shared_memory reference of the
// parameters it carries back) and the timing.* parameters as its Timing.
// InvalidArgument naming the field for a response without "output", with an
// unknown output or datatype, or with raw entries that do not match.
// Takes `response` by value so that a caller that moves it in pays no copy
// of the output bytes.
absl::StatusOr<v1::AttendResponse> FromModelInferResponse(
    inference::ModelInferResponse response);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_V2_MESSAGES_H_
