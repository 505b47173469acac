#ifndef ATTNSERVE_CLIENT_HOSTED_MODEL_H_
#define ATTNSERVE_CLIENT_HOSTED_MODEL_H_

// What attnctl needs to call a hosted model (infer --model, bench --model):
// finding it in a server's GetServerInfo, describing it and its requests, and
// the sizes and FLOPs of a call.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"

namespace attnserve::client {

// The model called `name` in `info`, or nullptr.
const v1::ModelInfo* FindModelInfo(const v1::ServerInfo& info,
                                   absl::string_view name);

// Asks the server behind `channel` for its ServerInfo (into `server`) and
// copies the ModelInfo of `name` into `model`. When the server does not host
// it, the status is that of an AttendModel call naming it with no inputs, so
// that the error is the server's own (NOT_FOUND, listing the models it hosts).
// A failed GetServerInfo gives its status. Uses `connection`'s deadline and
// token for each call.
grpc::Status LookUpModel(const std::shared_ptr<grpc::Channel>& channel,
                         const ConnectionOptions& connection,
                         const std::string& name, v1::ServerInfo* server,
                         v1::ModelInfo* model);

// "d_model 64, heads 4/4, head_dim 16" (heads = query/key-value heads).
std::string ModelShapeText(const v1::ModelInfo& model);

// ModelShapeText and, from the config, the scoring, positional encoding, norm
// and dtype: "d_model 64, heads 4/4, head_dim 16, scaled_dot, positional none,
// norm post, float32". A config that does not parse adds nothing.
std::string ModelSummary(const v1::ModelInfo& model);

// "mha_post f32 hidden [1, 128, 64] memory [1, 16, 64]; positions 5..132;
// mask causal top_left; weights", for bench's report.
std::string ModelRequestText(const v1::ModelRequest& request);

// "5..132": the first row of an INT32 positions tensor [B, Lq]; "[]" when
// empty.
std::string PositionsText(const v1::Tensor& positions);

// Bytes of a call's output, [B, Lq, d_model] in `output_dtype`.
int64_t ModelOutputBytes(const v1::ModelInfo& model, int64_t batch,
                         int64_t q_len, v1::DataType output_dtype);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HOSTED_MODEL_H_
