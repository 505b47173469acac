#include "core/vec_ops.h"

#include <cpuid.h>

#include "core/amx_products.h"

namespace attnserve {
namespace {

// clang 14's __builtin_cpu_supports does not know "f16c".
bool HasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

}  // namespace

bool HasAvx512Bf16() {
  unsigned eax, ebx, ecx, edx;
  // CPUID leaf 7 subleaf 1, EAX bit 5: AVX512_BF16.
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
         (eax & (1u << 5)) != 0 && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw");
}

bool HasAvx512Vnni() {
  unsigned eax, ebx, ecx, edx;
  // CPUID leaf 7 subleaf 0, ECX bit 11: AVX512_VNNI.
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
         (ecx & (1u << 11)) != 0 && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw");
}

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    return AmxUsable() ? Isa::kAmx : Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      HasF16c()) {
    return Isa::kAvx2;
  }
  return Isa::kAuto;
}

}  // namespace attnserve
