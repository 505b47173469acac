// Triton's system shared memory over the Open Inference Protocol against a
// real attnserve process: SystemSharedMemoryRegister (at an offset of the
// object, its key with the leading "/" Triton's clients send), ModelInfer
// with inputs read from and outputs written into the region, bit for bit
// with the bytes path, Status, Unregister and the call that names the
// unregistered region; one registry and one set of limits with attnserve.v1
// (an unregister-all ends v1 leases); and the refusals with --shared_memory
// off.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/shm_object.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ServerTest;
using ::attnserve::testing::ShmObject;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::inference::GRPCInferenceService;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t kB = 1, kH = 4, kL = 64, kD = 32;
constexpr int64_t kTensorBytes = kB * kH * kL * kD * 4;
constexpr int64_t kWeightsBytes = kB * kH * kL * kL * 4;
// The region: q, k, v, output, weights, one after another, from byte
// kRegionOffset of the object (not a page boundary: the server maps from
// the page below).
constexpr int64_t kRegionOffset = 4096 + 64;
constexpr int64_t kRegionBytes = 4 * kTensorBytes + kWeightsBytes;

class KserveSharedMemoryE2eTest : public ServerTest {
 protected:
  void Start(std::vector<std::string> args) {
    ASSERT_NO_FATAL_FAILURE(StartServer(std::move(args)));
    v2_ = GRPCInferenceService::NewStub(channel());
    v1_ = v1::SharedMemoryService::NewStub(channel());
  }

  grpc::Status Register(const std::string& name, const std::string& key,
                        uint64_t offset, uint64_t byte_size) {
    grpc::ClientContext context;
    inference::SystemSharedMemoryRegisterRequest request;
    request.set_name(name);
    request.set_key(key);
    request.set_offset(offset);
    request.set_byte_size(byte_size);
    inference::SystemSharedMemoryRegisterResponse response;
    return v2_->SystemSharedMemoryRegister(&context, request, &response);
  }

  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse response;
    return v2_->SystemSharedMemoryUnregister(&context, request, &response);
  }

  grpc::Status Status(const std::string& name,
                      inference::SystemSharedMemoryStatusResponse* response) {
    grpc::ClientContext context;
    inference::SystemSharedMemoryStatusRequest request;
    request.set_name(name);
    return v2_->SystemSharedMemoryStatus(&context, request, response);
  }

  grpc::Status Infer(const ModelInferRequest& request,
                     ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return v2_->ModelInfer(&context, request, response);
  }

  std::unique_ptr<GRPCInferenceService::Stub> v2_;
  std::unique_ptr<v1::SharedMemoryService::Stub> v1_;
};

// What tritonclient's InferInput/InferRequestedOutput.set_shared_memory put
// on a tensor: the region and byte size, the offset only when not 0.
template <typename Tensor>
void SetSharedMemory(Tensor* tensor, const std::string& region, int64_t offset,
                     int64_t byte_size) {
  auto& p = *tensor->mutable_parameters();
  p["shared_memory_region"].set_string_param(region);
  p["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset != 0) p["shared_memory_offset"].set_int64_param(offset);
}

// A causal call with weights in bytes (`bytes`), and the same call with
// query and key in `region` (value stays in raw_input_contents, as one
// entry: none for the inputs in shared memory), the output written to the
// region and the weights to the region too (`all_in_region`) or returned as
// bytes. `object_region` is the object's bytes from the region's start.
void BuildRequests(char* object_region, const std::string& region,
                   bool all_in_region, ModelInferRequest* bytes,
                   ModelInferRequest* shm) {
  for (ModelInferRequest* r : {bytes, shm}) {
    r->set_model_name("attention");
    (*r->mutable_parameters())["causal"].set_bool_param(true);
    (*r->mutable_parameters())["return_weights"].set_bool_param(true);
  }
  const char* names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i) {
    v1::Tensor t;
    ToWire(TestTensor::Random(DType::kFloat32, {kB, kH, kL, kD}, 70 + i), &t);
    for (ModelInferRequest* r : {bytes, shm}) {
      auto* in = r->add_inputs();
      in->set_name(names[i]);
      in->set_datatype("FP32");
      for (int64_t d : t.shape()) in->add_shape(d);
    }
    bytes->add_raw_input_contents(t.data());
    std::memcpy(object_region + i * kTensorBytes, t.data().data(),
                kTensorBytes);
    if (i < 2) {
      SetSharedMemory(shm->mutable_inputs(i), region, i * kTensorBytes,
                      kTensorBytes);
    } else {
      shm->add_raw_input_contents(t.data());
    }
  }
  bytes->add_outputs()->set_name("output");
  bytes->add_outputs()->set_name("weights");
  auto* output = shm->add_outputs();
  output->set_name("output");
  SetSharedMemory(output, region, 3 * kTensorBytes, kTensorBytes);
  auto* weights = shm->add_outputs();
  weights->set_name("weights");
  if (all_in_region) {
    SetSharedMemory(weights, region, 4 * kTensorBytes, kWeightsBytes);
  }
}

