#include "core/convert.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve {
namespace {

using ::testing::ElementsAre;

// The bits of `from` as a To of the same size.
template <typename To, typename From>
To BitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

float FromBits(uint32_t bits) { return BitCast<float>(bits); }
uint32_t ToBits(float f) { return BitCast<uint32_t>(f); }

// A 16-bit float format described by its field widths, decoded and rounded with
// plain double arithmetic so the tests share no code with core/convert.cc.
class Format {
 public:
  Format(int exponent_bits, int mantissa_bits)
      : exponent_bits_(exponent_bits), mantissa_bits_(mantissa_bits) {
    // IEEE 754 rounds as if the exponent were unbounded, so for ranking
    // infinity stands for the power of two above the largest finite value (its
    // pattern is even, so a tie there goes to infinity).
    for (uint32_t h = 0; h < inf_bits(); ++h) {
      ranked_.push_back(Decode(static_cast<uint16_t>(h)));
    }
    ranked_.push_back(std::ldexp(1.0, (1 << exponent_bits) - 1 - bias()));
  }

  uint16_t inf_bits() const {
    return static_cast<uint16_t>(((1 << exponent_bits_) - 1) << mantissa_bits_);
  }
  bool IsNaN(uint16_t h) const { return (h & 0x7fff) > inf_bits(); }

  // The value of a non-NaN pattern.
  double Decode(uint16_t h) const {
    const int exponent = (h & 0x7fff) >> mantissa_bits_;
    const int mantissa = h & ((1 << mantissa_bits_) - 1);
    double magnitude;
    if (exponent == (1 << exponent_bits_) - 1) {
      magnitude = std::numeric_limits<double>::infinity();
    } else if (exponent == 0) {
      magnitude = std::ldexp(mantissa, 1 - bias() - mantissa_bits_);
    } else {
      magnitude = std::ldexp(mantissa + (1 << mantissa_bits_),
                             exponent - bias() - mantissa_bits_);
    }
    return (h & 0x8000) ? -magnitude : magnitude;
  }

  // The positive patterns 0..inf_bits() increase with their value.
  double RankValue(uint16_t h) const { return ranked_[h]; }

  // Round to nearest, ties to even, of a non-NaN float.
  uint16_t Round(float f) const {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= ranked_.back()) return sign | inf_bits();
    // The largest pattern whose value is <= a, and the next one.
    const auto next = std::upper_bound(ranked_.begin(), ranked_.end(), a);
    const uint16_t hi = static_cast<uint16_t>(next - ranked_.begin());
    const uint16_t lo = hi - 1;
    // Both differences are exact in double: the operands are floats of close
    // magnitude.
    const double below = a - ranked_[lo];
    const double above = ranked_[hi] - a;
    uint16_t r;
    if (below < above) {
      r = lo;
    } else if (above < below) {
      r = hi;
    } else {
      r = (lo & 1) ? hi : lo;
    }
    return sign | r;
  }

 private:
  int bias() const { return (1 << (exponent_bits_ - 1)) - 1; }

  int exponent_bits_;
  int mantissa_bits_;
  std::vector<double> ranked_;
};

const Format& Half() {
  static const Format* const format = new Format(5, 10);
  return *format;
}

const Format& BFloat16() {
  static const Format* const format = new Format(8, 7);
  return *format;
}

// Floats that probe rounding: every value of the format, the midpoints between
// neighbours and the floats right next to them, plus a sweep over all float
// bit patterns.
std::vector<float> RoundingProbes(const Format& format) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < format.inf_bits(); ++h) {
    const double lo = format.RankValue(static_cast<uint16_t>(h));
    const double hi = format.RankValue(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 1 more bit
    for (float f :
         {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f),
          std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      if (std::isfinite(f)) {
        probes.push_back(f);
        probes.push_back(-f);
      }
    }
  }
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 40009) {
    probes.push_back(FromBits(static_cast<uint32_t>(bits)));
  }
  probes.push_back(std::numeric_limits<float>::max());
  probes.push_back(std::numeric_limits<float>::infinity());
  probes.push_back(-std::numeric_limits<float>::infinity());
  probes.push_back(std::numeric_limits<float>::denorm_min());
  return probes;
}

