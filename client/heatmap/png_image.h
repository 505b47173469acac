#ifndef ATTNSERVE_CLIENT_HEATMAP_PNG_IMAGE_H_
#define ATTNSERVE_CLIENT_HEATMAP_PNG_IMAGE_H_

// An 8-bit RGB canvas and its PNG encoding (libpng), for attnctl heatmap.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve::client {

struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;

  friend bool operator==(const Rgb& a, const Rgb& b) {
    return a.r == b.r && a.g == b.g && a.b == b.b;
  }
  friend bool operator!=(const Rgb& a, const Rgb& b) { return !(a == b); }
};

// A width x height image, rows top to bottom, 3 bytes per pixel. Drawing
// outside the image is clipped, so callers need not check their coordinates.
class RgbImage {
 public:
  // Negative sizes are taken as 0.
  RgbImage(int width, int height, Rgb fill);

  int width() const { return width_; }
  int height() const { return height_; }
  // The pixel at (x, y); black outside the image.
  Rgb At(int x, int y) const;
  void Set(int x, int y, Rgb color);
  // The rectangle [x, x + w) x [y, y + h), clipped.
  void FillRect(int x, int y, int w, int h, Rgb color);
  // Its 1-pixel outline, clipped.
  void StrokeRect(int x, int y, int w, int h, Rgb color);
  // width * height * 3 bytes.
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

// The image as a PNG file's bytes: 8-bit RGB (colour type 2), not interlaced.
// InvalidArgument for an empty image (PNG has no 0-pixel images), Internal
// when libpng fails.
absl::StatusOr<std::string> EncodePng(const RgbImage& image);

// EncodePng, written to `path`. Besides its errors: PermissionDenied
// ("<path>: cannot open for writing: ...") and Internal ("<path>: write
// failed: ...") as WriteStringToFile gives them.
absl::Status WritePngFile(const std::string& path, const RgbImage& image);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_PNG_IMAGE_H_