TEST_F(KserveSharedMemoryE2eTest,
       RegistersInfersBitForBitWithTheBytesPathAndUnregisters) {
  Start({"--shared_memory"});
  ShmObject object(kRegionOffset + kRegionBytes);
  char* region = object.data() + kRegionOffset;
  // With the leading "/", as tritonclient's create_shared_memory_region keys.
  const grpc::Status registered =
      Register("v2in", "/" + object.key(), kRegionOffset, kRegionBytes);
  ASSERT_TRUE(registered.ok()) << registered.error_message();

  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse meta;
    ASSERT_TRUE(
        v2_->ServerMetadata(&context, inference::ServerMetadataRequest(), &meta)
            .ok());
    EXPECT_THAT(meta.extensions(), Contains("system_shared_memory"));
  }
  {
    inference::SystemSharedMemoryStatusResponse status;
    ASSERT_TRUE(Status("", &status).ok());
    ASSERT_EQ(status.regions().size(), 1u);
    const auto& r = status.regions().at("v2in");
    EXPECT_EQ(r.name(), "v2in");
    EXPECT_EQ(r.key(), "/" + object.key());
    EXPECT_EQ(r.offset(), static_cast<uint64_t>(kRegionOffset));
    EXPECT_EQ(r.byte_size(), static_cast<uint64_t>(kRegionBytes));
  }
  {
    // One registry: attnserve.v1's Status lists it too.
    grpc::ClientContext context;
    v1::SharedMemoryStatusResponse status;
    ASSERT_TRUE(
        v1_->Status(&context, v1::SharedMemoryStatusRequest(), &status).ok());
    ASSERT_EQ(status.regions_size(), 1);
    EXPECT_EQ(status.regions(0).name(), "v2in");
    EXPECT_EQ(status.regions(0).offset(), kRegionOffset);
  }

  for (const bool all_in_region : {false, true}) {
    SCOPED_TRACE(all_in_region ? "weights in the region" : "weights as bytes");
    ModelInferRequest bytes, shm;
    BuildRequests(region, "v2in", all_in_region, &bytes, &shm);
    ModelInferResponse expected, got;
    ASSERT_TRUE(Infer(bytes, &expected).ok());
    ASSERT_EQ(expected.raw_output_contents_size(), 2);
    // Garbage where the results go: the kernel must write every element.
    std::memset(region + 3 * kTensorBytes, 0xa5, kTensorBytes + kWeightsBytes);
    const grpc::Status inferred = Infer(shm, &got);
    ASSERT_TRUE(inferred.ok()) << inferred.error_message();
    EXPECT_EQ(std::string(region + 3 * kTensorBytes, kTensorBytes),
              expected.raw_output_contents(0));
    ASSERT_EQ(got.outputs_size(), 2);
    EXPECT_EQ(got.outputs(0).name(), "output");
    EXPECT_EQ(got.outputs(0).datatype(), "FP32");
    EXPECT_THAT(got.outputs(0).shape(), ElementsAre(kB, kH, kL, kD));
    const auto& p = got.outputs(0).parameters();
    EXPECT_EQ(p.at("shared_memory_region").string_param(), "v2in");
    EXPECT_EQ(p.at("shared_memory_offset").int64_param(), 3 * kTensorBytes);
    EXPECT_EQ(p.at("shared_memory_byte_size").int64_param(), kTensorBytes);
    // One entry per output, empty for the one in the region.
    ASSERT_EQ(got.raw_output_contents_size(), 2);
    EXPECT_THAT(got.raw_output_contents(0), IsEmpty());
    if (all_in_region) {
      EXPECT_THAT(got.raw_output_contents(1), IsEmpty());
      EXPECT_EQ(std::string(region + 4 * kTensorBytes, kWeightsBytes),
                expected.raw_output_contents(1));
    } else {
      EXPECT_EQ(got.raw_output_contents(1), expected.raw_output_contents(1));
      EXPECT_TRUE(got.outputs(1).parameters().empty());
    }
  }

  ASSERT_TRUE(Unregister("v2in").ok());
  {
    inference::SystemSharedMemoryStatusResponse status;
    ASSERT_TRUE(Status("", &status).ok());
    EXPECT_TRUE(status.regions().empty());
    const grpc::Status one = Status("v2in", &status);
    EXPECT_EQ(one.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(one.error_message(), HasSubstr("\"v2in\""));
  }
  // As in Triton, unregistering what is not registered is no error.
  EXPECT_TRUE(Unregister("v2in").ok());
  ModelInferRequest bytes, shm;
  BuildRequests(region, "v2in", true, &bytes, &shm);
  ModelInferResponse got;
  const grpc::Status after = Infer(shm, &got);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(after.error_message(),
              HasSubstr("query.shared_memory.region: no shared memory region "
                        "\"v2in\" is registered"));
}

