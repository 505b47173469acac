#include "model/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "core/status_macros.h"
#include "model/json_util.h"
#include "nlohmann/json.hpp"

namespace attnserve::model {
namespace {

using nlohmann::json;

// A header is a few hundred bytes per tensor; the Rust reference
// implementation refuses headers above 100 MB too.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

size_t DTypeBytes(SafetensorsDType dtype) {
  return dtype == SafetensorsDType::kF32 ? 4 : 2;
}

// The dtypes of the safetensors format we do not take, to tell "not
// supported" from "not a safetensors dtype".
bool IsOtherSafetensorsDType(absl::string_view name) {
  static constexpr absl::string_view kOthers[] = {
      "BOOL",    "U8",      "I8",      "I16", "U16",     "I32",
      "U32",     "I64",     "U64",     "F64", "F8_E5M2", "F8_E4M3",
      "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  return std::find(std::begin(kOthers), std::end(kOthers), name) !=
         std::end(kOthers);
}

// Reads a JSON integer that must be >= 0 (unsigned in nlohmann's terms).
bool AsNonNegative(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  return false;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

struct Range {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

class HeaderParser {
 public:
  HeaderParser(absl::string_view file_name, absl::string_view data)
      : file_name_(file_name), data_(data) {}

  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(file_name_, ": ", message));
  }
  absl::Status TensorError(const std::string& name,
                           absl::string_view message) const {
    return Error(absl::StrCat("tensor ", name, ": ", message));
  }

  absl::Status ParseMetadata(const json& value,
                             std::map<std::string, std::string>* metadata) {
    if (!value.is_object()) {
      return Error(absl::StrCat("__metadata__: expected an object, got ",
                                JsonTypeName(value)));
    }
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) {
        return Error(absl::StrCat("__metadata__ key \"", key,
                                  "\": expected a string, got ",
                                  JsonTypeName(item)));
      }
      (*metadata)[key] = item.get<std::string>();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SafetensorsTensor> ParseTensor(const std::string& name,
                                                const json& entry) {
    if (!entry.is_object()) {
      return TensorError(
          name, absl::StrCat("expected an object, got ", JsonTypeName(entry)));
    }
    for (const auto& [key, unused] : entry.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        return TensorError(
            name, absl::StrCat("unknown key \"", key,
                               "\" (expected dtype, shape, data_offsets)"));
      }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) {
        return TensorError(name, absl::StrCat("missing \"", key, "\""));
      }
    }

    SafetensorsTensor tensor;
    const json& dtype = entry["dtype"];
    if (!dtype.is_string()) {
      return TensorError(name,
                         absl::StrCat("\"dtype\": expected a string, got ",
                                      JsonTypeName(dtype)));
    }
    const std::string& dtype_name = dtype.get_ref<const std::string&>();
    if (dtype_name == "F32") {
      tensor.dtype = SafetensorsDType::kF32;
    } else if (dtype_name == "F16") {
      tensor.dtype = SafetensorsDType::kF16;
    } else if (dtype_name == "BF16") {
      tensor.dtype = SafetensorsDType::kBF16;
    } else if (IsOtherSafetensorsDType(dtype_name)) {
      return TensorError(name, absl::StrCat("dtype ", dtype_name,
                                            " is not supported (expected F32, "
                                            "F16 or BF16)"));
    } else {
      return TensorError(name,
                         absl::StrCat("unknown dtype ", JsonShortDump(dtype),
                                      " (expected F32, F16 or BF16)"));
    }

    const json& shape = entry["shape"];
    if (!shape.is_array()) {
      return TensorError(
          name, absl::StrCat("\"shape\": expected an array of integers, got ",
                             JsonTypeName(shape)));
    }
    // Checked multiplication: a hostile shape must not wrap around to the
    // byte count of the data it claims.
    uint64_t elements = 1;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const json& dim = shape[i];
      if (!dim.is_number_integer()) {
        return TensorError(
            name, absl::StrCat("\"shape\"[", i, "]: expected an integer, got ",
                               JsonTypeName(dim)));
      }
      uint64_t value = 0;
      if (!AsNonNegative(dim, &value)) {
        return TensorError(
            name, absl::StrCat("\"shape\"[", i, "] is ", JsonShortDump(dim),
                               ", a negative dimension"));
      }
      if (value > static_cast<uint64_t>(INT64_MAX)) {
        return TensorError(
            name, absl::StrCat("\"shape\"[", i, "] is ", value, ", too large"));
      }
      tensor.shape.push_back(static_cast<int64_t>(value));
      overflow = overflow || __builtin_mul_overflow(elements, value, &elements);
    }
    uint64_t bytes = 0;
    // A zero dimension makes any product of the others empty.
    if (std::find(tensor.shape.begin(), tensor.shape.end(), 0) !=
        tensor.shape.end()) {
      overflow = false;
      elements = 0;
    }
    if (overflow ||
        __builtin_mul_overflow(elements, DTypeBytes(tensor.dtype), &bytes)) {
      return TensorError(name, absl::StrCat("shape ", ShapeString(tensor.shape),
                                            " has too many elements"));
    }

