#ifndef ATTNSERVE_BASE_BYTE_SIZE_H_
#define ATTNSERVE_BASE_BYTE_SIZE_H_

// A count of bytes as flags take it: a whole number with an optional unit,
// binary (KiB, MiB, GiB, TiB: powers of 1024) or decimal (kB, MB, GB, TB:
// powers of 1000; kB or KB), or B: "1GiB", "512MiB", "1073741824", "64 MiB".
// Units are case-sensitive as written here.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::base {

struct ByteSize {
  int64_t bytes = 0;
};

// InvalidArgument naming the text for anything else, and for values that do
// not fit in an int64.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// The largest unit that divides `bytes` exactly: "1GiB", "1536MiB", "100".
std::string ByteSizeText(int64_t bytes);

// For ABSL_FLAG(attnserve::base::ByteSize, ...).
bool AbslParseFlag(absl::string_view text, ByteSize* size, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

}  // namespace attnserve::base

#endif  // ATTNSERVE_BASE_BYTE_SIZE_H_
