#ifndef ATTNSERVE_TESTS_CORE_TEST_ENV_H_
#define ATTNSERVE_TESTS_CORE_TEST_ENV_H_

#include "core/attention.h"

namespace attnserve::testing {

// The ISA cap of this test run: ATTNSERVE_TEST_MAX_ISA=avx2 forces the AVX2
// path in every engine the tests create (read once in test_main.cc; library
// code never reads the environment).
Isa MaxTestIsa();

// `isa` limited by MaxTestIsa().
Isa CapIsa(Isa isa);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_CORE_TEST_ENV_H_
