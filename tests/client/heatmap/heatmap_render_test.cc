// The heatmap's parts without a server: UTF-8 splitting, the bitmap font, the
// colour scale, the PNG writer (decoded back with libpng's reader), the
// layout, the picture and the text rendering, and picking panels out of a
// weights tensor.
// Long because each part gets its own handful of cases; they share the
// decoding helpers at the top.

#include "client/heatmap/heatmap_render.h"

#include <png.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/heatmap/bitmap_font.h"
#include "client/heatmap/colormap.h"
#include "client/heatmap/heatmap.h"
#include "client/heatmap/png_image.h"
#include "client/heatmap/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/png_reader.h"
#include "tests/util/temp_dir.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::DecodedPng;
using ::attnserve::testing::ReadPng;
using ::attnserve::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

MATCHER_P3(IsRgb, r, g, b, "") {
  return arg.r == r && arg.g == g && arg.b == b;
}

std::vector<size_t> Sizes(const std::vector<absl::string_view>& pieces) {
  std::vector<size_t> sizes;
  for (absl::string_view p : pieces) sizes.push_back(p.size());
  return sizes;
}

TEST(Utf8Test, SplitsWellFormedCharacters) {
  // a, e-acute, euro sign, an emoji.
  EXPECT_THAT(Sizes(SplitUtf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80")),
              ElementsAre(1, 2, 3, 4));
  EXPECT_TRUE(SplitUtf8("").empty());
}

TEST(Utf8Test, MalformedBytesAreCharactersOfTheirOwn) {
  EXPECT_THAT(Sizes(SplitUtf8("\xFFz")), ElementsAre(1, 1));
  EXPECT_THAT(Sizes(SplitUtf8("\xE2\x82")), ElementsAre(1, 1));  // truncated
  EXPECT_THAT(Sizes(SplitUtf8("\xC0\xAF")), ElementsAre(1, 1));  // overlong
  EXPECT_THAT(Sizes(SplitUtf8("\xED\xA0\x80")),                  // surrogate
              ElementsAre(1, 1, 1));
  EXPECT_THAT(Sizes(SplitUtf8("\xF4\x90\x80\x80")),  // above U+10FFFF
              ElementsAre(1, 1, 1, 1));
  EXPECT_TRUE(IsPrintableAscii("~"));
  EXPECT_FALSE(IsPrintableAscii("\x7F"));
  EXPECT_FALSE(IsPrintableAscii("\xC3\xA9"));
}

TEST(BitmapFontTest, GlyphsAreDistinctAndFitTheirCell) {
  std::set<Glyph> seen;
  for (char c = '!'; c <= '~'; ++c) {
    const Glyph& glyph = GlyphOf(std::string(1, c));
    int pixels = 0;
    for (uint8_t row : glyph) {
      EXPECT_EQ(row & ~0x1F, 0) << "'" << c << "' is wider than 5 pixels";
      pixels += __builtin_popcount(row);
    }
    EXPECT_GT(pixels, 0) << "'" << c << "' is empty";
    EXPECT_NE(glyph, PlaceholderGlyph()) << "'" << c << "'";
    EXPECT_TRUE(seen.insert(glyph).second) << "'" << c << "' repeats a glyph";
  }
  for (uint8_t row : GlyphOf(" ")) EXPECT_EQ(row, 0);
  // Only letters that go below the baseline use the two bottom rows.
  for (char c = 'A'; c <= 'Z'; ++c) {
    EXPECT_EQ(GlyphOf(std::string(1, c))[7], 0) << c;
  }
  EXPECT_NE(GlyphOf("g")[8], 0);
  EXPECT_NE(GlyphOf("y")[8], 0);
}

TEST(BitmapFontTest, OtherCharactersAreThePlaceholderBox) {
  EXPECT_EQ(GlyphOf("\xC3\xA9"), PlaceholderGlyph());
  EXPECT_EQ(GlyphOf("\t"), PlaceholderGlyph());
  EXPECT_EQ(GlyphOf("\xFF"), PlaceholderGlyph());
  EXPECT_EQ(PlaceholderGlyph()[0], 0x1F);
  EXPECT_EQ(PlaceholderGlyph()[3], 0x11);
}

TEST(BitmapFontTest, TextWidthCountsCharactersNotBytes) {
  EXPECT_EQ(TextWidth("", 2), 0);
  EXPECT_EQ(TextWidth("a", 1), 5);
  EXPECT_EQ(TextWidth("ab", 1), 11);
  EXPECT_EQ(TextWidth("ab", 3), 33);
  EXPECT_EQ(TextWidth("caf\xC3\xA9", 1), 23);
}

// Draws `text` with `draw` on a blank canvas and returns the set pixels.
template <typename Draw>
std::set<std::pair<int, int>> SetPixels(int w, int h, Draw draw) {
  RgbImage image(w, h, kBackground);
  draw(image);
  std::set<std::pair<int, int>> pixels;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      if (image.At(x, y) != kBackground) pixels.insert({x, y});
    }
  }
  return pixels;
}

