#ifndef ATTNSERVE_TESTS_MODEL_MODEL_TEST_UTIL_H_
#define ATTNSERVE_TESTS_MODEL_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "tests/util/temp_dir.h"

namespace attnserve::testing {

// Tensors for SerializeSafetensors, owning their bytes.
class TensorSet {
 public:
  TensorSet() = default;
  // Moves keep the views valid (a deque's elements stay put); copies would
  // not.
  TensorSet(TensorSet&&) = default;
  TensorSet& operator=(TensorSet&&) = default;
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;

  // `values` converted to `dtype` (round to nearest even).
  void Add(const std::string& name, model::SafetensorsDType dtype,
           std::vector<int64_t> shape, const std::vector<float>& values);
  // Raw little-endian bytes, e.g. bit patterns or a wrong byte count.
  void AddRaw(const std::string& name, model::SafetensorsDType dtype,
              std::vector<int64_t> shape, std::string bytes);
  void Remove(const std::string& name) { tensors_.erase(name); }

  const std::map<std::string, model::SafetensorsTensor, std::less<>>& tensors()
      const {
    return tensors_;
  }
  std::string Serialize() const {
    return model::SerializeSafetensors(tensors_);
  }

 private:
  std::deque<std::string> storage_;
  std::map<std::string, model::SafetensorsTensor, std::less<>> tensors_;
};

// Every tensor `config` needs (A = `additive_dim` for additive scoring), of
// `dtype`, with values from a fixed-seed generator.
TensorSet TensorsFor(
    const model::ModelConfig& config, int64_t additive_dim,
    model::SafetensorsDType dtype = model::SafetensorsDType::kF32);

// A config from its JSON text; fails the test when it does not parse.
model::ModelConfig Config(absl::string_view json);

// A safetensors file with the given header text (not padded) and data.
std::string RawSafetensors(absl::string_view header, absl::string_view data);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_MODEL_MODEL_TEST_UTIL_H_
