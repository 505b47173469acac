// The Attend references to shared-memory regions
// (server/shared_memory_codec.h through DecodeRequest): every malformed
// reference with its code and message, alignment counted from the region's
// place in its object, zero-copy views into the mapping, and a region that
// shrinks before and during a call (the SIGBUS guard). The registry itself is
// tests/server/shm/.

#include "server/shared_memory_codec.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/request_codec.h"
#include "server/shm/shared_memory_registry.h"
#include "tests/util/shm_object.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::ShmObject;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<SharedMemoryRegistry> MakeRegistry(
    SharedMemoryOptions options = {}) {
  options.enabled = true;
  auto registry = SharedMemoryRegistry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

// Alignment is the element's place in the object: a region starting at an
// odd byte of its object makes offset 0 misaligned for f32.
TEST(SharedMemoryRegistryTest, AlignmentCountsTheRegionsOffset) {
  ShmObject object(8192);
  auto registry = MakeRegistry();
  ASSERT_TRUE(registry->Register("odd", object.key(), 4096, 2).ok());
  v1::Tensor tensor;
  tensor.mutable_shared_memory()->set_region("odd");
  tensor.mutable_shared_memory()->set_byte_size(16);
  SharedMemoryUse use;
  EXPECT_THAT(
      use.Input("query", tensor, 4, registry.get()).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("query.shared_memory.offset: 0 (byte 2 of the "
                         "object: the region starts at 2) is not a multiple "
                         "of the element size 4 (misaligned)")));
  tensor.mutable_shared_memory()->set_offset(2);
  EXPECT_TRUE(use.Input("query", tensor, 4, registry.get()).ok());
}

// Attend references, through DecodeRequest.
constexpr int64_t kB = 1, kH = 2, kL = 4, kD = 4;
constexpr int64_t kTensorBytes = kB * kH * kL * kD * 4;  // 128

class SharedMemoryCodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions options;
    options.num_threads = 1;
    auto engine = AttentionEngine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(engine).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  SharedMemoryCodecTest() : object_(4096), registry_(MakeRegistry()) {
    auto region = registry_->Register("r", object_.key(), 4096);
    EXPECT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
  }

  // q, k, v at 0, 128, 256 of region "r", filled with the bytes of random
  // tensors; `bytes` keeps the same request with data instead.
  v1::AttendRequest ShmRequest(v1::AttendRequest* bytes = nullptr) {
    v1::AttendRequest request;
    v1::Tensor* tensors[] = {request.mutable_query(), request.mutable_key(),
                             request.mutable_value()};
    for (int i = 0; i < 3; ++i) {
      ToWire(TestTensor::Random(DType::kFloat32, {kB, kH, kL, kD}, i + 1),
             tensors[i]);
      std::memcpy(region_->data() + i * kTensorBytes, tensors[i]->data().data(),
                  kTensorBytes);
    }
    if (bytes != nullptr) *bytes = request;
    for (int i = 0; i < 3; ++i) {
      tensors[i]->clear_data();
      Ref(tensors[i]->mutable_shared_memory(), i * kTensorBytes, kTensorBytes);
    }
    return request;
  }
  static void Ref(v1::SharedMemoryRef* ref, int64_t offset, int64_t size,
                  const char* region = "r") {
    ref->set_region(region);
    ref->set_offset(offset);
    ref->set_byte_size(size);
  }
  absl::StatusOr<DecodedRequest> Decode(const v1::AttendRequest& request) {
    return DecodeRequest(request, *engine_, RequestLimits(), registry_.get());
  }

  static AttentionEngine* engine_;
  ShmObject object_;
  std::unique_ptr<SharedMemoryRegistry> registry_;
  std::shared_ptr<SharedRegion> region_;
};

AttentionEngine* SharedMemoryCodecTest::engine_ = nullptr;