TEST(BitmapFontTest, DrawTextAndDrawTextUpPlaceTheGlyphs) {
  std::set<std::pair<int, int>> expected;
  const Glyph& l = GlyphOf("L");  // a column on the left, a bar at the bottom
  for (int v = 0; v < kGlyphHeight; ++v) {
    for (int u = 0; u < kGlyphWidth; ++u) {
      if (l[v] >> (4 - u) & 1) expected.insert({2 + u, 3 + v});
    }
  }
  EXPECT_EQ(SetPixels(10, 14,
                      [](RgbImage& image) {
                        DrawText(image, 2, 3, "L", 1, kTextColor);
                      }),
            expected);

  // Turned counter-clockwise: the column becomes the bottom row and the bar
  // the right-hand column.
  std::set<std::pair<int, int>> up;
  for (const auto& [x, y] : expected) up.insert({1 + (y - 3), 12 - (x - 2)});
  EXPECT_EQ(SetPixels(14, 14,
                      [](RgbImage& image) {
                        DrawTextUp(image, 1, 13, "L", 1, kTextColor);
                      }),
            up);
  const std::set<std::pair<int, int>> turned = SetPixels(
      14, 14, [](RgbImage& image) { DrawTextUp(image, 1, 13, "L", 1, {}); });
  EXPECT_TRUE(turned.count({1, 12}));  // the column's top: left, bottom
  EXPECT_TRUE(turned.count({7, 8}));   // the bar's right end: right, top
  EXPECT_FALSE(turned.count({1, 8}));  // the glyph's empty top-right
}

TEST(BitmapFontTest, ScaleDrawsSquaresAndClips) {
  const auto pixels = SetPixels(4, 4, [](RgbImage& image) {
    DrawText(image, -4, -2, ".", 2, kTextColor);  // mostly outside
  });
  // '.' is the 2x2 dot in columns 1-2, rows 5-6: at scale 2 columns 2-5
  // and rows 10-13, shifted by (-4, -2) below the 4x4 image.
  EXPECT_TRUE(pixels.empty());
  const auto dot = SetPixels(8, 16, [](RgbImage& image) {
    DrawText(image, 0, 0, ".", 2, kTextColor);
  });
  EXPECT_EQ(dot.size(), 16u);
  EXPECT_TRUE(dot.count({2, 10}));
  EXPECT_TRUE(dot.count({5, 13}));
}

TEST(ColormapTest, EndpointsClampingAndNaN) {
  EXPECT_THAT(ColormapColor(0), IsRgb(68, 1, 84));
  EXPECT_THAT(ColormapColor(1), IsRgb(253, 231, 37));
  EXPECT_EQ(ColormapColor(-0.5), ColormapColor(0));
  EXPECT_EQ(ColormapColor(7), ColormapColor(1));
  EXPECT_EQ(ColormapColor(std::nan("")), ColormapColor(0));
}

