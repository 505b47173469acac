#ifndef ATTNSERVE_TESTS_UTIL_PNG_READER_H_
#define ATTNSERVE_TESTS_UTIL_PNG_READER_H_

// Decodes PNG files with libpng's own reader (not the client's code), for
// the heatmap tests.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::testing {

struct DecodedPng {
  // From the IHDR chunk.
  uint32_t width = 0;
  uint32_t height = 0;
  int bit_depth = 0;
  // PNG_COLOR_TYPE_*: 2 is RGB.
  int color_type = 0;
  int interlace = 0;
  // The rows as stored, width * channels bytes each (8-bit files).
  std::vector<std::vector<uint8_t>> rows;

  // The RGB pixel at (x, y) of an 8-bit RGB file.
  struct Pixel {
    int r, g, b;
  };
  Pixel At(int x, int y) const {
    const uint8_t* p = &rows[y][3 * static_cast<size_t>(x)];
    return {p[0], p[1], p[2]};
  }
};

// InvalidArgument with libpng's message when the file is not a PNG or is
// corrupt; NotFound when it cannot be opened.
absl::StatusOr<DecodedPng> ReadPng(const std::string& path);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_PNG_READER_H_