TEST(ConvertTest, ReferenceFormatsAgreeWithKnownValues) {
  // Guards the independent decoder the other tests rely on.
  EXPECT_EQ(Half().Decode(0x3c00), 1.0);
  EXPECT_EQ(Half().Decode(0x7bff), 65504.0);
  EXPECT_EQ(Half().Decode(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(Half().Decode(0x0400), std::ldexp(1.0, -14));
  EXPECT_EQ(Half().Decode(0xc000), -2.0);
  EXPECT_EQ(BFloat16().Decode(0x3f80), 1.0);
  EXPECT_EQ(BFloat16().Decode(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(BFloat16().Decode(0x7f7f), std::ldexp(255.0, 120));
}

TEST(ConvertTest, Float16ToFloatDecodesEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Float16ToFloat(static_cast<uint16_t>(h));
    if (Half().IsNaN(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    } else {
      // Compares bits so that -0 and +0 differ.
      EXPECT_EQ(ToBits(f), ToBits(static_cast<float>(Half().Decode(h))))
          << std::hex << h;
    }
  }
}

TEST(ConvertTest, Float16RoundTripsEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back =
        FloatToFloat16(Float16ToFloat(static_cast<uint16_t>(h)));
    if (Half().IsNaN(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(Half().IsNaN(back)) << std::hex << h << " -> " << back;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
    } else {
      EXPECT_EQ(back, static_cast<uint16_t>(h)) << std::hex << h;
    }
  }
}

TEST(ConvertTest, FloatToFloat16RoundsToNearestEven) {
  for (float f : RoundingProbes(Half())) {
    const uint16_t got = FloatToFloat16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(Half().IsNaN(got)) << std::hex << ToBits(f);
    } else {
      ASSERT_EQ(got, Half().Round(f)) << std::hex << ToBits(f) << " = " << f;
    }
  }
}

TEST(ConvertTest, Float16EdgeCases) {
  EXPECT_EQ(FloatToFloat16(0.0f), 0x0000);
  EXPECT_EQ(FloatToFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3c00);
  // Ties between 1 and 1 + 2^-10 go to the even pattern.
  EXPECT_EQ(FloatToFloat16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToFloat16(65520.0f), 0x7c00);  // the tie overflows
  EXPECT_EQ(FloatToFloat16(1e9f), 0x7c00);
  EXPECT_EQ(FloatToFloat16(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToFloat16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToFloat16(-std::numeric_limits<float>::infinity()), 0xfc00);
  // Subnormals: 2^-24 is the smallest; half of it ties to zero.
  EXPECT_EQ(FloatToFloat16(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToFloat16(0x1p-25f), 0x0000);
  EXPECT_EQ(FloatToFloat16(-0x1p-25f), 0x8000);
  EXPECT_EQ(FloatToFloat16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToFloat16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(FloatToFloat16(5 * 0x1p-25f), 0x0002);
  EXPECT_EQ(FloatToFloat16(1023 * 0x1p-24f), 0x03ff);
  EXPECT_EQ(FloatToFloat16(0x1p-14f), 0x0400);
  // Between the largest subnormal and the smallest normal.
  EXPECT_EQ(FloatToFloat16(1023.5f * 0x1p-24f), 0x0400);
  EXPECT_EQ(FloatToFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_TRUE(Half().IsNaN(FloatToFloat16(std::nanf(""))));
  EXPECT_TRUE(Half().IsNaN(FloatToFloat16(FromBits(0x7f800001))));  // signaling
  EXPECT_EQ(Float16ToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Float16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(Float16ToFloat(0x03ff), 1023 * 0x1p-24f);
}

// The CPU's own conversions: F16C's on x86-64 (which every CPU the kernels
// run on has), the fcvt instructions behind __fp16 on arm64.
#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareFloatToFloat16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("f16c"))) float HardwareFloat16ToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}
#elif defined(__aarch64__)
uint16_t HardwareFloatToFloat16(float f) {
  return BitCast<uint16_t>(static_cast<__fp16>(f));
}

float HardwareFloat16ToFloat(uint16_t bits) {
  return static_cast<float>(BitCast<__fp16>(bits));
}
#endif

TEST(ConvertTest, Float16MatchesTheHardwareConversions) {
#if defined(__x86_64__)
  ASSERT_TRUE(__builtin_cpu_supports("f16c")) << "CPU lacks F16C";
#endif
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float want = HardwareFloat16ToFloat(static_cast<uint16_t>(h));
    const float got = Float16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(ToBits(got), ToBits(want)) << std::hex << h;
    }
  }
  for (float f : RoundingProbes(Half())) {
    const uint16_t want = HardwareFloatToFloat16(f);
    const uint16_t got = FloatToFloat16(f);
    if (Half().IsNaN(want)) {
      EXPECT_TRUE(Half().IsNaN(got)) << std::hex << ToBits(f);
    } else {
      ASSERT_EQ(got, want) << std::hex << ToBits(f) << " = " << f;
    }
  }
}

TEST(ConvertTest, BFloat16ToFloatDecodesEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (BFloat16().IsNaN(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
    } else {
      ASSERT_EQ(ToBits(f), ToBits(static_cast<float>(BFloat16().Decode(h))))
          << std::hex << h;
    }
  }
}

TEST(ConvertTest, BFloat16RoundTripsEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back =
        FloatToBFloat16(BFloat16ToFloat(static_cast<uint16_t>(h)));
    if (BFloat16().IsNaN(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(BFloat16().IsNaN(back)) << std::hex << h << " -> " << back;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
    } else {
      ASSERT_EQ(back, static_cast<uint16_t>(h)) << std::hex << h;
    }
  }
}

TEST(ConvertTest, FloatToBFloat16RoundsToNearestEven) {
  for (float f : RoundingProbes(BFloat16())) {
    const uint16_t got = FloatToBFloat16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(BFloat16().IsNaN(got)) << std::hex << ToBits(f);
    } else {
      ASSERT_EQ(got, BFloat16().Round(f))
          << std::hex << ToBits(f) << " = " << f;
    }
  }
}

TEST(ConvertTest, BFloat16EdgeCases) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3f80);  // tie to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7f8000)), 0x7f80);  // tie overflows
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  // Float subnormals below bf16's smallest subnormal 2^-133.
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToBFloat16(0x1p-133f), 0x0001);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00008000)), 0x0000);  // tie to even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00018000)), 0x0002);  // tie to even
  // A signaling NaN whose payload sits in the low bits must not become inf.
  EXPECT_TRUE(BFloat16().IsNaN(FloatToBFloat16(FromBits(0x7f800001))));
  EXPECT_TRUE(BFloat16().IsNaN(FloatToBFloat16(FromBits(0xff800001))));
  EXPECT_TRUE(BFloat16().IsNaN(FloatToBFloat16(std::nanf(""))));
}

