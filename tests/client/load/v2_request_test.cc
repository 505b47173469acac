// ToModelInferRequest: the ModelInfer request of an AttendRequest, with its
// tensors' bytes in raw_input_contents, or with Triton's shared-memory
// parameters for the tensors and outputs that refer to a region (attnctl
// bench --protocol=v2 --shm).

#include "client/load/v2_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::client {
namespace {

v1::Tensor F32Tensor(std::string bytes) {
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 1, 2, 2}) t.add_shape(d);
  t.set_data(std::move(bytes));
  return t;
}

v1::SharedMemoryRef Ref(int64_t offset, int64_t bytes) {
  v1::SharedMemoryRef r;
  r.set_region("attnctl_region");
  r.set_offset(offset);
  r.set_byte_size(bytes);
  return r;
}

// The parameters Triton's clients send for a tensor in a region.
void ExpectRef(
    const google::protobuf::Map<std::string, inference::InferParameter>& p,
    int64_t offset, int64_t bytes) {
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.at("shared_memory_region").string_param(), "attnctl_region");
  EXPECT_EQ(p.at("shared_memory_offset").int64_param(), offset);
  EXPECT_EQ(p.at("shared_memory_byte_size").int64_param(), bytes);
}

TEST(V2RequestTest, BytesGoToRawContentsInOrderAndNoOutputIsListed) {
  v1::AttendRequest request;
  *request.mutable_query() = F32Tensor(std::string(16, 'q'));
  *request.mutable_key() = F32Tensor(std::string(16, 'k'));
  *request.mutable_value() = F32Tensor(std::string(16, 'v'));
  request.set_return_weights(true);
  const inference::ModelInferRequest r = ToModelInferRequest(request);
  ASSERT_EQ(r.inputs_size(), 3);
  ASSERT_EQ(r.raw_input_contents_size(), 3);
  EXPECT_EQ(r.inputs(1).name(), "key");
  EXPECT_EQ(r.raw_input_contents(1), std::string(16, 'k'));
  EXPECT_TRUE(r.inputs(0).parameters().empty());
  EXPECT_EQ(r.outputs_size(), 0);
  EXPECT_TRUE(r.parameters().at("return_weights").bool_param());
}

TEST(V2RequestTest, TensorsInARegionCarryItsParametersAndNoRawEntry) {
  v1::AttendRequest request;
  *request.mutable_query() = F32Tensor("");
  *request.mutable_query()->mutable_shared_memory() = Ref(0, 16);
  // The key's bytes travel in the message, between two inputs in a region.
  *request.mutable_key() = F32Tensor(std::string(16, 'k'));
  *request.mutable_value() = F32Tensor("");
  *request.mutable_value()->mutable_shared_memory() = Ref(64, 16);
  *request.mutable_output_shared_memory() = Ref(128, 16);
  const inference::ModelInferRequest r = ToModelInferRequest(request);
  ASSERT_EQ(r.inputs_size(), 3);
  EXPECT_EQ(r.inputs(0).name(), "query");
  EXPECT_EQ(r.inputs(0).datatype(), "FP32");
  EXPECT_THAT(r.inputs(0).shape(), ::testing::ElementsAre(1, 1, 2, 2));
  ExpectRef(r.inputs(0).parameters(), 0, 16);
  EXPECT_TRUE(r.inputs(1).parameters().empty());
  ExpectRef(r.inputs(2).parameters(), 64, 16);
  // One entry: the key's, the only input not in the region.
  ASSERT_EQ(r.raw_input_contents_size(), 1);
  EXPECT_EQ(r.raw_input_contents(0), std::string(16, 'k'));
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "output");
  ExpectRef(r.outputs(0).parameters(), 128, 16);
}

TEST(V2RequestTest, WeightsAreListedBesideAnOutputInARegion) {
  v1::AttendRequest request;
  *request.mutable_query() = F32Tensor(std::string(16, 'q'));
  *request.mutable_key() = F32Tensor(std::string(16, 'k'));
  *request.mutable_value() = F32Tensor(std::string(16, 'v'));
  request.set_return_weights(true);
  *request.mutable_output_shared_memory() = Ref(0, 16);
  *request.mutable_weights_shared_memory() = Ref(64, 16);
  inference::ModelInferRequest r = ToModelInferRequest(request);
  ASSERT_EQ(r.outputs_size(), 2);
  EXPECT_EQ(r.outputs(1).name(), "weights");
  ExpectRef(r.outputs(1).parameters(), 64, 16);

  // Weights asked for as bytes beside an output in the region: listed, so
  // that the server still returns them, with no parameters.
  request.clear_weights_shared_memory();
  r = ToModelInferRequest(request);
  ASSERT_EQ(r.outputs_size(), 2);
  EXPECT_EQ(r.outputs(1).name(), "weights");
  EXPECT_TRUE(r.outputs(1).parameters().empty());
}

}  // namespace
}  // namespace attnserve::client