TEST(ColormapTest, LightnessRisesEvenly) {
  const double start = Lightness(ColormapColor(0));
  const double end = Lightness(ColormapColor(1));
  EXPECT_NEAR(start, 15, 1);
  EXPECT_NEAR(end, 91, 1);
  const int kSteps = 32;
  const double mean_step = (end - start) / kSteps;
  for (int i = 0; i < kSteps; ++i) {
    const double step = Lightness(ColormapColor((i + 1.0) / kSteps)) -
                        Lightness(ColormapColor(i * 1.0 / kSteps));
    EXPECT_GT(step, 0.8 * mean_step) << "step " << i;
    EXPECT_LT(step, 1.25 * mean_step) << "step " << i;
  }
  // The masked grey is not on the scale: no colour of it is that close.
  for (int i = 0; i <= 100; ++i) {
    const Rgb c = ColormapColor(i / 100.0);
    EXPECT_GT(std::abs(c.r - kMaskedColor.r) + std::abs(c.g - kMaskedColor.g) +
                  std::abs(c.b - kMaskedColor.b),
              60)
        << i;
  }
}

TEST(ColormapTest, Xterm256PicksTheNearestPaletteEntry) {
  EXPECT_EQ(Xterm256Index({0, 0, 0}), 16);
  EXPECT_EQ(Xterm256Index({255, 255, 255}), 231);
  EXPECT_EQ(Xterm256Index({255, 0, 0}), 196);
  EXPECT_EQ(Xterm256Index({0, 95, 135}), 16 + 6 * 1 + 2);
  EXPECT_EQ(Xterm256Index({128, 128, 128}), 244);  // grey ramp: 8 + 10 * 12
  EXPECT_EQ(Xterm256Index(ColormapColor(1)), 16 + 36 * 5 + 6 * 4 + 0);
}

TEST(PngImageTest, WrittenFileDecodesWithLibpng) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  RgbImage image(7, 5, {10, 20, 30});
  image.Set(0, 0, {255, 0, 0});
  image.Set(6, 4, {0, 0, 255});
  image.FillRect(2, 1, 3, 2, {1, 2, 3});
  image.Set(-1, 2, {9, 9, 9});  // clipped
  image.Set(7, 0, {9, 9, 9});
  const std::string path = dir.Path("image.png");
  ASSERT_TRUE(WritePngFile(path, image).ok());

  absl::StatusOr<DecodedPng> png = ReadPng(path);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->width, 7u);
  EXPECT_EQ(png->height, 5u);
  EXPECT_EQ(png->bit_depth, 8);
  EXPECT_EQ(png->color_type, PNG_COLOR_TYPE_RGB);
  EXPECT_EQ(png->interlace, PNG_INTERLACE_NONE);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      const Rgb want = image.At(x, y);
      EXPECT_THAT(png->At(x, y), IsRgb(want.r, want.g, want.b))
          << "(" << x << ", " << y << ")";
    }
  }
  EXPECT_THAT(png->At(0, 0), IsRgb(255, 0, 0));
  EXPECT_THAT(png->At(3, 2), IsRgb(1, 2, 3));
  EXPECT_THAT(png->At(0, 2), IsRgb(10, 20, 30));
}

TEST(PngImageTest, EmptyImagesAndUnwritablePathsAreErrors) {
  absl::StatusOr<std::string> empty = EncodePng(RgbImage(0, 3, {}));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("empty 0x3 image"));

  const absl::Status status =
      WritePngFile("/nonexistent-dir/x.png", RgbImage(2, 2, {}));
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(),
              HasSubstr("/nonexistent-dir/x.png: cannot open for writing"));
}

TEST(PngImageTest, StrokeRectDrawsTheOutlineOnly) {
  RgbImage image(5, 4, kBackground);
  image.StrokeRect(0, 0, 5, 4, kTextColor);
  EXPECT_EQ(image.At(0, 0), kTextColor);
  EXPECT_EQ(image.At(4, 3), kTextColor);
  EXPECT_EQ(image.At(2, 3), kTextColor);
  EXPECT_EQ(image.At(2, 1), kBackground);
  EXPECT_EQ(image.At(-1, 0), (Rgb{}));
}

