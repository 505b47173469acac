#ifndef ATTNSERVE_CLIENT_HEATMAP_HEATMAP_RENDER_H_
#define ATTNSERVE_CLIENT_HEATMAP_HEATMAP_RENDER_H_

// Draws attention weights as a picture (for PNG) or as text (for a terminal):
// one panel per head, query rows down and key columns across, with a colour
// scale and axis labels. Pure functions of their input.

#include <string>
#include <vector>

#include "client/heatmap/png_image.h"

namespace attnserve::client {

// One panel: q_len rows of k_len weights, row-major.
struct HeatmapPanel {
  // Drawn above the panel, e.g. "head 3".
  std::string title;
  std::vector<float> weights;
  // Each query row's weight entropy in nats (q_len of them), or empty
  // (default): the text picture prints it right of the row.
  std::vector<float> entropy;
};

struct Heatmap {
  // The same for every panel; each >= 1.
  int q_len = 0;
  int k_len = 0;
  std::vector<HeatmapPanel> panels;
  // One label per query row / key column (UTF-8), or empty (default): then
  // the rows and columns are labelled with their indices (in the picture,
  // every n-th one, as many as fit).
  std::vector<std::string> query_labels;
  std::vector<std::string> key_labels;
  // The top of the colour scale (> 0; default 1): weights >= vmax draw in its
  // brightest colour. The bottom is 0.
  float vmax = 1;
  // A line above the panels (default none).
  std::string caption;
};

// Colours with a meaning besides the scale.
inline constexpr Rgb kBackground = {255, 255, 255};
inline constexpr Rgb kTextColor = {34, 34, 34};
// A weight of exactly 0: a masked key (softmax of finite scores never
// reaches 0 in practice, but a masked key always gets exactly 0).
inline constexpr Rgb kMaskedColor = {200, 200, 200};
// A NaN or infinite weight (only from NaN or infinite inputs).
inline constexpr Rgb kNonFiniteColor = {255, 0, 255};

// The largest finite weight of the panels, or 1 when none is above 0.
float MaxWeight(const Heatmap& heatmap);

// "0.4312", "1", "0.000123": a scale value, 4 significant digits.
std::string ScaleValueText(float value);

// Where RenderHeatmapImage puts things, in pixels from the top-left corner.
struct HeatmapLayout {
  // Each weight is a cell x cell square: 384 / max(q_len, k_len), clamped to
  // [1, 32], and at least 10 when labels are given (one label per row and
  // column must fit).
  int cell = 0;
  // Font scale of the axis labels: 2 when cells are at least 20 pixels.
  int label_scale = 1;
  // Panels fill the grid row by row.
  int columns = 0;
  int rows = 0;
  int panel_width = 0;   // k_len * cell
  int panel_height = 0;  // q_len * cell
  // The top-left corner of each panel's first cell.
  struct Point {
    int x = 0;
    int y = 0;
  };
  std::vector<Point> panels;
  // The colour bar: 0 at the bottom, vmax at the top.
  int bar_x = 0;
  int bar_y = 0;
  int bar_width = 0;
  int bar_height = 0;
  int width = 0;
  int height = 0;
};

// The layout of `heatmap`, which must have q_len, k_len >= 1 and at least
// one panel; it depends on the sizes and labels, not on the weights.
HeatmapLayout ComputeHeatmapLayout(const Heatmap& heatmap);

// The picture: the caption on top; the panels in a grid (1 to 4 panels in
// one row, up to 8 in two rows of 4, then a square-ish grid), each titled,
// with query labels left of the rows and key labels below the columns (read
// bottom to top); right of them the colour bar with 0, vmax / 2 and vmax,
// and a "masked" swatch when some weight is exactly 0. Colours: ColormapColor
// (weight / vmax), kMaskedColor, kNonFiniteColor.
RgbImage RenderHeatmapImage(const Heatmap& heatmap);

// The shade ramp of RenderHeatmapText, lowest first: level k covers weights
// in [k, k + 1) * vmax / 9 (the last also weights >= vmax).
inline constexpr char kShadeRamp[] = ".:-=+*#%@";
inline constexpr int kShadeLevels = 9;

// The text picture: the caption, then one block per panel: a line with its
// title, the key labels written downwards above the columns (bottom-aligned),
// a frame, and one line per query row: its label right-aligned, then each
// weight as two characters of kShadeRamp (blank for exactly 0, "!!" for
// non-finite). A legend line ends it. With `ansi_color`, cells are coloured
// backgrounds (xterm 256 colours of the same colour scale) instead.
// Non-ASCII label characters are kept and taken as one column wide;
// control characters become '?'.
std::string RenderHeatmapText(const Heatmap& heatmap, bool ansi_color);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_HEATMAP_RENDER_H_
