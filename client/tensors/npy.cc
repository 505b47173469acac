#include "client/tensors/npy.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tensors/file_util.h"

namespace attnserve::client {
namespace {

constexpr absl::string_view kMagic("\x93NUMPY", 6);
// numpy aligns the start of the data to 64 bytes
// (numpy.lib.format.ARRAY_ALIGN).
constexpr size_t kAlign = 64;
constexpr size_t kMaxEchoed = 120;

// Bytes of the header length field in format `major`.
size_t LengthFieldSize(int major) { return major == 1 ? 2 : 4; }

// The header text for error messages, shortened and with control characters
// escaped.
std::string Echo(absl::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxEchoed)) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c))) {
      out.push_back(c);
    } else {
      absl::StrAppend(
          &out, "\\x",
          absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    }
  }
  if (text.size() > kMaxEchoed) out += "...";
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// The three fields of a header.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A parser for the one Python literal a .npy header holds, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// (numpy writes it with repr() and reads it with ast.literal_eval).
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Header> Parse() {
    Header header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!Consume('{')) return Error("expected '{'");
    while (!Consume('}')) {
      std::string key;
      if (!ParseString(&key)) return Error("expected a quoted key or '}'");
      if (!Consume(':')) return Error("expected ':' after the key");
      absl::Status status;
      if (key == "descr" && !seen_descr) {
        seen_descr = true;
        status = ParseDescr(&header.descr);
      } else if (key == "fortran_order" && !seen_order) {
        seen_order = true;
        status = ParseBool(&header.fortran_order);
      } else if (key == "shape" && !seen_shape) {
        seen_shape = true;
        status = ParseShape(&header.shape);
      } else {
        return Error(absl::StrCat("unexpected or repeated key '", key,
                                  "' (a .npy header holds descr, fortran_order "
                                  "and shape once each)"));
      }
      if (!status.ok()) return status;
      if (!Consume(',')) {
        if (!Consume('}')) return Error("expected ',' or '}'");
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after '}'");
    if (!seen_descr || !seen_order || !seen_shape) {
      return Error(
          "missing key: a .npy header holds descr, fortran_order and "
          "shape");
    }
    return header;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool Consume(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(absl::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // A '...' or "..." literal without escapes (numpy never writes any in the
  // keys and dtypes it accepts here).
  bool ParseString(std::string* out) {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return false;
    }
    const char quote = text_[pos_];
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return false;
    *out = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }

  absl::Status ParseDescr(std::string* descr) {
    if (Peek('[')) {
      return Error("descr: structured dtypes are not supported");
    }
    if (!ParseString(descr)) return Error("descr: expected a quoted dtype");
    return absl::OkStatus();
  }

  absl::Status ParseBool(bool* value) {
    if (ConsumeWord("True")) {
      *value = true;
    } else if (ConsumeWord("False")) {
      *value = false;
    } else {
      return Error("fortran_order: expected True or False");
    }
    return absl::OkStatus();
  }

  // "()", "(5,)", "(2, 3)" or "(2, 3,)". "(5)" is the integer 5 in Python,
  // not a tuple, and numpy rejects it too.
  absl::Status ParseShape(std::vector<int64_t>* shape) {
    if (!Consume('(')) return Error("shape: expected a tuple such as (2, 3)");
    bool trailing_comma = false;
    while (!Consume(')')) {
      int64_t dim = 0;
      const absl::Status status = ParseDim(&dim);
      if (!status.ok()) return status;
      shape->push_back(dim);
      trailing_comma = Consume(',');
      if (!trailing_comma && !Peek(')')) {
        return Error("shape: expected ',' or ')'");
      }
    }
    if (shape->size() == 1 && !trailing_comma) {
      return Error(absl::StrCat("shape: (", (*shape)[0],
                                ") is not a tuple; a one-dimensional shape is "
                                "written (",
                                (*shape)[0], ",)"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseDim(int64_t* dim) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '-') {
      return Error("shape: negative dimension");
    }
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) {
      const int digit = text_[pos_++] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        return Error("shape: dimension out of range");
      }
      value = value * 10 + digit;
    }
    if (pos_ == start) return Error("shape: expected a non-negative integer");
    *dim = value;
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad header: ", what, " at offset ", pos_, " of \"",
                     Echo(text_), "\""));
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<NpyDType> ParseDescrValue(absl::string_view descr,
                                         const NpyReadOptions& options) {
  if (descr == "<f4") return NpyDType::kFloat32;
  if (descr == "<f2") return NpyDType::kFloat16;
  if (descr == "|b1") return NpyDType::kBool;
  if (descr == "|u1") return NpyDType::kUInt8;
  if (descr == "<u2") {
    if (options.u2_as_bfloat16) return NpyDType::kBFloat16;
    return absl::InvalidArgumentError(
        "dtype '<u2' (uint16) is read only as the raw bits of bfloat16, and "
        "the reader was not asked for bfloat16");
  }
  if (!descr.empty() && descr[0] == '>') {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype '", descr,
        "' is big-endian; only little-endian data is supported (convert with "
        "a.astype(a.dtype.newbyteorder('<')))"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", descr,
                   "' (supported: '<f4', '<f2', '|b1', '|u1', and '<u2' as "
                   "bfloat16 bits when asked for)"));
}

// product(shape) * item_size, or an error when it does not fit in memory sizes.
absl::StatusOr<uint64_t> DataBytes(const std::vector<int64_t>& shape,
                                   int item_size) {
  uint64_t bytes = static_cast<uint64_t>(item_size);
  for (int64_t dim : shape) {
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / 2 /
                                static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeText(shape), " holds more bytes than fit in memory"));
    }
    bytes *= static_cast<uint64_t>(dim);
  }
  return bytes;
}

}  // namespace

