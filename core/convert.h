#ifndef ATTNSERVE_CORE_CONVERT_H_
#define ATTNSERVE_CORE_CONVERT_H_

// Scalar conversions between f32 and the 16-bit float formats (round to nearest
// even), and whole-buffer helpers. The kernels have vectorized versions of
// their own; these are for the reference, tests, tools and edges.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/tensor.h"

namespace attnserve {

inline float BFloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Float16ToFloat(uint16_t h);
uint16_t FloatToFloat16(float f);

// Reads element i of a buffer of `dtype` (kBool reads 0 or 1).
float LoadAsFloat(const void* data, DType dtype, int64_t i);
// Writes `value` as element i of a buffer of a float dtype.
void StoreFromFloat(void* data, DType dtype, int64_t i, float value);

// Converts n floats to `dtype` (a float dtype); `dst` may be unaligned.
void ConvertFromFloat(const float* src, void* dst, DType dtype, size_t n);
// Converts n elements of `dtype` to floats; `src` may be unaligned.
void ConvertToFloat(const void* src, DType dtype, float* dst, size_t n);
// Converts n elements of float dtype `from` to float dtype `to` (a copy when
// they are the same); both buffers may be unaligned and must not overlap.
void ConvertDType(const void* src, DType from, void* dst, DType to, size_t n);

// Symmetric int8 quantization of one row of n finite floats (an int8 paged
// cache's rows, core/paged.h): scale = max |x| / 127, dst[c] = x[c] / scale
// rounded to nearest (even), in [-127, 127]. Returns the scale (0 for a row of
// zeros, all of whose elements are then 0). dst[c] · scale is within about
// scale / 2 of x[c] (float rounding adds a few ulp): an error of at most
// 1/254 of the row's largest magnitude.
float QuantizeInt8(const float* src, int64_t n, int8_t* dst);
// dst[c] = src[c] * scale.
void DequantizeInt8(const int8_t* src, int64_t n, float scale, float* dst);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_CONVERT_H_
