#include "tests/server/e2e/step_channel_util.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/session_mirror.h"

namespace attnserve::testing {

void CreateStepSession(const std::shared_ptr<grpc::Channel>& channel,
                       const std::string& id) {
  auto stub = v1::SessionService::NewStub(channel);
  v1::CreateSessionRequest r;
  r.set_session_id(id);
  v1::SessionShape* shape = r.mutable_shape();
  shape->set_num_layers(1);
  shape->set_num_kv_heads(kStepKvHeads);
  shape->set_head_dim(kStepDim);
  shape->set_storage_dtype(v1::FLOAT32);
  shape->set_max_tokens(4096);
  v1::SessionInfo info;
  grpc::ClientContext context;
  const grpc::Status status = stub->CreateSession(&context, r, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
}

v1::AttendSessionsRequest StepRequest(const std::string& id, int step) {
  v1::AttendSessionsRequest r;
  r.set_request_id(absl::StrCat("step-", step));
  v1::SessionQuery* q = r.add_sessions();
  q->set_session_id(id);
  *q->mutable_query() = WireRows(DType::kFloat32, 1, kStepHeads, kStepDim,
                                 RandomValues(3 * step, kStepHeads * kStepDim));
  *q->mutable_key() =
      WireRows(DType::kFloat32, 1, kStepKvHeads, kStepDim,
               RandomValues(3 * step + 1, kStepKvHeads * kStepDim));
  *q->mutable_value() =
      WireRows(DType::kFloat32, 1, kStepKvHeads, kStepDim,
               RandomValues(3 * step + 2, kStepKvHeads * kStepDim));
  return r;
}

}  // namespace attnserve::testing