// A heatmap of `panels` panels of q x k weights: w(p, i, j) = (p + 1) * (i *
// k + j) / (panels * q * k), so every cell differs; cell (0, 0) of each panel
// is 0 (masked).
Heatmap MakeHeatmap(int panels, int q, int k) {
  Heatmap heatmap;
  heatmap.q_len = q;
  heatmap.k_len = k;
  for (int p = 0; p < panels; ++p) {
    HeatmapPanel panel;
    panel.title = "head " + std::to_string(p);
    for (int i = 0; i < q * k; ++i) {
      panel.weights.push_back(static_cast<float>(p + 1) * i / (panels * q * k));
    }
    heatmap.panels.push_back(panel);
  }
  heatmap.vmax = MaxWeight(heatmap);
  return heatmap;
}

TEST(HeatmapLayoutTest, CellSizeFollowsTheLengthsAndLabels) {
  EXPECT_EQ(ComputeHeatmapLayout(MakeHeatmap(1, 6, 6)).cell, 32);
  EXPECT_EQ(ComputeHeatmapLayout(MakeHeatmap(1, 1, 512)).cell, 1);
  EXPECT_EQ(ComputeHeatmapLayout(MakeHeatmap(1, 100, 20)).cell, 3);
  Heatmap labelled = MakeHeatmap(1, 100, 20);
  labelled.query_labels.assign(100, "x");
  EXPECT_EQ(ComputeHeatmapLayout(labelled).cell, 10);
  EXPECT_EQ(ComputeHeatmapLayout(MakeHeatmap(1, 6, 6)).label_scale, 2);
  EXPECT_EQ(ComputeHeatmapLayout(MakeHeatmap(1, 40, 40)).label_scale, 1);
}

TEST(HeatmapLayoutTest, PanelsFillAGrid) {
  const std::vector<std::pair<int, std::pair<int, int>>> cases = {
      {1, {1, 1}}, {3, {3, 1}}, {4, {4, 1}},  {5, {4, 2}},
      {8, {4, 2}}, {9, {3, 3}}, {10, {4, 3}}, {64, {8, 8}}};
  for (const auto& [n, grid] : cases) {
    const HeatmapLayout layout = ComputeHeatmapLayout(MakeHeatmap(n, 4, 5));
    EXPECT_EQ(layout.columns, grid.first) << n << " panels";
    EXPECT_EQ(layout.rows, grid.second) << n << " panels";
  }
}

TEST(HeatmapLayoutTest, PanelsAndBarDoNotOverlapAndFitTheImage) {
  for (int n : {1, 2, 5, 12}) {
    Heatmap heatmap = MakeHeatmap(n, 7, 9);
    heatmap.caption = "a caption";
    heatmap.key_labels.assign(9, "dessert");
    heatmap.query_labels.assign(7, "short,");
    const HeatmapLayout layout = ComputeHeatmapLayout(heatmap);
    ASSERT_EQ(layout.panels.size(), static_cast<size_t>(n));
    EXPECT_EQ(layout.panel_width, 9 * layout.cell);
    EXPECT_EQ(layout.panel_height, 7 * layout.cell);
    const int label_width = TextWidth("short,", layout.label_scale);
    const int label_height = TextWidth("dessert", layout.label_scale);
    for (int a = 0; a < n; ++a) {
      const HeatmapLayout::Point& p = layout.panels[a];
      // The panel with its labels and title inside the image.
      EXPECT_GE(p.x - label_width, 0);
      EXPECT_GE(p.y - 2 * kGlyphHeight, 0);
      EXPECT_LE(p.x + layout.panel_width, layout.bar_x);
      EXPECT_LE(p.y + layout.panel_height + label_height, layout.height);
      for (int b = a + 1; b < n; ++b) {
        const HeatmapLayout::Point& q = layout.panels[b];
        const bool apart = q.x >= p.x + layout.panel_width + label_width ||
                           q.y >= p.y + layout.panel_height + label_height ||
                           p.x >= q.x + layout.panel_width + label_width ||
                           p.y >= q.y + layout.panel_height + label_height;
        EXPECT_TRUE(apart) << "panels " << a << " and " << b << " of " << n;
      }
    }
    EXPECT_LE(layout.bar_y + layout.bar_height, layout.height);
    EXPECT_LT(layout.bar_x + layout.bar_width, layout.width);
  }
}

