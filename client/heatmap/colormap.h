#ifndef ATTNSERVE_CLIENT_HEATMAP_COLORMAP_H_
#define ATTNSERVE_CLIENT_HEATMAP_COLORMAP_H_

// The heatmap's colour scale: a viridis-like map from dark violet through
// blue, teal and green to yellow, whose lightness (CIE L*) rises evenly from
// about 15 to 91, so equal steps in weight look like equal steps in colour,
// also in grey-scale print and for the common colour-vision deficiencies.

#include "client/heatmap/png_image.h"

namespace attnserve::client {

// The colour of t in [0, 1]; values outside are clamped, NaN is taken as 0.
Rgb ColormapColor(double t);

// The CIE L* lightness (0 black .. 100 white) of an sRGB colour.
double Lightness(Rgb color);

// The xterm 256-colour palette index (16..255: the 6x6x6 cube and the grey
// ramp) nearest to `color`, for ANSI "ESC[48;5;<index>m".
int Xterm256Index(Rgb color);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_COLORMAP_H_
