#ifndef ATTNSERVE_CLIENT_LOAD_V2_REQUEST_H_
#define ATTNSERVE_CLIENT_LOAD_V2_REQUEST_H_

// attnctl bench --protocol v2: the Open Inference Protocol's ModelInfer
// request that means the same call as a native AttendRequest (model
// "attention") or ModelRequest (a hosted model), as docs/api.md maps them,
// with every tensor in raw_input_contents — or, for an AttendRequest whose
// query, key, value or outputs refer to a shared-memory region (attnctl bench
// --shm), with Triton's shared_memory_* parameters instead of their bytes.

#include "attnserve/v1/attention.pb.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::client {

inference::ModelInferRequest ToModelInferRequest(
    const v1::AttendRequest& request);
inference::ModelInferRequest ToModelInferRequest(
    const v1::ModelRequest& request);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_LOAD_V2_REQUEST_H_
