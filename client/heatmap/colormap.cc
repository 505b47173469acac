#include "client/heatmap/colormap.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace attnserve::client {
namespace {

struct Stop {
  double t;
  double r, g, b;
};

// Chosen for this project after viridis' hues; each stop's t is its CIE L*
// mapped linearly from [14.9, 90.9] to [0, 1], so that lightness rises
// evenly between stops too (within 20% at 1/32 steps).
constexpr Stop kStops[] = {
    {0.0, 68, 1, 84},      {0.121, 71, 39, 119},  {0.244, 62, 74, 137},
    {0.357, 49, 104, 142}, {0.461, 38, 130, 142}, {0.575, 31, 158, 137},
    {0.68, 53, 183, 121},  {0.786, 109, 205, 89}, {0.896, 180, 222, 44},
    {1.0, 253, 231, 37},
};

uint8_t Round(double v) { return static_cast<uint8_t>(std::lround(v)); }

double Linear(uint8_t channel) {
  const double c = channel / 255.0;
  return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
}

// The xterm levels of the cube's axes.
constexpr int kCubeLevels[6] = {0, 95, 135, 175, 215, 255};

int NearestCubeLevel(uint8_t v) {
  int best = 0;
  for (int i = 1; i < 6; ++i) {
    if (std::abs(kCubeLevels[i] - v) < std::abs(kCubeLevels[best] - v)) {
      best = i;
    }
  }
  return best;
}

int SquaredDistance(Rgb a, int r, int g, int b) {
  return (a.r - r) * (a.r - r) + (a.g - g) * (a.g - g) + (a.b - b) * (a.b - b);
}

}  // namespace

Rgb ColormapColor(double t) {
  if (!(t > 0)) t = 0;  // also NaN
  if (t > 1) t = 1;
  constexpr int kLast = sizeof kStops / sizeof kStops[0] - 1;
  int i = 0;
  while (i + 1 < kLast && t > kStops[i + 1].t) ++i;
  const Stop& a = kStops[i];
  const Stop& b = kStops[i + 1];
  const double f = (t - a.t) / (b.t - a.t);
  return {Round(a.r + (b.r - a.r) * f), Round(a.g + (b.g - a.g) * f),
          Round(a.b + (b.b - a.b) * f)};
}

double Lightness(Rgb color) {
  const double y = 0.2126 * Linear(color.r) + 0.7152 * Linear(color.g) +
                   0.0722 * Linear(color.b);
  return y > 216.0 / 24389 ? 116 * std::cbrt(y) - 16 : y * 24389.0 / 27;
}

int Xterm256Index(Rgb color) {
  const int r = NearestCubeLevel(color.r);
  const int g = NearestCubeLevel(color.g);
  const int b = NearestCubeLevel(color.b);
  const int cube = 16 + 36 * r + 6 * g + b;
  // The grey ramp 232..255 is 8, 18, ..., 238: better for near-greys.
  const int mean = (color.r + color.g + color.b) / 3;
  const int step = std::max(0, std::min(23, (mean - 8 + 5) / 10));
  const int grey = 8 + 10 * step;
  return SquaredDistance(color, grey, grey, grey) <
                 SquaredDistance(color, kCubeLevels[r], kCubeLevels[g],
                                 kCubeLevels[b])
             ? 232 + step
             : cube;
}

}  // namespace attnserve::client
