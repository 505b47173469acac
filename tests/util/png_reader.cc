#include "tests/util/png_reader.h"

#include <png.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace attnserve::testing {
namespace {

struct ErrorText {
  char message[256] = "";
};

void OnError(png_structp png, png_const_charp message) {
  auto* error = static_cast<ErrorText*>(png_get_error_ptr(png));
  std::snprintf(error->message, sizeof error->message, "%s", message);
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

// Reads `file` into `out`. Only plain data lives in this frame, so that
// libpng's longjmp on an error skips no destructor; `out` belongs to the
// caller.
bool Decode(std::FILE* file, DecodedPng* out, ErrorText* error) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, error, OnError, OnWarning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_init_io(png, file);
  png_read_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->bit_depth = png_get_bit_depth(png, info);
  out->color_type = png_get_color_type(png, info);
  out->interlace = png_get_interlace_type(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  png_bytepp rows = png_get_rows(png, info);
  out->rows.resize(out->height);
  for (uint32_t y = 0; y < out->height; ++y) {
    out->rows[y].assign(rows[y], rows[y] + row_bytes);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

absl::StatusOr<DecodedPng> ReadPng(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  DecodedPng png;
  ErrorText error;
  const bool ok = Decode(file, &png, &error);
  std::fclose(file);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": libpng: ", error.message));
  }
  return png;
}

}  // namespace attnserve::testing
