#ifndef ATTNSERVE_MODEL_SAFETENSORS_H_
#define ATTNSERVE_MODEL_SAFETENSORS_H_

// A reader of the safetensors format: an 8-byte little-endian header size N,
// N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]},
// optional "__metadata__": {string: string}}), then the tensors' bytes, with
// offsets relative to the end of the header.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::model {

enum class SafetensorsDType { kF32, kF16, kBF16 };

struct SafetensorsTensor {
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  // The tensor's little-endian bytes, owned by the SafetensorsFile.
  absl::string_view data;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file. Errors start with `path`:
  // NotFound/PermissionDenied when it cannot be read; InvalidArgument for a
  // file shorter than 8 bytes, a header size beyond the file (or above
  // 100 MB), a header that is not a JSON object, an entry without dtype,
  // shape or data_offsets, a dtype other than F32/F16/BF16 (naming it), a
  // negative dimension, offsets not 0 <= begin <= end <= data size, a byte
  // count that is not product(shape) × dtype size, or tensors that overlap.
  static absl::StatusOr<SafetensorsFile> Read(const std::string& path);
  // The same, on bytes already in memory (`name` stands in for the path).
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes,
                                               absl::string_view name);

  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  // name → tensor, sorted by name.
  const std::map<std::string, SafetensorsTensor, std::less<>>& tensors() const {
    return tensors_;
  }
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

 private:
  SafetensorsFile() = default;
  // Behind a pointer so that the tensors' views survive moves.
  std::unique_ptr<const std::string> bytes_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// "F32", "F16", "BF16".
absl::string_view SafetensorsDTypeName(SafetensorsDType dtype);

// The bytes of a safetensors file holding `tensors` (data as given, in name
// order), for tests and tools.
std::string SerializeSafetensors(
    const std::map<std::string, SafetensorsTensor, std::less<>>& tensors);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_SAFETENSORS_H_
