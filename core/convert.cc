#include "core/convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace attnserve {

float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalize.
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                       // normal half
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
  // Subnormal half: value = mant * 2^-24, round to nearest even.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14..24
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rem = mant & ((1u << shift) - 1);
  uint32_t q = mant >> shift;
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

float LoadAsFloat(const void* data, DType dtype, int64_t i) {
  const char* p = static_cast<const char*>(data) + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case DType::kBFloat16:
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return dtype == DType::kBFloat16 ? BFloat16ToFloat(h) : Float16ToFloat(h);
    }
    case DType::kBool:
      return *p != 0 ? 1.0f : 0.0f;
    case DType::kInt8:
      return static_cast<float>(static_cast<signed char>(*p));
  }
  return 0.0f;
}

void StoreFromFloat(void* data, DType dtype, int64_t i, float value) {
  char* p = static_cast<char*>(data) + i * DTypeSize(dtype);
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(p, &value, sizeof value);
      return;
    case DType::kBFloat16:
    case DType::kFloat16: {
      const uint16_t h = dtype == DType::kBFloat16 ? FloatToBFloat16(value)
                                                   : FloatToFloat16(value);
      std::memcpy(p, &h, sizeof h);
      return;
    }
    case DType::kBool:
      *p = value != 0.0f;
      return;
    case DType::kInt8:
      *p = static_cast<char>(static_cast<signed char>(value));
      return;
  }
}

void ConvertFromFloat(const float* src, void* dst, DType dtype, size_t n) {
  if (n == 0) return;
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
}

void ConvertToFloat(const void* src, DType dtype, float* dst, size_t n) {
  if (n == 0) return;
  if (dtype == DType::kFloat32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = LoadAsFloat(src, dtype, i);
}

void ConvertDType(const void* src, DType from, void* dst, DType to, size_t n) {
  if (n == 0) return;
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(to));
    return;
  }
  // Through f32, a chunk at a time on the stack.
  constexpr size_t kChunk = 1024;
  float buffer[kChunk];
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    ConvertToFloat(s + i * DTypeSize(from), from, buffer, m);
    ConvertFromFloat(buffer, d + i * DTypeSize(to), to, m);
  }
}

float QuantizeInt8(const float* src, int64_t n, int8_t* dst) {
  float largest = 0.0f;
  for (int64_t c = 0; c < n; ++c)
    largest = std::max(largest, std::fabs(src[c]));
  if (largest == 0.0f) {
    std::memset(dst, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float scale = largest / 127.0f;
  const float inverse = 127.0f / largest;
  for (int64_t c = 0; c < n; ++c) {
    const float q = std::nearbyint(src[c] * inverse);
    dst[c] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
  return scale;
}

void DequantizeInt8(const int8_t* src, int64_t n, float scale, float* dst) {
  for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<float>(src[c]) * scale;
}

}  // namespace attnserve
