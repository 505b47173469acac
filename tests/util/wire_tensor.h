#ifndef ATTNSERVE_TESTS_UTIL_WIRE_TENSOR_H_
#define ATTNSERVE_TESTS_UTIL_WIRE_TENSOR_H_

// A TestTensor as a wire Tensor, for tests that build requests. Header-only:
// its users link attnserve_proto and attnserve_wire already.

#include "attnserve/v1/attention.pb.h"
#include "tests/util/test_util.h"
#include "wire/dtype.h"

namespace attnserve::testing {

// Sets `out` to the tensor's dtype, shape and bytes (replacing its shape).
inline void ToWire(const TestTensor& t, v1::Tensor* out) {
  out->set_dtype(wire::DTypeToWire(t.dtype()));
  out->clear_shape();
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(static_cast<const char*>(t.data()),
                static_cast<size_t>(t.size()) * DTypeSize(t.dtype()));
}

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_WIRE_TENSOR_H_