    const json& offsets = entry["data_offsets"];
    uint64_t begin = 0;
    uint64_t end = 0;
    if (!offsets.is_array() || offsets.size() != 2 ||
        !offsets[0].is_number_integer() || !offsets[1].is_number_integer()) {
      return TensorError(
          name,
          absl::StrCat("\"data_offsets\": expected an array of 2 integers, "
                       "got ",
                       JsonTypeName(offsets)));
    }
    if (!AsNonNegative(offsets[0], &begin) ||
        !AsNonNegative(offsets[1], &end)) {
      return TensorError(name,
                         absl::StrCat("data_offsets ", JsonShortDump(offsets),
                                      " has a negative offset"));
    }
    if (begin > end) {
      return TensorError(name, absl::StrCat("data_offsets [", begin, ", ", end,
                                            "]: begin is after end"));
    }
    if (end > data_.size()) {
      return TensorError(
          name, absl::StrCat("data_offsets [", begin, ", ", end,
                             "]: end is beyond the data (", data_.size(),
                             " bytes after the header)"));
    }
    if (end - begin != bytes) {
      return TensorError(name, absl::StrCat("shape ", ShapeString(tensor.shape),
                                            " ", dtype_name, " needs ", bytes,
                                            " bytes, data_offsets [", begin,
                                            ", ", end, "] hold ", end - begin));
    }
    tensor.data = data_.substr(begin, end - begin);
    ranges_.push_back({begin, end, &name});
    return tensor;
  }

  // Two tensors must not share bytes (empty ones share nothing).
  absl::Status CheckOverlaps() {
    std::sort(ranges_.begin(), ranges_.end(),
              [](const Range& a, const Range& b) {
                return std::tie(a.begin, a.end, *a.name) <
                       std::tie(b.begin, b.end, *b.name);
              });
    const Range* previous = nullptr;
    for (const Range& range : ranges_) {
      if (range.begin == range.end) continue;
      if (previous != nullptr && range.begin < previous->end) {
        return Error(absl::StrCat(
            "tensors ", *previous->name, " and ", *range.name,
            " overlap (data_offsets [", previous->begin, ", ", previous->end,
            "] and [", range.begin, ", ", range.end, "])"));
      }
      if (previous == nullptr || range.end > previous->end) previous = &range;
    }
    return absl::OkStatus();
  }

 private:
  absl::string_view file_name_;
  absl::string_view data_;
  std::vector<Range> ranges_;
};

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, base::ReadFile(path));
  return Parse(std::move(bytes), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes,
                                                       absl::string_view name) {
  SafetensorsFile file;
  file.bytes_ = std::make_unique<const std::string>(std::move(bytes));
  const std::string& all = *file.bytes_;
  const auto error = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", message));
  };
  if (all.size() < 8) {
    return error(absl::StrCat("file is ", all.size(),
                              " bytes, shorter than the 8-byte header size"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) {
    header_size = (header_size << 8) | static_cast<unsigned char>(all[i]);
  }
  const uint64_t rest = all.size() - 8;
  if (header_size > kMaxHeaderBytes) {
    return error(absl::StrCat("header size ", header_size,
                              " is above the limit of ", kMaxHeaderBytes,
                              " bytes"));
  }
  if (header_size > rest) {
    return error(absl::StrCat("header size ", header_size,
                              " is beyond the file (", rest,
                              " bytes follow the size; truncated?)"));
  }
  const absl::string_view header(all.data() + 8, header_size);
  const absl::string_view data(all.data() + 8 + header_size,
                               rest - header_size);

  absl::StatusOr<json> parsed = ParseStrictJson(header);
  if (!parsed.ok()) {
    return error(absl::StrCat("header: ", parsed.status().message()));
  }
  if (!parsed->is_object()) {
    return error(absl::StrCat("header is not a JSON object (got ",
                              JsonTypeName(*parsed), ")"));
  }
  HeaderParser parser(name, data);
  for (const auto& [key, value] : parsed->items()) {
    if (key == "__metadata__") {
      RETURN_IF_ERROR(parser.ParseMetadata(value, &file.metadata_));
      continue;
    }
    // The map owns the name that the parser's overlap check points to.
    const auto it = file.tensors_.emplace(key, SafetensorsTensor{}).first;
    ASSIGN_OR_RETURN(it->second, parser.ParseTensor(it->first, value));
  }
  RETURN_IF_ERROR(parser.CheckOverlaps());
  return file;
}

absl::string_view SafetensorsDTypeName(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return "F32";
    case SafetensorsDType::kF16:
      return "F16";
    case SafetensorsDType::kBF16:
      return "BF16";
  }
  return "unknown";
}

std::string SerializeSafetensors(
    const std::map<std::string, SafetensorsTensor, std::less<>>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const size_t begin = data.size();
    data.append(tensor.data.data(), tensor.data.size());
    header[name] = {{"dtype", std::string(SafetensorsDTypeName(tensor.dtype))},
                    {"shape", tensor.shape},
                    {"data_offsets", {begin, data.size()}}};
  }
  std::string header_text = header.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // Spaces up to a multiple of 8 keep the data 8-byte aligned in the file.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header_text.size() + data.size());
  uint64_t size = header_text.size();
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>(size & 0xff));
    size >>= 8;
  }
  out += header_text;
  out += data;
  return out;
}

}  // namespace attnserve::model
