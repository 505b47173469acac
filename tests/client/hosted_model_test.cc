#include "client/hosted_model.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::client {
namespace {

v1::ModelInfo Model(int64_t d_model, int heads, int kv_heads, int head_dim,
                    const std::string& config_json) {
  v1::ModelInfo model;
  model.set_name("m");
  model.set_d_model(d_model);
  model.set_num_heads(heads);
  model.set_num_kv_heads(kv_heads);
  model.set_head_dim(head_dim);
  model.set_config_json(config_json);
  return model;
}

TEST(ModelSummaryTest, ShapeAndConfigKeys) {
  const v1::ModelInfo model =
      Model(64, 8, 2, 8,
            R"({"d_model":64,"norm":"pre","positional":"rope",)"
            R"("scoring":"scaled_dot","dtype":"bfloat16"})");
  EXPECT_EQ(ModelShapeText(model), "d_model 64, heads 8/2, head_dim 8");
  EXPECT_EQ(ModelSummary(model),
            "d_model 64, heads 8/2, head_dim 8, scaled_dot, positional rope, "
            "norm pre, bfloat16");
  EXPECT_EQ(ModelSummary(Model(64, 8, 2, 8, "[1]")),
            "d_model 64, heads 8/2, head_dim 8");
  EXPECT_EQ(ModelOutputBytes(model, 2, 3, v1::BFLOAT16), 2 * 3 * 64 * 2);
}

TEST(ModelRequestTextTest, DescribesTheRequest) {
  v1::ModelRequest request;
  request.set_model("mha_post");
  request.mutable_hidden()->set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 2, 64}) request.mutable_hidden()->add_shape(d);
  EXPECT_EQ(ModelRequestText(request),
            "mha_post f32 hidden [1, 2, 64]; mask none");
  for (int64_t d : {1, 5, 64}) request.mutable_memory()->add_shape(d);
  v1::Tensor* positions = request.mutable_positions();
  positions->set_dtype(v1::INT32);
  positions->add_shape(1);
  positions->add_shape(2);
  positions->set_data(std::string("\x04\x01\0\0\x05\x01\0\0", 8));
  request.mutable_mask()->set_causal(true);
  request.set_return_weights(true);
  EXPECT_EQ(ModelRequestText(request),
            "mha_post f32 hidden [1, 2, 64] memory [1, 5, 64]; positions "
            "260..261; mask causal top_left; weights");
  positions->set_data("");
  EXPECT_EQ(PositionsText(*positions), "[]");
}

TEST(FindModelInfoTest, ByName) {
  v1::ServerInfo info;
  info.add_models()->set_name("a");
  info.add_models()->set_name("b");
  ASSERT_NE(FindModelInfo(info, "b"), nullptr);
  EXPECT_EQ(FindModelInfo(info, "b")->name(), "b");
  EXPECT_EQ(FindModelInfo(info, "c"), nullptr);
}

}  // namespace
}  // namespace attnserve::client
