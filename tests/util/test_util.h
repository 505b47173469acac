#ifndef ATTNSERVE_TESTS_UTIL_TEST_UTIL_H_
#define ATTNSERVE_TESTS_UTIL_TEST_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "base/random.h"
#include "core/convert.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "tests/util/status_matchers.h"

namespace attnserve::testing {

// An owned, dense, row-major tensor of any dtype. Values are set and read as
// floats through the dtype's conversions, so a tensor built from floats holds
// them rounded to its dtype.
class TestTensor {
 public:
  TestTensor() = default;
  // Zero-filled.
  TestTensor(DType dtype, std::vector<int64_t> shape)
      : dtype_(dtype), shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    size_ = n;
    bytes_.assign(static_cast<size_t>(n) * DTypeSize(dtype), 0);
  }

  // `values` in row-major order, one per element.
  static TestTensor FromFloats(DType dtype, std::vector<int64_t> shape,
                               absl::Span<const float> values) {
    TestTensor t(dtype, std::move(shape));
    EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
    for (int64_t i = 0; i < t.size() && i < static_cast<int64_t>(values.size());
         ++i) {
      t.Set(i, values[i]);
    }
    return t;
  }

  // Uniform in [lo, hi) from a fixed-seed generator whose output does not
  // depend on the standard library.
  static TestTensor Random(DType dtype, std::vector<int64_t> shape,
                           uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    TestTensor t(dtype, std::move(shape));
    base::SplitMix64 rng(seed);
    for (int64_t i = 0; i < t.size(); ++i) t.Set(i, rng.Uniform(lo, hi));
    return t;
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const { return size_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  TensorView view() const { return MakeTensorView(data(), dtype_, shape_); }
  MutableTensorView mutable_view() {
    return MakeMutableTensorView(data(), dtype_, shape_);
  }

  float at(int64_t i) const { return LoadAsFloat(data(), dtype_, i); }
  float at(std::initializer_list<int64_t> index) const {
    return at(Offset(index));
  }
  void Set(int64_t i, float value) { StoreFromFloat(data(), dtype_, i, value); }
  void Set(std::initializer_list<int64_t> index, float value) {
    Set(Offset(index), value);
  }
  void Fill(float value) {
    for (int64_t i = 0; i < size_; ++i) Set(i, value);
  }
  std::vector<float> ToFloats() const {
    std::vector<float> out(size_);
    for (int64_t i = 0; i < size_; ++i) out[i] = at(i);
    return out;
  }

 private:
  int64_t Offset(std::initializer_list<int64_t> index) const {
    EXPECT_EQ(index.size(), shape_.size());
    int64_t offset = 0;
    size_t axis = 0;
    for (int64_t i : index) offset = offset * shape_[axis++] + i;
    return offset;
  }

  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  std::vector<char> bytes_;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_TEST_UTIL_H_
