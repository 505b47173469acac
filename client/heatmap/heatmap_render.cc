#include "client/heatmap/heatmap_render.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/heatmap/bitmap_font.h"
#include "client/heatmap/colormap.h"
#include "client/heatmap/utf8.h"

namespace attnserve::client {
namespace {

constexpr int kMargin = 16;
constexpr int kGap = 24;
constexpr int kTitleScale = 2;
constexpr int kTitleHeight = kGlyphHeight * kTitleScale + 4;
constexpr int kCaptionHeight = kGlyphHeight * kTitleScale + 10;
constexpr int kLabelGap = 4;
constexpr int kBarWidth = 16;
constexpr int kMinBarHeight = 120;
constexpr int kSwatchGap = 12;
constexpr int kTickScale = 2;
// From the bar's right edge to its tick labels (the tick marks in between).
constexpr int kTickTextGap = 10;
constexpr Rgb kFrameColor = {120, 120, 120};
constexpr char kMaskedText[] = "masked";

int Cell(const Heatmap& heatmap) {
  const int longest = std::max(heatmap.q_len, heatmap.k_len);
  int cell = std::clamp(384 / longest, 1, 32);
  if (!heatmap.query_labels.empty() || !heatmap.key_labels.empty()) {
    cell = std::max(cell, 10);
  }
  return cell;
}

// Index labels every `step` cells, the smallest of 1, 2, 5, 10, 20, 50, ...
// whose labels (one line of text across) do not touch.
int IndexStep(int cell, int scale) {
  const int needed = kGlyphAscent * scale + 2;
  for (int step = 1;; step *= 10) {
    for (int m : {1, 2, 5}) {
      if (step * m * cell >= needed) return step * m;
    }
  }
}

// The label of row or column i, or "" when it is not drawn.
std::string AxisLabel(const std::vector<std::string>& labels, int i, int step) {
  if (!labels.empty()) return labels[i];
  return i % step == 0 ? absl::StrCat(i) : std::string();
}

int WidestLabel(const std::vector<std::string>& labels, int count, int step,
                int scale) {
  int widest = 0;
  for (int i = 0; i < count; ++i) {
    widest = std::max(widest, TextWidth(AxisLabel(labels, i, step), scale));
  }
  return widest;
}

int Columns(int panels) {
  if (panels <= 4) return panels;
  if (panels <= 8) return 4;
  return static_cast<int>(std::ceil(std::sqrt(static_cast<double>(panels))));
}

bool HasExactZero(const Heatmap& heatmap) {
  for (const HeatmapPanel& panel : heatmap.panels) {
    for (float w : panel.weights) {
      if (w == 0) return true;
    }
  }
  return false;
}

Rgb CellColor(float w, float vmax) {
  if (!std::isfinite(w)) return kNonFiniteColor;
  if (w == 0) return kMaskedColor;
  return ColormapColor(w / vmax);
}

// What the layout needs beyond HeatmapLayout: the label steps and widths.
struct Axes {
  int query_step = 1;
  int key_step = 1;
  int query_label_width = 0;
  int key_label_height = 0;
};

Axes ComputeAxes(const Heatmap& heatmap, int cell, int scale) {
  Axes axes;
  axes.query_step = IndexStep(cell, scale);
  axes.key_step = axes.query_step;
  axes.query_label_width =
      WidestLabel(heatmap.query_labels, heatmap.q_len, axes.query_step, scale);
  axes.key_label_height =
      WidestLabel(heatmap.key_labels, heatmap.k_len, axes.key_step, scale);
  return axes;
}

// Where the y labels end (left of the panel) and the x labels start (below).
int LabelSpace(int extent) { return extent == 0 ? 0 : extent + kLabelGap; }

int TickTextWidth(const Heatmap& heatmap) {
  return std::max({TextWidth(ScaleValueText(heatmap.vmax), kTickScale),
                   TextWidth(ScaleValueText(heatmap.vmax / 2), kTickScale),
                   TextWidth(ScaleValueText(0), kTickScale)});
}

}  // namespace

float MaxWeight(const Heatmap& heatmap) {
  float max = 0;
  for (const HeatmapPanel& panel : heatmap.panels) {
    for (float w : panel.weights) {
      if (std::isfinite(w)) max = std::max(max, w);
    }
  }
  return max > 0 ? max : 1;
}

std::string ScaleValueText(float value) {
  return absl::StrFormat("%.4g", value);
}

HeatmapLayout ComputeHeatmapLayout(const Heatmap& heatmap) {
  HeatmapLayout layout;
  layout.cell = Cell(heatmap);
  layout.label_scale = layout.cell >= 20 ? 2 : 1;
  const Axes axes = ComputeAxes(heatmap, layout.cell, layout.label_scale);
  const int n = static_cast<int>(heatmap.panels.size());
  layout.columns = Columns(n);
  layout.rows = (n + layout.columns - 1) / layout.columns;
  layout.panel_width = heatmap.k_len * layout.cell;
  layout.panel_height = heatmap.q_len * layout.cell;

  int widest_title = 0;
  for (const HeatmapPanel& panel : heatmap.panels) {
    widest_title = std::max(widest_title, TextWidth(panel.title, kTitleScale));
  }
  const int y_labels = LabelSpace(axes.query_label_width);
  const int block_width = y_labels + std::max(layout.panel_width, widest_title);
  const int block_height =
      kTitleHeight + layout.panel_height + LabelSpace(axes.key_label_height);
  const int top = kMargin + (heatmap.caption.empty() ? 0 : kCaptionHeight);
  for (int i = 0; i < n; ++i) {
    const int column = i % layout.columns;
    const int row = i / layout.columns;
    layout.panels.push_back({kMargin + column * (block_width + kGap) + y_labels,
                             top + row * (block_height + kGap) + kTitleHeight});
  }
  const int grid_width =
      layout.columns * block_width + (layout.columns - 1) * kGap;
  const int grid_height = layout.rows * block_height + (layout.rows - 1) * kGap;

  layout.bar_x = kMargin + grid_width + kGap;
  layout.bar_y = top + kTitleHeight;
  layout.bar_width = kBarWidth;
  layout.bar_height = std::max(layout.panel_height, kMinBarHeight);
  const int ticks_right =
      layout.bar_x + kBarWidth + kTickTextGap +
      std::max(TickTextWidth(heatmap), TextWidth(kMaskedText, kTickScale));
  const int swatch_bottom =
      layout.bar_y + layout.bar_height + kSwatchGap + kBarWidth;
  layout.width =
      std::max(ticks_right, kMargin + TextWidth(heatmap.caption, kTitleScale)) +
      kMargin;
  layout.height = std::max(top + grid_height, swatch_bottom) + kMargin;
  return layout;
}

RgbImage RenderHeatmapImage(const Heatmap& heatmap) {
  const HeatmapLayout layout = ComputeHeatmapLayout(heatmap);
  const int cell = layout.cell;
  const int scale = layout.label_scale;
  const Axes axes = ComputeAxes(heatmap, cell, scale);
  RgbImage image(layout.width, layout.height, kBackground);
  if (!heatmap.caption.empty()) {
    DrawText(image, kMargin, kMargin, heatmap.caption, kTitleScale, kTextColor);
  }

  for (size_t p = 0; p < heatmap.panels.size(); ++p) {
    const HeatmapPanel& panel = heatmap.panels[p];
    const int x = layout.panels[p].x;
    const int y = layout.panels[p].y;
    DrawText(image, x, y - kTitleHeight + 2, panel.title, kTitleScale,
             kTextColor);
    for (int i = 0; i < heatmap.q_len; ++i) {
      for (int j = 0; j < heatmap.k_len; ++j) {
        image.FillRect(
            x + j * cell, y + i * cell, cell, cell,
            CellColor(panel.weights[static_cast<size_t>(i) * heatmap.k_len + j],
                      heatmap.vmax));
      }
    }
    image.StrokeRect(x - 1, y - 1, layout.panel_width + 2,
                     layout.panel_height + 2, kFrameColor);
    // The labels' cap height centred on their row or column.
    const int centre = (cell - kGlyphAscent * scale) / 2;
    for (int i = 0; i < heatmap.q_len; ++i) {
      const std::string label =
          AxisLabel(heatmap.query_labels, i, axes.query_step);
      DrawText(image, x - kLabelGap - TextWidth(label, scale),
               y + i * cell + centre, label, scale, kTextColor);
    }
    for (int j = 0; j < heatmap.k_len; ++j) {
      const std::string label = AxisLabel(heatmap.key_labels, j, axes.key_step);
      DrawTextUp(image, x + j * cell + centre,
                 y + layout.panel_height + kLabelGap + TextWidth(label, scale),
                 label, scale, kTextColor);
    }
  }

  // The colour bar, brightest at the top.
  const int bar_bottom = layout.bar_y + layout.bar_height;
  for (int row = 0; row < layout.bar_height; ++row) {
    const double t = 1.0 - (row + 0.5) / layout.bar_height;
    image.FillRect(layout.bar_x, layout.bar_y + row, layout.bar_width, 1,
                   ColormapColor(t));
  }
  image.StrokeRect(layout.bar_x - 1, layout.bar_y - 1, layout.bar_width + 2,
                   layout.bar_height + 2, kFrameColor);
  const int tick_x = layout.bar_x + layout.bar_width + kTickTextGap;
  const int half_text = kGlyphAscent * kTickScale / 2;
  const std::pair<int, float> ticks[] = {
      {layout.bar_y, heatmap.vmax},
      {layout.bar_y + layout.bar_height / 2, heatmap.vmax / 2},
      {bar_bottom - 1, 0.0f}};
  for (const auto& [tick_y, value] : ticks) {
    image.FillRect(layout.bar_x + layout.bar_width + 1, tick_y, 4, 1,
                   kFrameColor);
    DrawText(image, tick_x, tick_y - half_text, ScaleValueText(value),
             kTickScale, kTextColor);
  }
  if (HasExactZero(heatmap)) {
    const int swatch_y = bar_bottom + kSwatchGap;
    image.FillRect(layout.bar_x, swatch_y, kBarWidth, kBarWidth, kMaskedColor);
    image.StrokeRect(layout.bar_x - 1, swatch_y - 1, kBarWidth + 2,
                     kBarWidth + 2, kFrameColor);
    DrawText(image, tick_x, swatch_y + (kBarWidth - 2 * half_text) / 2,
             kMaskedText, kTickScale, kTextColor);
  }
  return image;
}

namespace {

// The characters of a label for a terminal: control characters (and bytes
// that are not UTF-8) as '?'.
// The code point of a well-formed UTF-8 character of 2 to 4 bytes.
uint32_t CodePoint(absl::string_view c) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(c[i]); };
  if (c.size() == 2) return (byte(0) & 0x1Fu) << 6 | (byte(1) & 0x3Fu);
  if (c.size() == 3) {
    return (byte(0) & 0x0Fu) << 12 | (byte(1) & 0x3Fu) << 6 | (byte(2) & 0x3Fu);
  }
  return (byte(0) & 0x07u) << 18 | (byte(1) & 0x3Fu) << 12 |
         (byte(2) & 0x3Fu) << 6 | (byte(3) & 0x3Fu);
}