TEST_F(SharedMemoryCodecTest, InputsAreViewsIntoTheMappingNotCopies) {
  const v1::AttendRequest request = ShmRequest();
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->inputs.query.data, region_->data());
  EXPECT_EQ(decoded->inputs.key.data, region_->data() + kTensorBytes);
  EXPECT_EQ(decoded->inputs.value.data, region_->data() + 2 * kTensorBytes);
  EXPECT_EQ(decoded->response_payload_bytes, kTensorBytes);
}

TEST_F(SharedMemoryCodecTest, ResultsEqualTheBytesPathBitForBit) {
  v1::AttendRequest bytes_request;
  v1::AttendRequest request = ShmRequest(&bytes_request);
  bytes_request.set_return_weights(true);
  request.set_return_weights(true);
  Ref(request.mutable_output_shared_memory(), 3 * kTensorBytes, kTensorBytes);
  Ref(request.mutable_weights_shared_memory(), 4 * kTensorBytes,
      kB * kH * kL * kL * 4);
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->response_payload_bytes, 0);
  v1::AttendResponse response;
  const AttentionOutputs outputs = PrepareResponse(*decoded, &response);
  EXPECT_EQ(outputs.output.data, region_->data() + 3 * kTensorBytes);
  ASSERT_TRUE(engine_->Run(decoded->inputs, outputs).ok());
  ASSERT_TRUE(decoded->shared_memory.Finish().ok());
  EXPECT_TRUE(response.output().data().empty());
  EXPECT_EQ(response.output().shared_memory().offset(), 3 * kTensorBytes);
  EXPECT_THAT(response.output().shape(),
              ::testing::ElementsAre(kB, kH, kL, kD));
  EXPECT_TRUE(response.weights().has_shared_memory());
  EXPECT_EQ(region_->calls(), 1);
  EXPECT_EQ(registry_->Stats().calls, 1);

  auto decoded_bytes =
      DecodeRequest(bytes_request, *engine_, RequestLimits(), nullptr);
  ASSERT_TRUE(decoded_bytes.ok());
  v1::AttendResponse bytes_response;
  ASSERT_TRUE(engine_
                  ->Run(decoded_bytes->inputs,
                        PrepareResponse(*decoded_bytes, &bytes_response))
                  .ok());
  EXPECT_EQ(std::string(region_->data() + 3 * kTensorBytes, kTensorBytes),
            bytes_response.output().data());
  EXPECT_EQ(std::string(region_->data() + 4 * kTensorBytes,
                        bytes_response.weights().data().size()),
            bytes_response.weights().data());
}

// The kernels write every element of a result in place: over garbage in the
// region, every method, mask and dtype gives the bytes path's results.
TEST_F(SharedMemoryCodecTest, EveryVariantOverwritesTheWholeOutputSpan) {
  struct Variant {
    const char* name;
    std::function<void(v1::AttendRequest*)> apply;
  };
  const std::vector<Variant> variants = {
      {"causal, no key allowed, weights",
       [](v1::AttendRequest* r) {
         r->mutable_mask()->set_causal(true);
         r->mutable_mask()->add_key_lengths(0);
         r->set_return_weights(true);
       }},
      {"window, bf16 output",
       [](v1::AttendRequest* r) {
         r->mutable_mask()->set_window_left(1);
         r->mutable_mask()->set_window_right(0);
         r->set_output_dtype(v1::BFLOAT16);
       }},
      {"blhd, weights",
       [](v1::AttendRequest* r) {
         r->set_layout(v1::BLHD);
         r->set_return_weights(true);
       }},
      {"linear",
       [](v1::AttendRequest* r) {
         r->mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
       }},
      {"lsh",
       [](v1::AttendRequest* r) {
         r->clear_key();
         v1::LshAttention* lsh = r->mutable_lsh();
         lsh->set_num_hashes(2);
         lsh->set_num_buckets(2);
         lsh->set_chunk_size(2);
         lsh->set_seed(5);
       }},
  };
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.name);
    v1::AttendRequest bytes_request;
    v1::AttendRequest request = ShmRequest(&bytes_request);
    variant.apply(&bytes_request);
    variant.apply(&request);
    auto decoded_bytes =
        DecodeRequest(bytes_request, *engine_, RequestLimits(), nullptr);
    ASSERT_TRUE(decoded_bytes.ok()) << decoded_bytes.status();
    v1::AttendResponse bytes_response;
    ASSERT_TRUE(engine_
                    ->Run(decoded_bytes->inputs,
                          PrepareResponse(*decoded_bytes, &bytes_response))
                    .ok());
    const int64_t output_bytes =
        static_cast<int64_t>(bytes_response.output().data().size());
    const int64_t weights_bytes =
        static_cast<int64_t>(bytes_response.weights().data().size());
    Ref(request.mutable_output_shared_memory(), 512, output_bytes);
    if (weights_bytes > 0) {
      Ref(request.mutable_weights_shared_memory(), 1024, weights_bytes);
    }
    std::memset(region_->data() + 512, 0xa5, 4096 - 512);
    auto decoded = Decode(request);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    v1::AttendResponse response;
    ASSERT_TRUE(
        engine_->Run(decoded->inputs, PrepareResponse(*decoded, &response))
            .ok());
    ASSERT_TRUE(decoded->shared_memory.Finish().ok());
    EXPECT_EQ(std::string(region_->data() + 512, output_bytes),
              bytes_response.output().data());
    EXPECT_EQ(std::string(region_->data() + 1024, weights_bytes),
              bytes_response.weights().data());
  }
}

