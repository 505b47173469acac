// Same-host shared memory against a real attnserve process: register, attend
// through the region (unary and stream, inputs read and outputs written
// there) with results equal to the bytes path bit for bit, unregister, the
// lease ending with its call, the metrics, and the refusals with
// --shared_memory off. A client process that dies is tests/client's
// (attnctl_shm_e2e_test.cc).

#include <signal.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/server_process.h"
#include "tests/util/shm_object.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve {
namespace {

using ::attnserve::testing::AwaitMetric;
using ::attnserve::testing::ServerTest;
using ::attnserve::testing::ShmObject;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::HasSubstr;

constexpr int64_t kB = 1, kH = 4, kL = 64, kD = 32;
constexpr int64_t kTensorBytes = kB * kH * kL * kD * 4;
constexpr int64_t kWeightsBytes = kB * kH * kL * kL * 4;
// q, k, v, output, weights, one after another.
constexpr int64_t kRegionBytes = 4 * kTensorBytes + kWeightsBytes;

// A Register call held open.
struct Lease {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::SharedMemoryLease>> reader;
  v1::SharedMemoryLease first;
  bool registered = false;
};

std::unique_ptr<Lease> Register(v1::SharedMemoryService::Stub& stub,
                                const std::string& name, const std::string& key,
                                int64_t size) {
  auto lease = std::make_unique<Lease>();
  v1::RegisterSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_byte_size(size);
  lease->reader = stub.Register(&lease->context, request);
  lease->registered = lease->reader->Read(&lease->first);
  return lease;
}

std::vector<std::string> RegionNames(v1::SharedMemoryService::Stub& stub) {
  grpc::ClientContext context;
  v1::SharedMemoryStatusResponse response;
  EXPECT_TRUE(
      stub.Status(&context, v1::SharedMemoryStatusRequest(), &response).ok());
  std::vector<std::string> names;
  for (const auto& region : response.regions()) names.push_back(region.name());
  return names;
}

void Ref(v1::SharedMemoryRef* ref, const std::string& region, int64_t offset,
         int64_t size) {
  ref->set_region(region);
  ref->set_offset(offset);
  ref->set_byte_size(size);
}

// A causal request with weights, its bytes in `request` and the same tensors
// in `object` at 0, 1, 2 x kTensorBytes, referred to by `shm_request`, whose
// output and weights go to 3 x kTensorBytes and 4 x kTensorBytes.
void BuildRequests(const ShmObject& object, const std::string& region,
                   v1::AttendRequest* request, v1::AttendRequest* shm_request) {
  request->set_return_weights(true);
  request->mutable_mask()->set_causal(true);
  v1::Tensor* tensors[] = {request->mutable_query(), request->mutable_key(),
                           request->mutable_value()};
  for (int i = 0; i < 3; ++i) {
    ToWire(TestTensor::Random(DType::kFloat32, {kB, kH, kL, kD}, 40 + i),
           tensors[i]);
    std::memcpy(object.data() + i * kTensorBytes, tensors[i]->data().data(),
                kTensorBytes);
  }
  *shm_request = *request;
  v1::Tensor* shm_tensors[] = {shm_request->mutable_query(),
                               shm_request->mutable_key(),
                               shm_request->mutable_value()};
  for (int i = 0; i < 3; ++i) {
    shm_tensors[i]->clear_data();
    Ref(shm_tensors[i]->mutable_shared_memory(), region, i * kTensorBytes,
        kTensorBytes);
  }
  Ref(shm_request->mutable_output_shared_memory(), region, 3 * kTensorBytes,
      kTensorBytes);
  Ref(shm_request->mutable_weights_shared_memory(), region, 4 * kTensorBytes,
      kWeightsBytes);
}

class SharedMemoryE2eTest : public ServerTest {
 protected:
  void Start(std::vector<std::string> args) {
    ASSERT_NO_FATAL_FAILURE(StartServer(std::move(args)));
    attention_ = v1::AttentionService::NewStub(channel());
    shm_ = v1::SharedMemoryService::NewStub(channel());
  }

