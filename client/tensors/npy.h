#ifndef ATTNSERVE_CLIENT_TENSORS_NPY_H_
#define ATTNSERVE_CLIENT_TENSORS_NPY_H_

// Reads and writes numpy's .npy format (format versions 1.0, 2.0 and 3.0):
// https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// Only what attnctl exchanges is supported: little-endian, C-order arrays of
//   '<f4' float32, '<f2' float16, '|b1' bool, '|u1' uint8,
//   '<u2' the raw bits of bfloat16 (numpy has no bfloat16: bf16 arrays are
//         written as '<u2' and read back as bf16 only when the caller asks).
// Everything else (big-endian, Fortran order, other dtypes, a data size that
// does not match the shape) is an InvalidArgument error that says what was
// found and what is accepted.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::client {

enum class NpyDType { kFloat32, kFloat16, kBFloat16, kUInt8, kBool };

// Bytes per element.
int NpyDTypeSize(NpyDType dtype);
// The descr written to a file: "<f4", "<f2", "<u2" (bf16), "|u1", "|b1".
absl::string_view NpyDescr(NpyDType dtype);

// A dense, C-order array: `data` holds product(shape) elements, little-endian.
// An empty shape is a scalar (one element).
struct NpyArray {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;

  int64_t num_elements() const;
};

struct NpyReadOptions {
  // Reads '<u2' arrays as bfloat16 bits (default false: '<u2' is then an error
  // that points at this option, since plain uint16 has no use here).
  bool u2_as_bfloat16 = false;
};

// Parses the bytes of a whole .npy file.
absl::StatusOr<NpyArray> ParseNpy(std::string bytes,
                                  const NpyReadOptions& options = {});

// Serializes `array` in format `version` (1, 2 or 3; 1 holds any header this
// writer makes, as numpy's own writer prefers). The header is padded with
// spaces and a newline so that the data starts at a multiple of 64 bytes.
// InvalidArgument when data.size() does not match the shape or the version is
// unknown.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array,
                                         int version = 1);

// File versions of the above; every error message starts with the path.
// Besides the format errors: NotFound when the file does not exist,
// PermissionDenied when it cannot be opened, Internal on an I/O error.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path,
                                     const NpyReadOptions& options = {});
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_TENSORS_NPY_H_
