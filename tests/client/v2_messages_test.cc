// client/v2_messages.h: the ModelInfer request of an AttendRequest, with its
// tensors' bytes in raw_input_contents, or with Triton's shared-memory
// parameters for the tensors and outputs that refer to a region (attnctl
// --protocol=v2 --shm); and the AttendResponse a ModelInferResponse means.

#include "client/v2_messages.h"

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

TEST(V2RequestTest, TheLongSequenceVariantsCannotBeCarried) {
  v1::AttendRequest request;
  EXPECT_TRUE(CheckV2CanCarry(request).ok());
  request.mutable_lsh()->set_num_hashes(2);
  EXPECT_THAT(CheckV2CanCarry(request).message(),
              ::testing::HasSubstr("cannot carry LSH attention"));
  request.mutable_linear();
  EXPECT_THAT(CheckV2CanCarry(request).message(),
              ::testing::HasSubstr("cannot carry linear attention"));
  request.clear_linear();
  request.mutable_mask()->mutable_block_sparse()->set_block_size(16);
  EXPECT_EQ(CheckV2CanCarry(request).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CheckV2CanCarry(request).message(),
              ::testing::HasSubstr("a block-sparse layout"));
  request.mutable_mask()->clear_block_sparse();
  request.mutable_mask()->mutable_relative_keys()->set_zero_row(1);
  EXPECT_THAT(CheckV2CanCarry(request).message(),
              ::testing::HasSubstr("cannot carry relative position keys"));
}

inference::ModelInferResponse TwoOutputs() {
  inference::ModelInferResponse r;
  r.set_id("call-7");
  auto* output = r.add_outputs();
  output->set_name("output");
  output->set_datatype("FP32");
  for (int64_t d : {1, 1, 2, 2}) output->add_shape(d);
  auto* weights = r.add_outputs();
  weights->set_name("weights");
  weights->set_datatype("FP32");
  for (int64_t d : {1, 1, 2, 3}) weights->add_shape(d);
  r.add_raw_output_contents(std::string(16, 'o'));
  r.add_raw_output_contents(std::string(24, 'w'));
  auto& p = *r.mutable_parameters();
  p["timing.queue_us"].set_int64_param(11);
  p["timing.compute_us"].set_int64_param(22);
  p["timing.total_us"].set_int64_param(40);
  p["timing.flops"].set_int64_param(1024);
  return r;
}

TEST(V2ResponseTest, OutputsTensorsAndTimingAsTheNativeResponse) {
  absl::StatusOr<v1::AttendResponse> r = FromModelInferResponse(TwoOutputs());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request_id(), "call-7");
  EXPECT_EQ(r->output().dtype(), v1::FLOAT32);
  EXPECT_THAT(r->output().shape(), ::testing::ElementsAre(1, 1, 2, 2));
  EXPECT_EQ(r->output().data(), std::string(16, 'o'));
  EXPECT_THAT(r->weights().shape(), ::testing::ElementsAre(1, 1, 2, 3));
  EXPECT_EQ(r->weights().data(), std::string(24, 'w'));
  EXPECT_EQ(r->timing().queue_us(), 11);
  EXPECT_EQ(r->timing().compute_us(), 22);
  EXPECT_EQ(r->timing().total_us(), 40);
  EXPECT_EQ(r->timing().flops(), 1024.0);
}

TEST(V2ResponseTest, AnOutputInARegionBecomesItsReference) {
  inference::ModelInferResponse v2 = TwoOutputs();
  auto& p = *v2.mutable_outputs(0)->mutable_parameters();
  p["shared_memory_region"].set_string_param("attnctl_region");
  p["shared_memory_offset"].set_int64_param(64);
  p["shared_memory_byte_size"].set_int64_param(16);
  v2.set_raw_output_contents(0, "");
  absl::StatusOr<v1::AttendResponse> r = FromModelInferResponse(v2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->output().data().empty());
  EXPECT_EQ(r->output().shared_memory().region(), "attnctl_region");
  EXPECT_EQ(r->output().shared_memory().offset(), 64);
  EXPECT_EQ(r->output().shared_memory().byte_size(), 16);
  EXPECT_EQ(r->weights().data(), std::string(24, 'w'));
}

TEST(V2ResponseTest, WhatDoesNotReadIsInvalidArgumentNamingTheField) {
  struct Case {
    const char* what;
    void (*change)(inference::ModelInferResponse*);
    const char* message;
  };
  const Case cases[] = {
      {"an unknown output",
       [](inference::ModelInferResponse* r) {
         r->mutable_outputs(1)->set_name("scores");
       },
       "outputs[1] (scores): not an output of attnserve"},
      {"a datatype attnserve has not",
       [](inference::ModelInferResponse* r) {
         r->mutable_outputs(0)->set_datatype("FP64");
       },
       "outputs[0] (output).datatype"},
      {"raw entries not one per output",
       [](inference::ModelInferResponse* r) {
         r->mutable_raw_output_contents()->RemoveLast();
       },
       "raw_output_contents: 1 entries for 2 outputs"},
      {"an output with neither a raw entry nor a region",
       [](inference::ModelInferResponse* r) { r->clear_raw_output_contents(); },
       "outputs[0] (output): no raw_output_contents entry and no "
       "shared_memory_region"},
      {"an output given twice",
       [](inference::ModelInferResponse* r) {
         r->mutable_outputs(1)->set_name("output");
       },
       "outputs[1] (output): given twice"},
      {"no output",
       [](inference::ModelInferResponse* r) {
         r->mutable_outputs()->DeleteSubrange(0, 1);
         r->mutable_raw_output_contents()->DeleteSubrange(0, 1);
       },
       "outputs: no \"output\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    inference::ModelInferResponse v2 = TwoOutputs();
    c.change(&v2);
    absl::StatusOr<v1::AttendResponse> r = FromModelInferResponse(v2);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace attnserve::client