TEST(HeatmapImageTest, CellsHaveTheirScaleColours) {
  Heatmap heatmap = MakeHeatmap(2, 3, 4);
  heatmap.caption = "caption";
  const HeatmapLayout layout = ComputeHeatmapLayout(heatmap);
  const RgbImage image = RenderHeatmapImage(heatmap);
  EXPECT_EQ(image.width(), layout.width);
  EXPECT_EQ(image.height(), layout.height);
  const int c = layout.cell;
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) {
        const float w = heatmap.panels[p].weights[i * 4 + j];
        const Rgb want =
            w == 0 ? kMaskedColor : ColormapColor(w / heatmap.vmax);
        const int x = layout.panels[p].x + j * c + c / 2;
        const int y = layout.panels[p].y + i * c + c / 2;
        EXPECT_EQ(image.At(x, y), want)
            << "panel " << p << " cell " << i << ", " << j;
      }
    }
  }
  // The largest weight (the last cell of the last panel) is the brightest.
  EXPECT_EQ(
      image.At(layout.panels[1].x + 4 * c - 1, layout.panels[1].y + 3 * c - 1),
      ColormapColor(1));
  // The bar: bright at the top, dark at the bottom.
  EXPECT_EQ(image.At(layout.bar_x + 8, layout.bar_y),
            ColormapColor(1 - 0.5 / layout.bar_height));
  EXPECT_EQ(image.At(layout.bar_x + 8, layout.bar_y + layout.bar_height - 1),
            ColormapColor(0.5 / layout.bar_height));
  // The masked swatch below it.
  EXPECT_EQ(image.At(layout.bar_x + 8, layout.bar_y + layout.bar_height + 20),
            kMaskedColor);
}

TEST(HeatmapImageTest, NoMaskedSwatchWithoutZerosAndNonFiniteIsMagenta) {
  Heatmap heatmap = MakeHeatmap(1, 2, 2);
  heatmap.panels[0].weights = {0.25f, NAN, 0.5f, 0.25f};
  heatmap.vmax = 0.5f;
  const HeatmapLayout layout = ComputeHeatmapLayout(heatmap);
  const RgbImage image = RenderHeatmapImage(heatmap);
  EXPECT_EQ(image.At(layout.bar_x + 8, layout.bar_y + layout.bar_height + 20),
            kBackground);
  const int c = layout.cell;
  EXPECT_EQ(image.At(layout.panels[0].x + c + c / 2, layout.panels[0].y + 1),
            kNonFiniteColor);
  EXPECT_EQ(image.At(layout.panels[0].x + 1, layout.panels[0].y + c + 1),
            ColormapColor(1));
}

// Whether any pixel of the rectangle is text-coloured.
bool HasText(const RgbImage& image, int x, int y, int w, int h) {
  for (int yy = y; yy < y + h; ++yy) {
    for (int xx = x; xx < x + w; ++xx) {
      if (image.At(xx, yy) == kTextColor) return true;
    }
  }
  return false;
}

TEST(HeatmapImageTest, LabelsAndTitlesAreDrawn) {
  Heatmap heatmap = MakeHeatmap(1, 2, 3);
  heatmap.query_labels = {"Life", "is"};
  heatmap.key_labels = {"eat", "dessert", "first"};
  const HeatmapLayout layout = ComputeHeatmapLayout(heatmap);
  const RgbImage image = RenderHeatmapImage(heatmap);
  const int s = layout.label_scale;
  const int x = layout.panels[0].x;
  const int y = layout.panels[0].y;
  const int c = layout.cell;
  // "Life" right-aligned left of row 0; nothing left of it.
  EXPECT_TRUE(HasText(image, x - 4 - TextWidth("Life", s), y, 5 * s, c));
  EXPECT_FALSE(HasText(image, 0, y, x - 5 - TextWidth("Life", s), c));
  // "dessert" below column 1, as tall as the word is wide; "eat" shorter.
  const int below = y + layout.panel_height + 4;
  EXPECT_TRUE(
      HasText(image, x + c, below + TextWidth("dessert", s) - 3 * s, c, 3 * s));
  EXPECT_FALSE(HasText(image, x, below + TextWidth("eat", s) + 1, c,
                       TextWidth("dessert", s)));
  // The title above the panel.
  EXPECT_TRUE(HasText(image, x, y - 2 * kGlyphHeight - 4,
                      TextWidth("head 0", 2), 2 * kGlyphHeight));
}

