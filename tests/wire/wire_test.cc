#include <memory>
#include <string>

#include "absl/status/status.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "wire/dtype.h"
#include "wire/tensor.h"
#include "wire/transport.h"

namespace attnserve::wire {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr v1::DataType kUnknown = static_cast<v1::DataType>(99);

void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

TEST(WireDTypeTest, EveryCoreDTypeRoundTrips) {
  for (DType d :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kBool}) {
    absl::StatusOr<DType> back = DTypeFromWire(DTypeToWire(d), "x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, d);
    EXPECT_EQ(ElementSize(DTypeToWire(d)), static_cast<int64_t>(DTypeSize(d)));
    EXPECT_EQ(ShortDataTypeName(DTypeToWire(d)), DTypeName(d));
  }
  EXPECT_EQ(DTypeToWire(DType::kBFloat16), v1::BFLOAT16);
}

TEST(WireDTypeTest, ValuesWithoutACoreDTypeNameTheField) {
  ExpectInvalid(DTypeFromWire(v1::DATA_TYPE_UNSPECIFIED, "f.dtype").status(),
                "f.dtype: DATA_TYPE_UNSPECIFIED (expected FLOAT32");
  ExpectInvalid(DTypeFromWire(v1::INT32, "f.dtype").status(),
                "f.dtype: INT32 is only for ModelRequest.positions");
  ExpectInvalid(DTypeFromWire(kUnknown, "f.dtype").status(),
                "f.dtype: unknown value 99 (expected FLOAT32 = 1");
}

TEST(WireDTypeTest, NamesAndSizes) {
  EXPECT_EQ(DataTypeName(v1::FLOAT32), "FLOAT32");
  EXPECT_EQ(DataTypeName(v1::INT32), "INT32");
  EXPECT_EQ(DataTypeName(kUnknown), "unknown value 99");
  EXPECT_EQ(ShortDataTypeName(v1::INT32), "i32");
  EXPECT_EQ(ShortDataTypeName(v1::DATA_TYPE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(ShortDataTypeName(kUnknown), "DataType(99)");
  EXPECT_EQ(ElementSize(v1::FLOAT32), 4);
  EXPECT_EQ(ElementSize(v1::FLOAT16), 2);
  EXPECT_EQ(ElementSize(v1::BOOL), 1);
  EXPECT_EQ(ElementSize(v1::INT32), 4);
  EXPECT_EQ(ElementSize(v1::DATA_TYPE_UNSPECIFIED), 0);
  EXPECT_EQ(ElementSize(kUnknown), 0);
}

v1::Tensor MakeTensor(v1::DataType dtype, std::initializer_list<int64_t> shape,
                      size_t bytes) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::string(bytes, '\1'));
  return t;
}

TEST(WireTensorTest, FloatDTypeRefusesBoolAndMismatches) {
  const v1::Tensor f32 = MakeTensor(v1::FLOAT32, {2}, 8);
  const v1::Tensor bf16 = MakeTensor(v1::BFLOAT16, {2}, 4);
  EXPECT_EQ(*FloatDType("query", f32), DType::kFloat32);
  EXPECT_EQ(*FloatDType("key", f32, DType::kFloat32, "query"), DType::kFloat32);
  ExpectInvalid(FloatDType("key", MakeTensor(v1::BOOL, {2}, 2)).status(),
                "key.dtype: BOOL is not supported (expected FLOAT32, BFLOAT16 "
                "or FLOAT16)");
  ExpectInvalid(FloatDType("key", bf16, DType::kFloat32, "query",
                           "they must share one dtype")
                    .status(),
                "key.dtype: BFLOAT16 differs from query.dtype FLOAT32 (they "
                "must share one dtype)");
  const absl::Status no_why =
      FloatDType("memory", bf16, DType::kFloat16, "hidden").status();
  ExpectInvalid(no_why,
                "memory.dtype: BFLOAT16 differs from hidden.dtype "
                "FLOAT16");
  EXPECT_THAT(std::string(no_why.message()), ::testing::Not(HasSubstr("(")));
  ExpectInvalid(FloatDType("query", MakeTensor(kUnknown, {2}, 8)).status(),
                "query.dtype: unknown value 99");
}

TEST(WireTensorTest, ViewsPointIntoTheMessageAndCheckTheSize) {
  const v1::Tensor t = MakeTensor(v1::FLOAT16, {2, 3}, 12);
  absl::StatusOr<TensorView> view = ViewOf("x", t);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data, t.data().data());
  EXPECT_EQ(view->dtype, DType::kFloat16);
  EXPECT_THAT(view->dims(), ElementsAre(2, 3));
  EXPECT_EQ(NumElements(t), 6);
  EXPECT_EQ(ShapeText(t), "[2, 3]");
  EXPECT_THAT(ShapeOf(t), ElementsAre(2, 3));

