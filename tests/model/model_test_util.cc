#include "tests/model/model_test_util.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "core/convert.h"
#include "gtest/gtest.h"
#include "model/model_weights.h"

namespace attnserve::testing {

void TensorSet::Add(const std::string& name, model::SafetensorsDType dtype,
                    std::vector<int64_t> shape,
                    const std::vector<float>& values) {
  std::string bytes;
  for (float value : values) {
    if (dtype == model::SafetensorsDType::kF32) {
      bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
      continue;
    }
    const uint16_t half = dtype == model::SafetensorsDType::kBF16
                              ? FloatToBFloat16(value)
                              : FloatToFloat16(value);
    bytes.append(reinterpret_cast<const char*>(&half), sizeof half);
  }
  AddRaw(name, dtype, std::move(shape), std::move(bytes));
}

void TensorSet::AddRaw(const std::string& name, model::SafetensorsDType dtype,
                       std::vector<int64_t> shape, std::string bytes) {
  storage_.push_back(std::move(bytes));
  tensors_[name] = {dtype, std::move(shape), storage_.back()};
}

TensorSet TensorsFor(const model::ModelConfig& config, int64_t additive_dim,
                     model::SafetensorsDType dtype) {
  TensorSet set;
  uint64_t state = 12345;
  for (const model::ExpectedTensor& tensor :
       model::ExpectedTensors(config, additive_dim)) {
    int64_t count = 1;
    for (int64_t d : tensor.shape) count *= d;
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(state >> 40) * 0x1p-23f - 1.0f;
    }
    set.Add(tensor.name, dtype, tensor.shape, values);
  }
  return set;
}

model::ModelConfig Config(absl::string_view json) {
  absl::StatusOr<model::ModelConfig> config = model::ParseModelConfig(json);
  EXPECT_TRUE(config.ok()) << config.status() << " for " << json;
  return config.ok() ? *config : model::ModelConfig{};
}

std::string RawSafetensors(absl::string_view header, absl::string_view data) {
  std::string out;
  uint64_t size = header.size();
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>(size & 0xff));
    size >>= 8;
  }
  out.append(header.data(), header.size());
  out.append(data.data(), data.size());
  return out;
}

}  // namespace attnserve::testing