// Characters a terminal acts on rather than prints: C1 controls (U+009B is an
// 8-bit CSI) and the bidirectional overrides and isolates.
bool IsTerminalControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

std::vector<std::string> TerminalChars(absl::string_view label) {
  std::vector<std::string> chars;
  for (absl::string_view c : SplitUtf8(label)) {
    const bool control = c.size() == 1 && !IsPrintableAscii(c);
    const bool stray = c.size() == 1 && static_cast<uint8_t>(c[0]) >= 0x80;
    const bool acts = c.size() > 1 && IsTerminalControl(CodePoint(c));
    chars.push_back(control || stray || acts ? "?" : std::string(c));
  }
  return chars;
}

std::string TextLabel(const std::vector<std::string>& labels, int i) {
  return labels.empty() ? absl::StrCat(i) : labels[i];
}

// Removes the spaces at the end of `line`.
void TrimRight(std::string* line) {
  line->erase(line->find_last_not_of(' ') + 1);
}

int ShadeLevel(float w, float vmax) {
  return std::clamp(static_cast<int>(w / vmax * kShadeLevels), 0,
                    kShadeLevels - 1);
}

std::string TextCell(float w, float vmax, bool ansi_color) {
  if (!std::isfinite(w)) return "!!";
  if (ansi_color) {
    const Rgb color = w == 0 ? kMaskedColor : ColormapColor(w / vmax);
    return absl::StrCat("\x1b[48;5;", Xterm256Index(color), "m  ");
  }
  if (w == 0) return "  ";
  return std::string(2, kShadeRamp[ShadeLevel(w, vmax)]);
}

}  // namespace