TEST(ConvertTest, LoadAsFloatReadsEveryDType) {
  const float f32[] = {1.5f, -2.25f, 3.0f};
  EXPECT_EQ(LoadAsFloat(f32, DType::kFloat32, 0), 1.5f);
  EXPECT_EQ(LoadAsFloat(f32, DType::kFloat32, 2), 3.0f);
  const uint16_t bf16[] = {0x3fc0, 0xc010, 0x7f80};
  EXPECT_EQ(LoadAsFloat(bf16, DType::kBFloat16, 0), 1.5f);
  EXPECT_EQ(LoadAsFloat(bf16, DType::kBFloat16, 1), -2.25f);
  EXPECT_EQ(LoadAsFloat(bf16, DType::kBFloat16, 2),
            std::numeric_limits<float>::infinity());
  const uint16_t f16[] = {0x3e00, 0xc080, 0x0001};
  EXPECT_EQ(LoadAsFloat(f16, DType::kFloat16, 0), 1.5f);
  EXPECT_EQ(LoadAsFloat(f16, DType::kFloat16, 1), -2.25f);
  EXPECT_EQ(LoadAsFloat(f16, DType::kFloat16, 2), 0x1p-24f);
  const uint8_t b[] = {0, 1, 2, 255};
  EXPECT_EQ(LoadAsFloat(b, DType::kBool, 0), 0.0f);
  EXPECT_EQ(LoadAsFloat(b, DType::kBool, 1), 1.0f);
  EXPECT_EQ(LoadAsFloat(b, DType::kBool, 2), 1.0f);
  EXPECT_EQ(LoadAsFloat(b, DType::kBool, 3), 1.0f);
}

