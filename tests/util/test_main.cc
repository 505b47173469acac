#include <cstdlib>
#include <string_view>

#include "core/amx_products.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"

namespace attnserve::testing {
namespace {
Isa g_max_isa = Isa::kAuto;
}  // namespace

Isa MaxTestIsa() { return g_max_isa; }

Isa CapIsa(Isa isa) { return g_max_isa == Isa::kAvx2 ? Isa::kAvx2 : isa; }

std::vector<Isa> MachineIsas() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    if (AmxUsable()) return {Isa::kAmx, Isa::kAvx512, Isa::kAvx2};
    return {Isa::kAvx512, Isa::kAvx2};
  }
  return {Isa::kAvx2};
}

std::string IsaLabel(Isa isa) {
  switch (isa) {
    case Isa::kAmx:
      return "Amx";
    case Isa::kAvx512:
      return "Avx512";
    case Isa::kAvx2:
      return "Avx2";
    case Isa::kAuto:
      break;
  }
  return "Auto";
}

}  // namespace attnserve::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* isa = std::getenv("ATTNSERVE_TEST_MAX_ISA")) {
    if (std::string_view(isa) == "avx2") {
      attnserve::testing::g_max_isa = attnserve::Isa::kAvx2;
    }
  }
  return RUN_ALL_TESTS();
}