  std::unique_ptr<v1::AttentionService::Stub> attention_;
  std::unique_ptr<v1::SharedMemoryService::Stub> shm_;
};

TEST_F(SharedMemoryE2eTest, AttendsThroughARegionBitForBitWithTheBytesPath) {
  Start({"--shared_memory"});
  ShmObject object(kRegionBytes);
  auto lease = Register(*shm_, "inputs", object.key(), kRegionBytes);
  ASSERT_TRUE(lease->registered) << lease->reader->Finish().error_message();
  EXPECT_EQ(lease->first.region().name(), "inputs");
  EXPECT_EQ(lease->first.region().byte_size(), kRegionBytes);
  EXPECT_THAT(RegionNames(*shm_), ::testing::ElementsAre("inputs"));

  v1::AttendRequest request, shm_request;
  BuildRequests(object, "inputs", &request, &shm_request);
  v1::AttendResponse bytes_response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(attention_->Attend(&context, request, &bytes_response).ok());
  }
  // Garbage where the results go: the kernel must write every element.
  std::memset(object.data() + 3 * kTensorBytes, 0xa5,
              kTensorBytes + kWeightsBytes);
  v1::AttendResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status =
        attention_->Attend(&context, shm_request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_TRUE(response.output().data().empty());
  EXPECT_EQ(response.output().shared_memory().offset(), 3 * kTensorBytes);
  EXPECT_EQ(response.output().shared_memory().byte_size(), kTensorBytes);
  EXPECT_THAT(response.output().shape(),
              ::testing::ElementsAre(kB, kH, kL, kD));
  EXPECT_EQ(std::string(object.data() + 3 * kTensorBytes, kTensorBytes),
            bytes_response.output().data());
  EXPECT_EQ(std::string(object.data() + 4 * kTensorBytes, kWeightsBytes),
            bytes_response.weights().data());
  // The request carried references only.
  EXPECT_LT(shm_request.ByteSizeLong(), 1024u);

  // A stream message the same way.
  std::memset(object.data() + 3 * kTensorBytes, 0xa5,
              kTensorBytes + kWeightsBytes);
  {
    grpc::ClientContext context;
    auto stream = attention_->AttendStream(&context);
    ASSERT_TRUE(stream->Write(shm_request));
    stream->WritesDone();
    v1::AttendResponse streamed;
    ASSERT_TRUE(stream->Read(&streamed));
    EXPECT_EQ(streamed.error_code(), 0) << streamed.error_message();
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_EQ(std::string(object.data() + 3 * kTensorBytes, kTensorBytes),
            bytes_response.output().data());
  EXPECT_EQ(std::string(object.data() + 4 * kTensorBytes, kWeightsBytes),
            bytes_response.weights().data());
  EXPECT_EQ(AwaitMetric(server(), "attnserve_shared_memory_calls_total", 2), 2);
  EXPECT_EQ(testing::MetricSample(server(), "attnserve_shared_memory_regions"),
            1);
  EXPECT_EQ(testing::MetricSample(server(), "attnserve_shared_memory_bytes"),
            kRegionBytes);

  // Unregister ends the lease with OK; the name is gone.
  {
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryRequest unregister;
    unregister.set_name("inputs");
    v1::UnregisterSharedMemoryResponse unregistered;
    ASSERT_TRUE(shm_->Unregister(&context, unregister, &unregistered).ok());
  }
  EXPECT_TRUE(lease->reader->Finish().ok());
  EXPECT_THAT(RegionNames(*shm_), ::testing::IsEmpty());
  grpc::ClientContext context;
  const grpc::Status after =
      attention_->Attend(&context, shm_request, &response);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(after.error_message(),
              HasSubstr("query.shared_memory.region: no shared memory region "
                        "\"inputs\""));
  EXPECT_EQ(testing::MetricSample(server(), "attnserve_shared_memory_regions"),
            0);
}

TEST_F(SharedMemoryE2eTest, EndingTheRegisterCallUnregisters) {
  Start({"--shared_memory"});
  ShmObject object(4096);
  auto lease = Register(*shm_, "leased", object.key(), 4096);
  ASSERT_TRUE(lease->registered);
  // A second registration of the name is refused while the first lives.
  auto twice = Register(*shm_, "leased", object.key(), 4096);
  EXPECT_FALSE(twice->registered);
  EXPECT_EQ(twice->reader->Finish().error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  lease->context.TryCancel();
  EXPECT_EQ(lease->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!RegionNames(*shm_).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(RegionNames(*shm_), ::testing::IsEmpty());
  // And the name can be registered again.
  auto again = Register(*shm_, "leased", object.key(), 4096);
  EXPECT_TRUE(again->registered);
}

TEST_F(SharedMemoryE2eTest, ShutdownWithALeaseOpenEndsItAndExitsCleanly) {
  Start({"--shared_memory", "--shutdown_grace=5s"});
  ShmObject object(4096);
  auto lease = Register(*shm_, "held", object.key(), 4096);
  ASSERT_TRUE(lease->registered);
  const absl::Time start = absl::Now();
  server().Kill(SIGTERM);
  auto exited = server().WaitForExit(absl::Seconds(20));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_EQ(*exited, 0) << server().Log();
  // An open lease is no call in flight: no wait for the grace.
  EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << server().Log();
  EXPECT_NE(lease->reader->Finish().error_code(), grpc::StatusCode::OK);
}

TEST_F(SharedMemoryE2eTest, RefusesBadRegistrationsWithTheirCodes) {
  Start({"--shared_memory", "--shared_memory_prefix=team_a_"});
  ShmObject object(4096);  // "attnserve_test_...": outside team_a_
  auto outside = Register(*shm_, "x", object.key(), 4096);
  EXPECT_FALSE(outside->registered);
  const grpc::Status status = outside->reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("does not start with the server's prefix \"team_a_\""));
  auto tricky = Register(*shm_, "x", "team_a_/../" + object.key(), 4096);
  EXPECT_FALSE(tricky->registered);
  EXPECT_EQ(tricky->reader->Finish().error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  auto missing = Register(*shm_, "x", "team_a_missing", 4096);
  EXPECT_FALSE(missing->registered);
  EXPECT_EQ(missing->reader->Finish().error_code(),
            grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext context;
  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name("x");
  v1::UnregisterSharedMemoryResponse unregistered;
  EXPECT_EQ(shm_->Unregister(&context, unregister, &unregistered).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(SharedMemoryE2eTest, OffByDefaultEveryCallAndReferenceIsRefused) {
  Start({});
  ShmObject object(kRegionBytes);
  auto lease = Register(*shm_, "r", object.key(), kRegionBytes);
  EXPECT_FALSE(lease->registered);
  const grpc::Status registered = lease->reader->Finish();
  EXPECT_EQ(registered.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(registered.error_message(), HasSubstr("--shared_memory"));
  {
    grpc::ClientContext context;
    v1::UnregisterSharedMemoryRequest request;
    request.set_name("r");
    v1::UnregisterSharedMemoryResponse response;
    const grpc::Status status = shm_->Unregister(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("--shared_memory"));
  }
  {
    grpc::ClientContext context;
    v1::SharedMemoryStatusResponse response;
    const grpc::Status status =
        shm_->Status(&context, v1::SharedMemoryStatusRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("--shared_memory"));
  }
  v1::AttendRequest request, shm_request;
  BuildRequests(object, "r", &request, &shm_request);
  grpc::ClientContext context;
  v1::AttendResponse response;
  const grpc::Status attended =
      attention_->Attend(&context, shm_request, &response);
  EXPECT_EQ(attended.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(attended.error_message(),
              HasSubstr("query.shared_memory: shared memory is off on this "
                        "server (start it with --shared_memory)"));
}

}  // namespace
}  // namespace attnserve
