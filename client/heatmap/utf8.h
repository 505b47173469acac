#ifndef ATTNSERVE_CLIENT_HEATMAP_UTF8_H_
#define ATTNSERVE_CLIENT_HEATMAP_UTF8_H_

// Splits UTF-8 text into characters, for the heatmap's labels: the bitmap
// font draws one glyph per character and the text renderer lays them out in
// columns.

#include <vector>

#include "absl/strings/string_view.h"

namespace attnserve::client {

// The characters of `text`, each a view of its 1 to 4 bytes. A byte that does
// not start a well-formed sequence (a stray continuation byte, a truncated or
// overlong sequence, a surrogate) is a character of its own, so malformed text
// never swallows the characters after it.
std::vector<absl::string_view> SplitUtf8(absl::string_view text);

// True for a character SplitUtf8 returned that is a printable ASCII character
// (' ' to '~').
bool IsPrintableAscii(absl::string_view character);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_UTF8_H_
