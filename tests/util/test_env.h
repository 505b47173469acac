#ifndef ATTNSERVE_TESTS_UTIL_TEST_ENV_H_
#define ATTNSERVE_TESTS_UTIL_TEST_ENV_H_

#include <string>
#include <vector>

#include "core/attention.h"

namespace attnserve::testing {

// The ISA cap of this test run: ATTNSERVE_TEST_MAX_ISA=avx2 forces the AVX2
// path in every engine the tests create (read once in test_main.cc; library
// code never reads the environment).
Isa MaxTestIsa();

// `isa` limited by MaxTestIsa().
Isa CapIsa(Isa isa);

// The ISA paths this CPU has, best first: {kAmx, kAvx512, kAvx2},
// {kAvx512, kAvx2} or {kAvx2}. Cheap (cpuid, and once the AMX permission
// request), so parameterized suites can list their ISAs with it at
// registration: a machine without AVX-512 (AMX) has no AVX-512 (AMX) cases
// rather than failing cases.
std::vector<Isa> MachineIsas();

// "Amx", "Avx512", "Avx2": an ISA in a test name.
std::string IsaLabel(Isa isa);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_TEST_ENV_H_