  ExpectInvalid(
      ViewAs("x", MakeTensor(v1::FLOAT16, {2, 3}, 13), DType::kFloat16)
          .status(),
      "x: 13 bytes do not match shape");
  ExpectInvalid(
      ViewOf("x", MakeTensor(v1::DATA_TYPE_UNSPECIFIED, {1}, 4)).status(),
      "x.dtype: DATA_TYPE_UNSPECIFIED");
}

TEST(WireTensorTest, PrepareTensorReplacesShapeAndZeroFills) {
  v1::Tensor t = MakeTensor(v1::BOOL, {7, 7}, 49);
  const int64_t shape[] = {2, 5};
  MutableTensorView view = PrepareTensor(DType::kBFloat16, shape, &t);
  EXPECT_EQ(t.dtype(), v1::BFLOAT16);
  EXPECT_THAT(t.shape(), ElementsAre(2, 5));
  EXPECT_EQ(t.data(), std::string(20, '\0'));
  EXPECT_EQ(view.data, t.data().data());
  EXPECT_THAT(view.dims(), ElementsAre(2, 5));
}

// Answers every Attend with an output as large as the request's query data.
class SizedEcho final : public v1::AttentionService::CallbackService {
  grpc::ServerUnaryReactor* Attend(grpc::CallbackServerContext* context,
                                   const v1::AttendRequest* request,
                                   v1::AttendResponse* response) override {
    response->mutable_output()->set_data(
        std::string(request->query().data().size(), 'x'));
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class WireTransportTest : public ::testing::Test {
 protected:
  void Start(const ServerTransportOptions& options) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    ApplyServerTransport(options, &builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  grpc::Status Call(int64_t client_limit, size_t query_bytes) {
    auto channel =
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_),
                                  grpc::InsecureChannelCredentials(),
                                  ClientChannelArguments(client_limit, "test"));
    auto stub = v1::AttentionService::NewStub(channel);
    v1::AttendRequest request;
    request.mutable_query()->set_data(std::string(query_bytes, 'q'));
    v1::AttendResponse response;
    grpc::ClientContext context;
    return stub->Attend(&context, request, &response);
  }

  SizedEcho service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(WireTransportTest, ServerLimitsAreApplied) {
  ServerTransportOptions options;
  options.max_message_bytes = 64 << 10;
  options.max_response_bytes = 1 << 10;
  Start(options);
  EXPECT_TRUE(Call(8 << 20, 32 << 10).ok());
  // Received: above max_message_bytes.
  EXPECT_EQ(Call(8 << 20, 128 << 10).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Sent: the payload limit plus the envelope bounds the response.
  options.max_message_bytes = 1 << 20;
  server_->Shutdown();
  Start(options);
  EXPECT_TRUE(Call(8 << 20, 32 << 10).ok());
  EXPECT_EQ(Call(8 << 20, kResponseEnvelopeBytes + (4 << 10)).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(WireTransportTest, ClientLimitIsApplied) {
  Start(ServerTransportOptions{});
  EXPECT_TRUE(Call(1 << 20, 512 << 10).ok());
  EXPECT_EQ(Call(1 << 20, 2 << 20).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST(WireTransportConstantsTest, FrameSizeIsHttp2sLargest) {
  // RFC 9113 §4.2: SETTINGS_MAX_FRAME_SIZE is at most 2^24 - 1.
  EXPECT_EQ(kHttp2MaxFrameBytes, 16777215);
}

}  // namespace
}  // namespace attnserve::wire