int NpyDTypeSize(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return 4;
    case NpyDType::kFloat16:
    case NpyDType::kBFloat16:
      return 2;
    case NpyDType::kUInt8:
    case NpyDType::kBool:
      return 1;
  }
  return 1;
}

absl::string_view NpyDescr(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return "<f4";
    case NpyDType::kFloat16:
      return "<f2";
    case NpyDType::kBFloat16:
      return "<u2";
    case NpyDType::kUInt8:
      return "|u1";
    case NpyDType::kBool:
      return "|b1";
  }
  return "";
}

int64_t NpyArray::num_elements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

absl::StatusOr<NpyArray> ParseNpy(std::string bytes,
                                  const NpyReadOptions& options) {
  if (bytes.size() < kMagic.size() ||
      absl::string_view(bytes).substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a .npy file: it does not start with \\x93NUMPY (it "
                     "starts with \"",
                     Echo(absl::string_view(bytes).substr(0, 8)), "\")"));
  }
  if (bytes.size() < kMagic.size() + 2) {
    return absl::InvalidArgumentError(
        "truncated header: the file ends before the format version");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported .npy format version ", major, ".", minor,
                     " (supported: 1.0, 2.0 and 3.0)"));
  }
  const size_t length_size = LengthFieldSize(major);
  const size_t prefix = kMagic.size() + 2 + length_size;
  if (bytes.size() < prefix) {
    return absl::InvalidArgumentError(
        "truncated header: the file ends inside the header length field");
  }
  uint64_t header_length = 0;
  for (size_t i = 0; i < length_size; ++i) {
    header_length |= uint64_t{static_cast<unsigned char>(bytes[8 + i])}
                     << (8 * i);
  }
  if (header_length > bytes.size() - prefix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated header: the header length field says ", header_length,
        " bytes but only ", bytes.size() - prefix, " follow"));
  }
  // Version 3.0 differs from 2.0 only in allowing utf-8 in the header; every
  // header this reader accepts is ASCII.
  HeaderParser parser(absl::string_view(bytes).substr(prefix, header_length));
  absl::StatusOr<Header> header = parser.Parse();
  if (!header.ok()) return header.status();
  if (header->fortran_order) {
    return absl::InvalidArgumentError(
        "fortran_order is True; only C-order arrays are supported (save "
        "np.ascontiguousarray(a))");
  }
  absl::StatusOr<NpyDType> dtype = ParseDescrValue(header->descr, options);
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<uint64_t> expected =
      DataBytes(header->shape, NpyDTypeSize(*dtype));
  if (!expected.ok()) return expected.status();

  const size_t data_start = prefix + header_length;
  const uint64_t actual = bytes.size() - data_start;
  if (actual != *expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data too ", actual < *expected ? "short" : "long", ": shape ",
        ShapeText(header->shape), " of '", header->descr, "' needs ", *expected,
        " bytes after the header, the file has ", actual));
  }
  NpyArray array;
  array.dtype = *dtype;
  array.shape = std::move(header->shape);
  bytes.erase(0, data_start);
  array.data = std::move(bytes);
  return array;
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array, int version) {
  if (version < 1 || version > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown .npy format version ", version, " (expected 1, 2 or 3)"));
  }
  for (int64_t dim : array.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeText(array.shape), " has a negative dimension"));
    }
  }
  absl::StatusOr<uint64_t> expected =
      DataBytes(array.shape, NpyDTypeSize(array.dtype));
  if (!expected.ok()) return expected.status();
  if (array.data.size() != *expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("array data is ", array.data.size(), " bytes but shape ",
                     ShapeText(array.shape), " of '", NpyDescr(array.dtype),
                     "' needs ", *expected));
  }
  // numpy's own layout: keys sorted, repr() values, a trailing ", ", then
  // spaces and a newline up to the 64-byte boundary.
  std::string header = absl::StrCat(
      "{'descr': '", NpyDescr(array.dtype),
      "', 'fortran_order': False, 'shape': ", ShapeText(array.shape), ", }");
  const size_t length_size = LengthFieldSize(version);
  const size_t unpadded = kMagic.size() + 2 + length_size + header.size() + 1;
  header.append(kAlign - unpadded % kAlign, ' ');
  header.push_back('\n');
  if (version == 1 && header.size() > 0xffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("the header (", header.size(),
                     " bytes) does not fit format version 1; use version 2"));
  }

  std::string out;
  out.reserve(kMagic.size() + 2 + length_size + header.size() +
              array.data.size());
  out.append(kMagic.data(), kMagic.size());
  out.push_back(static_cast<char>(version));
  out.push_back(0);
  for (size_t i = 0; i < length_size; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  out += header;
  out += array.data;
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path,
                                     const NpyReadOptions& options) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<NpyArray> array = ParseNpy(*std::move(bytes), options);
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(path, ": ", array.status().message()));
  }
  return array;
}

absl::Status WriteNpyFile(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat(path, ": ", bytes.status().message()));
  }
  return WriteStringToFile(path, *bytes);
}

}  // namespace attnserve::client