TEST_F(SharedMemoryCodecTest, OffOrWithoutARegistryIsFailedPrecondition) {
  const v1::AttendRequest request = ShmRequest();
  EXPECT_THAT(
      DecodeRequest(request, *engine_, RequestLimits(), nullptr).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("query.shared_memory"),
                     HasSubstr("--shared_memory"))));
}

TEST_F(SharedMemoryCodecTest, RefusesEveryMalformedInputReference) {
  struct Case {
    const char* what;
    std::function<void(v1::AttendRequest*)> mutate;
    absl::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"data as well",
       [](v1::AttendRequest* r) { r->mutable_key()->set_data("x"); },
       absl::StatusCode::kInvalidArgument,
       "key: data (1 bytes) and shared_memory are both set"},
      {"unknown region",
       [](v1::AttendRequest* r) {
         r->mutable_value()->mutable_shared_memory()->set_region("nope");
       },
       absl::StatusCode::kNotFound,
       "value.shared_memory.region: no shared memory region \"nope\""},
      {"negative offset",
       [](v1::AttendRequest* r) {
         r->mutable_query()->mutable_shared_memory()->set_offset(-4);
       },
       absl::StatusCode::kInvalidArgument, "must not be negative"},
      {"negative size",
       [](v1::AttendRequest* r) {
         r->mutable_query()->mutable_shared_memory()->set_byte_size(-4);
       },
       absl::StatusCode::kInvalidArgument, "must not be negative"},
      {"misaligned",
       [](v1::AttendRequest* r) {
         r->mutable_query()->mutable_shared_memory()->set_offset(2);
       },
       absl::StatusCode::kInvalidArgument,
       "query.shared_memory.offset: 2 is not a multiple of the element size "
       "4 (misaligned)"},
      {"past the end",
       [](v1::AttendRequest* r) {
         r->mutable_key()->mutable_shared_memory()->set_offset(4096 - 64);
       },
       absl::StatusCode::kInvalidArgument,
       "key.shared_memory: bytes [4032, 4032 + 128) lie past the end of "
       "region \"r\" (4096 bytes)"},
      {"offset beyond",
       [](v1::AttendRequest* r) {
         r->mutable_key()->mutable_shared_memory()->set_offset(int64_t{1}
                                                               << 62);
       },
       absl::StatusCode::kInvalidArgument, "past the end"},
      {"size not the shape's",
       [](v1::AttendRequest* r) {
         r->mutable_query()->mutable_shared_memory()->set_byte_size(124);
       },
       absl::StatusCode::kInvalidArgument, "query"},
  };
  for (const Case& c : cases) {
    v1::AttendRequest request = ShmRequest();
    c.mutate(&request);
    EXPECT_THAT(Decode(request).status(),
                StatusIs(c.code, HasSubstr(c.message)))
        << c.what;
  }
}