TEST(HeatmapTextTest, DrawsOneBlockPerPanelWithLabelsAndALegend) {
  Heatmap heatmap;
  heatmap.q_len = 2;
  heatmap.k_len = 3;
  heatmap.query_labels = {"Life", "is"};
  heatmap.key_labels = {"a", "bc", "d"};
  heatmap.panels = {{"head 0", {1.0f, 0.0f, 0.0f, 0.5f, 0.25f, 0.25f}},
                    {"head 3", {0.1f, 0.2f, 0.7f, 0.0f, 0.0f, 1.0f}}};
  heatmap.vmax = 1;
  heatmap.caption = "weights";
  EXPECT_EQ(RenderHeatmapText(heatmap, false),
            "weights\n"
            "\n"
            "head 0\n"
            "        b\n"
            "      a c d\n"
            "     +------+\n"
            "Life |@@    |\n"
            "  is |++----|\n"  // 0.5 -> level 4 '+', 0.25 -> level 2 '-'
            "     +------+\n"
            "\n"
            "head 3\n"
            "        b\n"
            "      a c d\n"
            "     +------+\n"
            "Life |..::##|\n"
            "  is |    @@|\n"
            "     +------+\n"
            "\n"
            "legend: . : - = + * # % @ = weights 0 to 1 in 9 equal steps; "
            "blank = exactly 0 (masked)\n");
}

TEST(HeatmapTextTest, IndicesWithoutLabelsAndOddCharacters) {
  Heatmap heatmap;
  heatmap.q_len = 2;
  heatmap.k_len = 12;
  heatmap.panels = {{"head 0", std::vector<float>(24, 0.5f)}};
  heatmap.vmax = 0.5;
  const std::string text = RenderHeatmapText(heatmap, false);
  // Key 10 and 11 written downwards over two lines, the others on the
  // second.
  EXPECT_THAT(text, HasSubstr("\n                       1 1\n"
                              "   0 1 2 3 4 5 6 7 8 9 0 1\n"));
  EXPECT_THAT(text, HasSubstr("\n0 |@@@@@@@@@@@@@@@@@@@@@@@@|\n"));
  EXPECT_THAT(text, HasSubstr("legend: . : - = + * # % @ = weights 0 to 0.5"));

  heatmap.q_len = 1;
  heatmap.k_len = 1;
  heatmap.panels = {{"head 0", {NAN}}};
  heatmap.query_labels = {"a\tb\xC3\xA9"};
  heatmap.key_labels = {"x"};
  EXPECT_THAT(RenderHeatmapText(heatmap, false),
              HasSubstr("\na?b\xC3\xA9 |!!|\n"));
  // Characters a terminal would act on: U+009B (8-bit CSI) and U+202E
  // (right-to-left override) print as '?'.
  heatmap.query_labels = {
      "c\xC2\x9B"
      "2Jd\xE2\x80\xAE"};
  EXPECT_THAT(RenderHeatmapText(heatmap, false), HasSubstr("\nc?2Jd? |!!|\n"));
}

TEST(HeatmapTextTest, AnsiColourUsesTheScale) {
  Heatmap heatmap;
  heatmap.q_len = 1;
  heatmap.k_len = 2;
  heatmap.panels = {{"head 0", {1.0f, 0.0f}}};
  heatmap.vmax = 1;
  const std::string text = RenderHeatmapText(heatmap, true);
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "0 |\x1b[48;5;", Xterm256Index(ColormapColor(1)),
                        "m  \x1b[48;5;", Xterm256Index(kMaskedColor),
                        "m  \x1b[0m|\n")));
  EXPECT_THAT(RenderHeatmapText(heatmap, false), Not(HasSubstr("\x1b")));
}

