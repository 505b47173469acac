#ifndef ATTNSERVE_CORE_TENSOR_H_
#define ATTNSERVE_CORE_TENSOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace attnserve {

// Element types of tensors that cross the core's boundary. kBool is one byte
// per element (0 = false) and is accepted only for explicit masks. kInt8 is
// only a paged cache's storage (core/paged.h: quantized rows with a scale
// each), never a tensor's.
enum class DType { kFloat32, kBFloat16, kFloat16, kBool, kInt8 };

// Bytes per element.
size_t DTypeSize(DType dtype);
// "f32", "bf16", "f16", "bool", "int8".
absl::string_view DTypeName(DType dtype);
// True for kFloat32, kBFloat16 and kFloat16: the dtypes of attention operands.
bool IsFloatDType(DType dtype);

inline constexpr int kMaxRank = 4;

// A non-owning view of a row-major tensor of rank 0..4 with strides in
// elements. `Data` is `const void` for inputs and `void` for outputs. The
// viewed memory must outlive every use of the view; views are cheap to copy.
template <typename Data>
struct BasicTensorView {
  Data* data = nullptr;
  DType dtype = DType::kFloat32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  int64_t dim(int i) const { return shape[i]; }
  int64_t stride(int i) const { return strides[i]; }
  int64_t num_elements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  absl::Span<const int64_t> dims() const {
    return {shape.data(), size_t(rank)};
  }
  // True when the strides are those of a dense row-major tensor of this shape.
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
};

using TensorView = BasicTensorView<const void>;
using MutableTensorView = BasicTensorView<void>;

// Row-major strides for `shape` (elements).
std::array<int64_t, kMaxRank> ContiguousStrides(
    absl::Span<const int64_t> shape);

// A dense row-major view over `data`. The shape must have at most kMaxRank
// non-negative dimensions (checked by the *FromBytes variants, assumed here).
TensorView MakeTensorView(const void* data, DType dtype,
                          absl::Span<const int64_t> shape);
MutableTensorView MakeMutableTensorView(void* data, DType dtype,
                                        absl::Span<const int64_t> shape);

// Views `size_bytes` bytes at `data` as a dense tensor of `shape`, checking
// what a caller off the network can get wrong. InvalidArgument, with `name` in
// the message, when the rank exceeds kMaxRank, a dimension is negative, the
// element count overflows, or size_bytes != elements × DTypeSize(dtype). `data`
// may be unaligned: the kernels accept any alignment.
absl::StatusOr<TensorView> TensorViewFromBytes(absl::string_view name,
                                               const void* data,
                                               size_t size_bytes, DType dtype,
                                               absl::Span<const int64_t> shape);

// "[2, 8, 128, 64]"
std::string ShapeString(absl::Span<const int64_t> shape);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_TENSOR_H_