std::string RenderHeatmapText(const Heatmap& heatmap, bool ansi_color) {
  std::string text;
  if (!heatmap.caption.empty()) absl::StrAppend(&text, heatmap.caption, "\n");

  std::vector<std::vector<std::string>> rows;
  size_t label_width = 0;
  for (int i = 0; i < heatmap.q_len; ++i) {
    rows.push_back(TerminalChars(TextLabel(heatmap.query_labels, i)));
    label_width = std::max(label_width, rows.back().size());
  }
  std::vector<std::vector<std::string>> columns;
  size_t label_height = 0;
  for (int j = 0; j < heatmap.k_len; ++j) {
    columns.push_back(TerminalChars(TextLabel(heatmap.key_labels, j)));
    label_height = std::max(label_height, columns.back().size());
  }
  const std::string indent(label_width + 1, ' ');
  const std::string frame = absl::StrCat(
      indent, "+", std::string(2 * static_cast<size_t>(heatmap.k_len), '-'),
      "+\n");

  for (const HeatmapPanel& panel : heatmap.panels) {
    absl::StrAppend(&text, "\n", panel.title, "\n");
    // Key labels downwards, their last characters on the line above the
    // frame.
    for (size_t line = 0; line < label_height; ++line) {
      std::string out = absl::StrCat(indent, " ");
      for (const std::vector<std::string>& chars : columns) {
        const size_t skip = label_height - chars.size();
        absl::StrAppend(&out, line < skip ? " " : chars[line - skip], " ");
      }
      TrimRight(&out);
      absl::StrAppend(&text, out, "\n");
    }
    absl::StrAppend(&text, frame);
    for (int i = 0; i < heatmap.q_len; ++i) {
      std::string out(label_width - rows[i].size(), ' ');
      for (const std::string& c : rows[i]) absl::StrAppend(&out, c);
      absl::StrAppend(&out, " |");
      for (int j = 0; j < heatmap.k_len; ++j) {
        absl::StrAppend(
            &out,
            TextCell(panel.weights[static_cast<size_t>(i) * heatmap.k_len + j],
                     heatmap.vmax, ansi_color));
      }
      absl::StrAppend(&out, ansi_color ? "\x1b[0m|" : "|");
      if (!panel.entropy.empty()) {
        absl::StrAppend(&out, absl::StrFormat(" %.2f", panel.entropy[i]));
      }
      absl::StrAppend(&text, out, "\n");
    }
    absl::StrAppend(&text, frame);
  }

  std::string ramp;
  for (int k = 0; k < kShadeLevels; ++k) {
    if (ansi_color) {
      const Rgb color = ColormapColor((k + 0.5) / kShadeLevels);
      absl::StrAppend(&ramp, "\x1b[48;5;", Xterm256Index(color), "m  ");
    } else {
      absl::StrAppend(&ramp, k == 0 ? "" : " ", std::string(1, kShadeRamp[k]));
    }
  }
  if (ansi_color) absl::StrAppend(&ramp, "\x1b[0m");
  absl::StrAppend(
      &text, "\nlegend: ", ramp, " = weights 0 to ",
      ScaleValueText(heatmap.vmax), " in ", kShadeLevels, " equal steps; ",
      ansi_color ? absl::StrCat("\x1b[48;5;", Xterm256Index(kMaskedColor),
                                "m  \x1b[0m")
                 : std::string("blank"),
      " = exactly 0 (masked)\n");
  const bool entropy = std::any_of(
      heatmap.panels.begin(), heatmap.panels.end(),
      [](const HeatmapPanel& panel) { return !panel.entropy.empty(); });
  if (entropy) {
    absl::StrAppend(
        &text,
        "right of each row: the entropy of its weights in nats (0 = "
        "one key takes all; ln(",
        heatmap.k_len, ") = ", absl::StrFormat("%.2f", std::log(heatmap.k_len)),
        " = spread evenly over every key)\n");
  }
  return text;
}

}  // namespace attnserve::client