TEST_F(KserveSharedMemoryE2eTest, OneRegistryAndItsLimitsForBothProtocols) {
  Start({"--shared_memory", "--shared_memory_max_regions=2"});
  ShmObject object(8192);
  ASSERT_TRUE(Register("a", object.key(), 0, 4096).ok());
  // An attnserve.v1 lease in the same registry.
  grpc::ClientContext lease_context;
  v1::RegisterSharedMemoryRequest lease_request;
  lease_request.set_name("b");
  lease_request.set_key(object.key());
  lease_request.set_byte_size(4096);
  auto lease = v1_->Register(&lease_context, lease_request);
  v1::SharedMemoryLease first;
  ASSERT_TRUE(lease->Read(&first));
  // Names are global and the limit counts both.
  const grpc::Status taken = Register("b", object.key(), 0, 4096);
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  const grpc::Status third = Register("c", object.key(), 4096, 4096);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.error_message(),
              HasSubstr("--shared_memory_max_regions=2"));
  // Unregister-all takes the v1 region too, and its lease call ends OK.
  ASSERT_TRUE(Unregister("").ok());
  EXPECT_TRUE(lease->Finish().ok());
  inference::SystemSharedMemoryStatusResponse status;
  ASSERT_TRUE(Status("", &status).ok());
  EXPECT_TRUE(status.regions().empty());
  EXPECT_TRUE(Register("c", object.key(), 4096, 4096).ok());
}

TEST_F(KserveSharedMemoryE2eTest, RefusesBadRegistrationsWithTheirCodes) {
  Start({"--shared_memory"});
  ShmObject object(4096);
  const auto code = [](const grpc::Status& s) { return s.error_code(); };
  EXPECT_EQ(code(Register("x", "attnserve_missing", 0, 16)),
            grpc::StatusCode::NOT_FOUND);
  const grpc::Status outside = Register("x", "/dev_shm_other", 0, 16);
  EXPECT_EQ(code(outside), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(outside.error_message(), HasSubstr("--shared_memory_prefix"));
  EXPECT_EQ(code(Register("x", "//" + object.key(), 0, 16)),
            grpc::StatusCode::INVALID_ARGUMENT);
  const grpc::Status empty = Register("x", object.key(), 0, 0);
  EXPECT_EQ(code(empty), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("byte_size"));
  const grpc::Status past = Register("x", object.key(), 4000, 100);
  EXPECT_EQ(code(past), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(past.error_message(), HasSubstr("offset 4000 + 100 exceeds"));
  const grpc::Status huge = Register("x", object.key(), uint64_t{1} << 63, 1);
  EXPECT_EQ(code(huge), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(huge.error_message(), HasSubstr("offset"));
  EXPECT_EQ(code(Register("", object.key(), 0, 16)),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Register("x", object.key(), 0, 16).ok());
  EXPECT_EQ(code(Register("x", object.key(), 0, 16)),
            grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(KserveSharedMemoryE2eTest, OffByDefaultTheRpcsAndParametersAreRefused) {
  Start({});
  ShmObject object(kRegionBytes);
  const auto off = [](const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(),
                HasSubstr("shared memory is off on this server (start it "
                          "with --shared_memory)"));
  };
  off(Register("r", object.key(), 0, kRegionBytes));
  off(Unregister("r"));
  off(Unregister(""));
  inference::SystemSharedMemoryStatusResponse status;
  off(Status("", &status));
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse meta;
    ASSERT_TRUE(
        v2_->ServerMetadata(&context, inference::ServerMetadataRequest(), &meta)
            .ok());
    EXPECT_THAT(meta.extensions(), Not(Contains("system_shared_memory")));
  }
  ModelInferRequest bytes, shm;
  BuildRequests(object.data(), "r", true, &bytes, &shm);
  ModelInferResponse got;
  const grpc::Status inferred = Infer(shm, &got);
  EXPECT_EQ(inferred.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(inferred.error_message(),
              HasSubstr("query.shared_memory: shared memory is off"));
}

}  // namespace
}  // namespace attnserve
