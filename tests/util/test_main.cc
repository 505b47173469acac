#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/vec_ops.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"

namespace attnserve::testing {
namespace {
Isa g_max_isa = Isa::kAuto;
}  // namespace

Isa MaxTestIsa() { return g_max_isa; }

Isa CapIsa(Isa isa) { return g_max_isa == Isa::kAvx2 ? Isa::kAvx2 : isa; }

std::vector<Isa> MachineIsas() { return RunnableIsas(); }

std::string IsaLabel(Isa isa) {
  std::string label(IsaName(isa));
  label[0] = static_cast<char>(std::toupper(label[0]));
  return label;
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