TEST(ConvertTest, LoadAsFloatAcceptsUnalignedData) {
  alignas(8) unsigned char bytes[16] = {};
  const float value = -7.75f;
  std::memcpy(bytes + 1 + 4, &value, sizeof value);
  EXPECT_EQ(LoadAsFloat(bytes + 1, DType::kFloat32, 1), value);
  const uint16_t half = 0xc7c0;  // -7.75
  std::memcpy(bytes + 3 + 2, &half, sizeof half);
  EXPECT_EQ(LoadAsFloat(bytes + 3, DType::kFloat16, 1), value);
}

TEST(ConvertTest, StoreFromFloatWritesOnlyItsElement) {
  float f32[3] = {9, 9, 9};
  StoreFromFloat(f32, DType::kFloat32, 1, -2.25f);
  EXPECT_THAT(f32, ElementsAre(9, -2.25f, 9));

  uint16_t bf16[3] = {0xaaaa, 0xaaaa, 0xaaaa};
  StoreFromFloat(bf16, DType::kBFloat16, 1, 1.0f + 0x1p-8f);  // tie to even
  EXPECT_THAT(bf16, ElementsAre(0xaaaa, 0x3f80, 0xaaaa));
  StoreFromFloat(bf16, DType::kBFloat16, 2, 1.0f + 3 * 0x1p-8f);
  EXPECT_THAT(bf16, ElementsAre(0xaaaa, 0x3f80, 0x3f82));

  uint16_t f16[3] = {0xaaaa, 0xaaaa, 0xaaaa};
  StoreFromFloat(f16, DType::kFloat16, 0, 1e6f);
  StoreFromFloat(f16, DType::kFloat16, 2, -1.5f);
  EXPECT_THAT(f16, ElementsAre(0x7c00, 0xaaaa, 0xbe00));

  uint8_t b[4] = {7, 7, 7, 7};
  StoreFromFloat(b, DType::kBool, 0, 0.0f);
  StoreFromFloat(b, DType::kBool, 1, 0.5f);
  StoreFromFloat(b, DType::kBool, 2, -0.0f);
  EXPECT_THAT(b, ElementsAre(0, 1, 0, 7));
}

TEST(ConvertTest, StoreFromFloatAcceptsUnalignedData) {
  alignas(8) unsigned char bytes[16] = {};
  StoreFromFloat(bytes + 1, DType::kFloat32, 1, 3.5f);
  float back;
  std::memcpy(&back, bytes + 5, sizeof back);
  EXPECT_EQ(back, 3.5f);
  StoreFromFloat(bytes + 1, DType::kBFloat16, 5, 3.5f);
  EXPECT_EQ(LoadAsFloat(bytes + 1, DType::kBFloat16, 5), 3.5f);
}

TEST(ConvertTest, ConvertFromFloatRoundsEveryDType) {
  const float src[] = {1.0f, 1.0f + 0x1p-8f, -3.0f, 70000.0f, 0.0f};
  alignas(8) unsigned char buffer[1 + sizeof src] = {};
  void* dst = buffer + 1;  // unaligned on purpose

  ConvertFromFloat(src, dst, DType::kFloat32, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(LoadAsFloat(dst, DType::kFloat32, i), src[i]) << i;
  }
  ConvertFromFloat(src, dst, DType::kBFloat16, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(LoadAsFloat(dst, DType::kBFloat16, i),
              BFloat16ToFloat(FloatToBFloat16(src[i])))
        << i;
  }
  EXPECT_EQ(LoadAsFloat(dst, DType::kBFloat16, 1), 1.0f);
  ConvertFromFloat(src, dst, DType::kFloat16, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(LoadAsFloat(dst, DType::kFloat16, i),
              Float16ToFloat(FloatToFloat16(src[i])))
        << i;
  }
  EXPECT_EQ(LoadAsFloat(dst, DType::kFloat16, 3),
            std::numeric_limits<float>::infinity());
  ConvertFromFloat(src, dst, DType::kBool, 5);
  const unsigned char* b = buffer + 1;
  EXPECT_THAT(std::vector<int>(b, b + 5), ElementsAre(1, 1, 1, 1, 0));
}

