#include "base/byte_size.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace attnserve::base {
namespace {

struct Unit {
  absl::string_view name;
  int64_t bytes;
};

constexpr Unit kBinaryUnits[] = {{"TiB", int64_t{1} << 40},
                                 {"GiB", int64_t{1} << 30},
                                 {"MiB", int64_t{1} << 20},
                                 {"KiB", int64_t{1} << 10}};
constexpr Unit kOtherUnits[] = {{"TB", 1000000000000}, {"GB", 1000000000},
                                {"MB", 1000000},       {"kB", 1000},
                                {"KB", 1000},          {"B", 1}};

// The bytes of `name`, or 0 for no unit of that name.
int64_t UnitBytes(absl::string_view name) {
  for (const Unit& u : kBinaryUnits) {
    if (name == u.name) return u.bytes;
  }
  for (const Unit& u : kOtherUnits) {
    if (name == u.name) return u.bytes;
  }
  return 0;
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  if (digits < trimmed.size() && trimmed[digits] == '-') ++digits;
  while (digits < trimmed.size() && absl::ascii_isdigit(trimmed[digits])) {
    ++digits;
  }
  const absl::string_view unit =
      absl::StripLeadingAsciiWhitespace(trimmed.substr(digits));
  int64_t value = 0;
  const int64_t scale = unit.empty() ? 1 : UnitBytes(unit);
  if (scale == 0 || !absl::SimpleAtoi(trimmed.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\" is not a size: expected a whole number of bytes, optionally with "
        "a unit (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB), e.g. 512MiB"));
  }
  if (value > std::numeric_limits<int64_t>::max() / scale ||
      value < std::numeric_limits<int64_t>::min() / scale) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is too large (at most 2^63 - 1 bytes)"));
  }
  return value * scale;
}

std::string ByteSizeText(int64_t bytes) {
  if (bytes != 0) {
    for (const Unit& u : kBinaryUnits) {
      if (bytes % u.bytes == 0) return absl::StrCat(bytes / u.bytes, u.name);
    }
  }
  return absl::StrCat(bytes);
}

bool AbslParseFlag(absl::string_view text, ByteSize* size, std::string* error) {
  absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  size->bytes = *bytes;
  return true;
}

std::string AbslUnparseFlag(ByteSize size) { return ByteSizeText(size.bytes); }

}  // namespace attnserve::base
