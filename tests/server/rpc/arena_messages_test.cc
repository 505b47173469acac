// ArenaMessageAllocator: a holder's request and response share one arena,
// messages larger than the inline first block parse whole, and a real gRPC
// server in this process hands its unary handler arena messages and answers
// from them (under ASan, every holder's memory is freed).

#include "server/rpc/arena_messages.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using v1::AttendRequest;
using v1::AttendResponse;
using Allocator = ArenaMessageAllocator<AttendRequest, AttendResponse>;

TEST(ArenaMessagesTest, RequestAndResponseShareTheHoldersArena) {
  Allocator allocator;
  grpc::MessageHolder<AttendRequest, AttendResponse>* holder =
      allocator.AllocateMessages();
  ASSERT_NE(holder->request(), nullptr);
  ASSERT_NE(holder->response(), nullptr);
  EXPECT_NE(holder->request()->GetArena(), nullptr);
  EXPECT_EQ(holder->request()->GetArena(), holder->response()->GetArena());
  // Two holders, two arenas.
  grpc::MessageHolder<AttendRequest, AttendResponse>* other =
      allocator.AllocateMessages();
  EXPECT_NE(other->request()->GetArena(), holder->request()->GetArena());
  holder->Release();
  other->Release();
}

TEST(ArenaMessagesTest, AMessageLargerThanTheFirstBlockParsesWhole) {
  AttendRequest big;
  big.set_request_id(std::string(20000, 'r'));
  for (int i = 0; i < 3000; ++i) big.mutable_query()->add_shape(i);
  big.mutable_key()->set_data(std::string(100000, 'k'));
  const std::string bytes = big.SerializeAsString();

  Allocator allocator;
  grpc::MessageHolder<AttendRequest, AttendResponse>* holder =
      allocator.AllocateMessages();
  ASSERT_TRUE(holder->request()->ParseFromString(bytes));
  EXPECT_EQ(holder->request()->SerializeAsString(), bytes);
  // A response past the first block too; ASan checks that Release frees it.
  holder->response()->mutable_output()->set_data(std::string(50000, 'o'));
  holder->Release();
}

// Attend only: checks that it was given arena messages and answers from the
// request.
class ArenaService final : public v1::AttentionService::CallbackService {
 public:
  ArenaService() { SetMessageAllocatorFor_Attend(&allocator_); }

  grpc::ServerUnaryReactor* Attend(grpc::CallbackServerContext* context,
                                   const AttendRequest* request,
                                   AttendResponse* response) override {
    const bool on_arena = request->GetArena() != nullptr &&
                          request->GetArena() == response->GetArena();
    response->set_request_id(
        absl::StrCat(request->request_id(), on_arena ? ":arena" : ":heap"));
    response->mutable_output()->set_data(request->query().data());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  Allocator allocator_;
};

TEST(ArenaMessagesTest, AServerHandsItsHandlerArenaMessages) {
  ArenaService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  auto stub = v1::AttentionService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 20; ++i) {
    AttendRequest request;
    request.set_request_id(absl::StrCat("call", i));
    // From a few bytes to past the first block.
    request.mutable_query()->set_data(std::string(size_t{1} << (i % 14), 'q'));
    AttendResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Attend(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.request_id(), absl::StrCat("call", i, ":arena"));
    EXPECT_EQ(response.output().data(), request.query().data());
  }
  server->Shutdown();
}

}  // namespace
}  // namespace attnserve::server
