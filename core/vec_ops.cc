// Which table a CPU runs: Highway's detection of its targets (the same
// checks that guard the code compiled for them), and on x86-64 the AVX-512
// extensions the best table uses and AMX's tile state.

#include "core/vec_ops.h"

#include <hwy/targets.h>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__)
#include <cpuid.h>

#include "core/amx_products.h"
#endif

namespace attnserve {
namespace {

bool Supports(int64_t hwy_target) {
  return (hwy::SupportedTargets() & hwy_target) != 0;
}

}  // namespace

#if defined(__x86_64__)

bool HasAvx512Bf16() {
  unsigned eax, ebx, ecx, edx;
  // CPUID leaf 7 subleaf 1, EAX bit 5: AVX512_BF16.
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
         (eax & (1u << 5)) != 0 && Supports(HWY_AVX3);
}

bool HasAvx512Vnni() {
  unsigned eax, ebx, ecx, edx;
  // CPUID leaf 7 subleaf 0, ECX bit 11: AVX512_VNNI.
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
         (ecx & (1u << 11)) != 0 && Supports(HWY_AVX3);
}

namespace {

// The extensions past AVX-512 that the best table uses, read once.
struct Extensions {
  bool bf16 = HasAvx512Bf16();
  bool vnni = HasAvx512Vnni();
};

const Extensions& CpuExtensions() {
  static const Extensions extensions;
  return extensions;
}

// The best table's products: each stored dtype to the extension that reads
// it fastest.
void KvScoresBest(const float* q, int64_t ldq, int64_t m, int64_t d,
                  const void* k, DType kd, const float* scales, int64_t n,
                  float* s, int64_t lds) {
  if (kd == DType::kInt8 && CpuExtensions().vnni) {
    KvScoresAvx512Vnni(q, ldq, m, d, k, kd, scales, n, s, lds);
  } else if (kd == DType::kBFloat16 && CpuExtensions().bf16) {
    KvScoresAvx512Bf16(q, ldq, m, d, k, kd, scales, n, s, lds);
  } else {
    Avx512FVecOps().kv_scores(q, ldq, m, d, k, kd, scales, n, s, lds);
  }
}

void KvAccumulateBest(const float* p, int64_t ldp, int64_t m, const void* v,
                      DType vd, const float* scales, int64_t n, int64_t dv,
                      float* acc, int64_t ldacc) {
  if (vd == DType::kInt8 && CpuExtensions().vnni) {
    KvAccumulateAvx512Vnni(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  } else if (vd == DType::kBFloat16 && CpuExtensions().bf16) {
    KvAccumulateAvx512Bf16(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  } else {
    Avx512FVecOps().kv_accumulate(p, ldp, m, v, vd, scales, n, dv, acc, ldacc);
  }
}

}  // namespace

const VecOps& Avx512VecOps() {
  static const VecOps ops = [] {
    VecOps best = Avx512FVecOps();
    if (CpuExtensions().bf16) {
      best.scaled_exp_sum_bf16 = ScaledExpSumBf16Avx512Bf16;
    }
    best.kv_scores = KvScoresBest;
    best.kv_accumulate = KvAccumulateBest;
    return best;
  }();
  return ops;
}

std::vector<Isa> RunnableIsas() {
  std::vector<Isa> isas;
  if (Supports(HWY_AVX3)) {
    if (AmxUsable()) isas.push_back(Isa::kAmx);
    isas.push_back(Isa::kAvx512);
  }
  if (Supports(HWY_AVX2)) isas.push_back(Isa::kAvx2);
  return isas;
}

const VecOps& VecOpsFor(Isa isa) {
  return isa == Isa::kAvx2 ? Avx2VecOps() : Avx512VecOps();
}

namespace {
constexpr const char* kNeeds =
    "this CPU runs none of the kernels' ISAs (AVX2 with FMA and F16C, or "
    "AVX-512F/BW/DQ/VL)";
}  // namespace

#elif defined(__aarch64__)

bool HasAvx512Bf16() { return false; }
bool HasAvx512Vnni() { return false; }

std::vector<Isa> RunnableIsas() {
  std::vector<Isa> isas;
  if (Supports(HWY_SVE)) isas.push_back(Isa::kSve);
  if (Supports(HWY_NEON)) isas.push_back(Isa::kNeon);
  return isas;
}

const VecOps& VecOpsFor(Isa isa) {
  return isa == Isa::kSve ? SveVecOps() : NeonVecOps();
}

namespace {
constexpr const char* kNeeds = "this CPU has no NEON";
}  // namespace

#else
#error "attnserve's kernels are written for x86-64 and arm64"
#endif

Isa DetectIsa() {
  const std::vector<Isa> isas = RunnableIsas();
  return isas.empty() ? Isa::kAuto : isas.front();
}

absl::StatusOr<Isa> ResolveIsa(Isa max_isa) {
  const std::vector<Isa> isas = RunnableIsas();
  if (isas.empty()) return absl::FailedPreconditionError(kNeeds);
  if (max_isa == Isa::kAuto) return isas.front();
  for (const Isa isa : isas) {
    if (isa == max_isa) return isa;
  }
  if (max_isa == Isa::kAmx && DetectIsa() == Isa::kAvx512) {
    return absl::InvalidArgumentError(
        "max_isa: AMX-BF16 is not usable here (the CPU lacks it, or the OS "
        "does not grant its tile state)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("max_isa: this CPU does not run ", IsaName(max_isa),
                   " (its best is ", IsaName(isas.front()), ")"));
}

}  // namespace attnserve
