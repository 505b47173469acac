#include "client/heatmap/png_image.h"

#include <png.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/tensors/file_util.h"

namespace attnserve::client {

RgbImage::RgbImage(int width, int height, Rgb fill)
    : width_(std::max(width, 0)), height_(std::max(height, 0)) {
  pixels_.resize(static_cast<size_t>(width_) * height_ * 3);
  for (size_t i = 0; i < pixels_.size(); i += 3) {
    pixels_[i] = fill.r;
    pixels_[i + 1] = fill.g;
    pixels_[i + 2] = fill.b;
  }
}

Rgb RgbImage::At(int x, int y) const {
  if (x < 0 || x >= width_ || y < 0 || y >= height_) return {};
  const uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void RgbImage::Set(int x, int y, Rgb color) {
  if (x < 0 || x >= width_ || y < 0 || y >= height_) return;
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  p[0] = color.r;
  p[1] = color.g;
  p[2] = color.b;
}

void RgbImage::FillRect(int x, int y, int w, int h, Rgb color) {
  const int x0 = std::max(x, 0);
  const int y0 = std::max(y, 0);
  const int x1 = std::min(x + w, width_);
  const int y1 = std::min(y + h, height_);
  for (int yy = y0; yy < y1; ++yy) {
    for (int xx = x0; xx < x1; ++xx) Set(xx, yy, color);
  }
}

void RgbImage::StrokeRect(int x, int y, int w, int h, Rgb color) {
  if (w <= 0 || h <= 0) return;
  FillRect(x, y, w, 1, color);
  FillRect(x, y + h - 1, w, 1, color);
  FillRect(x, y, 1, h, color);
  FillRect(x + w - 1, y, 1, h, color);
}

absl::StatusOr<std::string> EncodePng(const RgbImage& image) {
  if (image.width() == 0 || image.height() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode an empty ", image.width(), "x",
                     image.height(), " image as PNG"));
  }
  // libpng's simplified API reports errors in `message` instead of through
  // longjmp, which would skip C++ destructors.
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width());
  png.height = static_cast<png_uint_32>(image.height());
  png.format = PNG_FORMAT_RGB;
  const png_int_32 stride = image.width() * 3;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&png, nullptr, &size, /*convert_to_8bit=*/0,
                                 image.pixels().data(), stride, nullptr)) {
    return absl::InternalError(absl::StrCat("libpng: ", png.message));
  }
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&png, bytes.data(), &size, 0,
                                 image.pixels().data(), stride, nullptr)) {
    return absl::InternalError(absl::StrCat("libpng: ", png.message));
  }
  bytes.resize(size);
  return bytes;
}

absl::Status WritePngFile(const std::string& path, const RgbImage& image) {
  absl::StatusOr<std::string> bytes = EncodePng(image);
  if (!bytes.ok()) return bytes.status();
  return WriteStringToFile(path, *bytes);
}

}  // namespace attnserve::client
