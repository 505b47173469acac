#ifndef ATTNSERVE_CLIENT_HEATMAP_BITMAP_FONT_H_
#define ATTNSERVE_CLIENT_HEATMAP_BITMAP_FONT_H_

// A tiny bitmap font for the heatmap's titles and labels: printable ASCII in
// 5x7-pixel glyphs (plus two rows below the baseline for g, j, p, q, y and
// the like), drawn at an integer scale. Every other character (non-ASCII,
// control characters) draws as a placeholder box.

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "client/heatmap/png_image.h"

namespace attnserve::client {

inline constexpr int kGlyphWidth = 5;
// Rows above the baseline (capital letters and digits fill them).
inline constexpr int kGlyphAscent = 7;
// All rows, with the descent.
inline constexpr int kGlyphHeight = 9;
// Horizontal distance between characters: the glyph and a 1-pixel gap.
inline constexpr int kGlyphAdvance = 6;

// kGlyphHeight rows, top first; bit 4 is the leftmost column.
using Glyph = std::array<uint8_t, kGlyphHeight>;

// The glyph of one character as SplitUtf8 returns it: printable ASCII has its
// own, anything else the placeholder box.
const Glyph& GlyphOf(absl::string_view character);
// The box drawn for characters the font does not have.
const Glyph& PlaceholderGlyph();

// Width in pixels of `text` (UTF-8) drawn at `scale` (>= 1), without a gap
// after the last character; 0 for empty text.
int TextWidth(absl::string_view text, int scale);

// Draws `text` left to right; (x, y) is the top-left corner of the first
// glyph, the baseline is at y + kGlyphAscent * scale. Clipped to the image.
void DrawText(RgbImage& image, int x, int y, absl::string_view text, int scale,
              Rgb color);

// Draws `text` turned 90 degrees counter-clockwise, reading bottom to top:
// (x, y) is the bottom-left corner, the glyphs' tops face left and the text
// takes kGlyphHeight * scale columns and TextWidth rows above y.
void DrawTextUp(RgbImage& image, int x, int y, absl::string_view text,
                int scale, Rgb color);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_BITMAP_FONT_H_