TEST_F(SharedMemoryCodecTest, RefusesEveryMalformedOutputReference) {
  struct Case {
    const char* what;
    std::function<void(v1::AttendRequest*)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"wrong size",
       [](v1::AttendRequest* r) {
         Ref(r->mutable_output_shared_memory(), 512, 64);
       },
       "output_shared_memory.byte_size: 64 differs from the 128 bytes of the "
       "output"},
      {"overlaps an input",
       [](v1::AttendRequest* r) {
         Ref(r->mutable_output_shared_memory(), 256, 128);
       },
       "output_shared_memory: bytes [256, 384) of region \"r\" overlap those "
       "of value [256, 384)"},
      {"weights overlap the output",
       [](v1::AttendRequest* r) {
         r->set_return_weights(true);
         Ref(r->mutable_output_shared_memory(), 512, 128);
         Ref(r->mutable_weights_shared_memory(), 600, 128);
       },
       "weights_shared_memory: bytes [600, 728) of region \"r\" overlap "
       "those of output_shared_memory [512, 640)"},
      {"weights not asked for",
       [](v1::AttendRequest* r) {
         Ref(r->mutable_weights_shared_memory(), 512, 128);
       },
       "weights_shared_memory: set without return_weights"},
      {"misaligned output",
       [](v1::AttendRequest* r) {
         Ref(r->mutable_output_shared_memory(), 514, 128);
       },
       "misaligned"},
      {"past the end",
       [](v1::AttendRequest* r) {
         Ref(r->mutable_output_shared_memory(), 4000, 128);
       },
       "past the end"},
  };
  for (const Case& c : cases) {
    v1::AttendRequest request = ShmRequest();
    c.mutate(&request);
    EXPECT_THAT(
        Decode(request).status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.what;
  }
  v1::AttendRequest unknown = ShmRequest();
  Ref(unknown.mutable_output_shared_memory(), 0, 128, "nope");
  EXPECT_THAT(
      Decode(unknown).status(),
      StatusIs(
          absl::StatusCode::kNotFound,
          HasSubstr("output_shared_memory.region: no shared memory region")));
}

TEST_F(SharedMemoryCodecTest, OtherTensorsInSharedMemoryAreRefused) {
  v1::AttendRequest request = ShmRequest();
  v1::Tensor* mask = request.mutable_mask()->mutable_explicit_mask();
  mask->set_dtype(v1::BOOL);
  mask->add_shape(kL);
  Ref(mask->mutable_shared_memory(), 1024, kL);
  EXPECT_THAT(
      Decode(request).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("mask.explicit_mask.shared_memory: only the query, "
                         "key and value")));
}

TEST_F(SharedMemoryCodecTest, ARegionTruncatedBeforeTheCallIsRefused) {
  const v1::AttendRequest request = ShmRequest();
  object_.Truncate(1024);
  EXPECT_THAT(Decode(request).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("query.shared_memory"),
                             HasSubstr("truncated"))));
}

TEST_F(SharedMemoryCodecTest, ARegionTruncatedDuringTheCallFailsIt) {
  const v1::AttendRequest request = ShmRequest();
  auto decoded = Decode(request);
  ASSERT_TRUE(decoded.ok());
  object_.Truncate(0);
  v1::AttendResponse response;
  ASSERT_TRUE(
      engine_->Run(decoded->inputs, PrepareResponse(*decoded, &response)).ok());
  EXPECT_THAT(decoded->shared_memory.Finish(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shrank below its registered 4096 bytes "
                                 "during a call")));
  EXPECT_EQ(registry_->Stats().calls, 0);
}

}  // namespace
}  // namespace attnserve::server
