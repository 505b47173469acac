#include "client/heatmap/utf8.h"

#include <cstdint>

namespace attnserve::client {
namespace {

// The length of the well-formed sequence at the start of `text` (RFC 3629),
// or 0 when there is none.
size_t SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length;
  uint8_t low = 0x80;   // the second byte's range, narrowed against overlongs
  uint8_t high = 0xBF;  // and surrogates / code points above U+10FFFF
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

std::vector<absl::string_view> SplitUtf8(absl::string_view text) {
  std::vector<absl::string_view> characters;
  while (!text.empty()) {
    size_t length = SequenceLength(text);
    if (length == 0) length = 1;
    characters.push_back(text.substr(0, length));
    text.remove_prefix(length);
  }
  return characters;
}

bool IsPrintableAscii(absl::string_view character) {
  return character.size() == 1 && character[0] >= ' ' && character[0] <= '~';
}

}  // namespace attnserve::client