TEST(ConvertTest, ConvertToFloatWidensEveryDType) {
  alignas(8) unsigned char buffer[1 + 4 * sizeof(float)] = {};
  void* src = buffer + 1;  // unaligned on purpose
  float dst[4];

  const float f32[] = {0.5f, -1.0f, 1e30f, 0.0f};
  std::memcpy(src, f32, sizeof f32);
  ConvertToFloat(src, DType::kFloat32, dst, 4);
  EXPECT_THAT(dst, ElementsAre(0.5f, -1.0f, 1e30f, 0.0f));

  const uint16_t bf16[] = {0x3f00, 0xbf80, 0x7f80, 0x8000};
  std::memcpy(src, bf16, sizeof bf16);
  ConvertToFloat(src, DType::kBFloat16, dst, 4);
  EXPECT_THAT(dst, ElementsAre(0.5f, -1.0f,
                               std::numeric_limits<float>::infinity(), 0.0f));
  EXPECT_TRUE(std::signbit(dst[3]));

  const uint16_t f16[] = {0x3800, 0xbc00, 0x7bff, 0x0200};
  std::memcpy(src, f16, sizeof f16);
  ConvertToFloat(src, DType::kFloat16, dst, 4);
  EXPECT_THAT(dst, ElementsAre(0.5f, -1.0f, 65504.0f, 0x1p-15f));

  const uint8_t b[] = {0, 1, 3, 0};
  std::memcpy(src, b, sizeof b);
  ConvertToFloat(src, DType::kBool, dst, 4);
  EXPECT_THAT(dst, ElementsAre(0.0f, 1.0f, 1.0f, 0.0f));
}

// An empty tensor's data pointer may be null (an empty std::vector or protobuf
// bytes field); converting zero elements must not touch it.
TEST(ConvertTest, EmptyConversionsAcceptNullPointers) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    ConvertFromFloat(nullptr, nullptr, dtype, 0);
    ConvertToFloat(nullptr, dtype, nullptr, 0);
    ConvertDType(nullptr, dtype, nullptr, DType::kFloat32, 0);
  }
}

TEST(ConvertTest, ConvertDTypeMatchesElementwiseRoundingAcrossChunks) {
  // 3000 elements: past the 1024-element chunks of the f32 staging buffer.
  std::vector<float> values(3000);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.001f * static_cast<float>(i) - 1.3f;
  }
  for (DType from : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (DType to : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      std::vector<char> src(values.size() * DTypeSize(from));
      ConvertFromFloat(values.data(), src.data(), from, values.size());
      std::vector<char> dst(values.size() * DTypeSize(to));
      ConvertDType(src.data(), from, dst.data(), to, values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        float expected = LoadAsFloat(src.data(), from, static_cast<int64_t>(i));
        std::vector<char> one(DTypeSize(to));
        StoreFromFloat(one.data(), to, 0, expected);
        expected = LoadAsFloat(one.data(), to, 0);
        ASSERT_EQ(LoadAsFloat(dst.data(), to, static_cast<int64_t>(i)),
                  expected)
            << DTypeName(from) << " -> " << DTypeName(to) << " element " << i;
      }
    }
  }
}

TEST(ConvertTest, QuantizeInt8KeepsEachElementWithinHalfAStep) {
  std::vector<float> row = {0.0f, 1.0f, -2.54f, 0.3f, 2.54f, -0.01f, 1e-3f};
  std::vector<int8_t> q(row.size());
  const float scale =
      QuantizeInt8(row.data(), static_cast<int64_t>(row.size()), q.data());
  EXPECT_FLOAT_EQ(scale, 2.54f / 127.0f);
  EXPECT_EQ(q[2], -127);
  EXPECT_EQ(q[4], 127);
  EXPECT_EQ(q[1], 50);
  std::vector<float> back(row.size());
  DequantizeInt8(q.data(), static_cast<int64_t>(q.size()), scale, back.data());
  for (size_t i = 0; i < row.size(); ++i) {
    EXPECT_NEAR(back[i], row[i], 0.5001f * scale) << "element " << i;
  }
  // A row of zeros: scale 0, every element 0.
  std::vector<float> zeros(5, 0.0f);
  std::vector<int8_t> qz(5, 9);
  EXPECT_EQ(QuantizeInt8(zeros.data(), 5, qz.data()), 0.0f);
  EXPECT_EQ(qz, std::vector<int8_t>(5, 0));
}

}  // namespace
}  // namespace attnserve