TEST(HeatmapFromWeightsTest, PicksTheBatchElementAndHeads) {
  // [B=2, Hq=3, Lq=2, Lk=2], element value = its flat index.
  v1::Tensor weights;
  weights.set_dtype(v1::FLOAT32);
  for (int64_t d : {2, 3, 2, 2}) weights.add_shape(d);
  std::vector<float> values(24);
  for (int i = 0; i < 24; ++i) values[i] = static_cast<float>(i);
  weights.set_data(values.data(), values.size() * sizeof(float));

  Heatmap all = HeatmapFromWeights(weights, 1, std::nullopt);
  EXPECT_EQ(all.q_len, 2);
  EXPECT_EQ(all.k_len, 2);
  ASSERT_EQ(all.panels.size(), 3u);
  EXPECT_EQ(all.panels[0].title, "head 0");
  EXPECT_THAT(all.panels[0].weights, ElementsAre(12, 13, 14, 15));
  EXPECT_EQ(all.panels[2].title, "head 2");
  EXPECT_THAT(all.panels[2].weights, ElementsAre(20, 21, 22, 23));

  Heatmap one = HeatmapFromWeights(weights, 0, 1);
  ASSERT_EQ(one.panels.size(), 1u);
  EXPECT_EQ(one.panels[0].title, "head 1");
  EXPECT_THAT(one.panels[0].weights, ElementsAre(4, 5, 6, 7));
}

TEST(HeatmapFromWeightsTest, TakesEachRowsEntropyAndTitlesTheMean) {
  // [B=1, Hq=2, Lq=2, Lk=2]: head 1's rows uniform (ln 2) and one-hot (0).
  v1::Tensor weights, entropy;
  weights.set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 2, 2, 2}) weights.add_shape(d);
  const std::vector<float> w = {1, 0, 0, 1, 0.5f, 0.5f, 1, 0};
  weights.set_data(w.data(), w.size() * sizeof(float));
  entropy.set_dtype(v1::FLOAT32);
  for (int64_t d : {1, 2, 2}) entropy.add_shape(d);
  const std::vector<float> e = {0, 0, std::log(2.0f), 0};
  entropy.set_data(e.data(), e.size() * sizeof(float));

  Heatmap heatmap = HeatmapFromWeights(weights, 0, 1, &entropy);
  ASSERT_EQ(heatmap.panels.size(), 1u);
  EXPECT_EQ(heatmap.panels[0].title, "head 1, entropy 0.35");
  EXPECT_THAT(heatmap.panels[0].entropy, ElementsAre(std::log(2.0f), 0.0f));
  const std::string text = RenderHeatmapText(heatmap, false);
  EXPECT_THAT(text, HasSubstr("| 0.69\n"));
  EXPECT_THAT(text, HasSubstr("| 0.00\n"));
  EXPECT_THAT(text, HasSubstr("right of each row: the entropy of its weights "
                              "in nats (0 = one key takes all; ln(2) = 0.69"));
  // Without entropy, neither.
  EXPECT_THAT(RenderHeatmapText(HeatmapFromWeights(weights, 0, 1), false),
              Not(HasSubstr("entropy")));
}

TEST(HeatmapTokensTest, SplitOnWhitespaceKeepingPunctuation) {
  EXPECT_THAT(SplitTokens("Life is short, eat dessert first"),
              ElementsAre("Life", "is", "short,", "eat", "dessert", "first"));
  EXPECT_THAT(SplitTokens("  a\tb\n\nc. "), ElementsAre("a", "b", "c."));
  EXPECT_TRUE(SplitTokens(" \t").empty());
}

TEST(HeatmapScaleTest, MaxWeightAndScaleText) {
  Heatmap heatmap = MakeHeatmap(2, 2, 2);
  EXPECT_FLOAT_EQ(MaxWeight(heatmap), 2.0f * 3 / 8);
  heatmap.panels[0].weights[1] = INFINITY;
  EXPECT_FLOAT_EQ(MaxWeight(heatmap), 2.0f * 3 / 8);
  for (HeatmapPanel& panel : heatmap.panels) {
    panel.weights.assign(4, 0.0f);
  }
  EXPECT_EQ(MaxWeight(heatmap), 1.0f);
  EXPECT_EQ(ScaleValueText(1), "1");
  EXPECT_EQ(ScaleValueText(0.43121f), "0.4312");
  EXPECT_EQ(ScaleValueText(0.000123f), "0.000123");
}

}  // namespace
}  // namespace attnserve::client
