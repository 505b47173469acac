#ifndef ATTNSERVE_CLIENT_CHECK_H_
#define ATTNSERVE_CLIENT_CHECK_H_

// infer --check: recomputes a request with core's reference and compares the
// server's answer with it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.pb.h"
#include "client/exit_codes.h"

namespace attnserve::client {

// The comparison of one tensor. An element passes when
// |got - ref| <= tolerance * (1 + |ref|).
struct CheckReport {
  std::string tensor;  // "output" or "weights"
  double tolerance = 0;
  int64_t elements = 0;
  int64_t failures = 0;  // elements beyond the tolerance (NaN counts)
  // The largest |got - ref| and where it is.
  double max_abs_error = 0;
  int64_t worst_index = 0;
  double worst_got = 0;
  double worst_ref = 0;

  bool passed() const { return failures == 0; }
};

// 1e-5 when both dtypes are FLOAT32, else 2e-2 (bf16/f16 inputs or results).
double CheckTolerance(v1::DataType input, v1::DataType result);

// Recomputes `request` with ReferenceAttention (double accumulation) and
// compares the response's output and, when the request asked for them, its
// weights. Runs on this thread and costs O(B·Hq·Lq·Lk·(D + Dv)).
// InvalidArgument when the reference rejects the request or the response's
// dtype or shape differs from what the request implies.
absl::StatusOr<std::vector<CheckReport>> CheckResponse(
    const v1::AttendRequest& request, const v1::AttendResponse& response);

// kExitOk when every report passed, else kExitCheckFailed.
ExitCode CheckExitCode(const std::vector<CheckReport>& reports);

// "output: max abs error 2.4e-07 at element 17 (got 0.51, reference 0.51),
// tolerance 1e-05*(1+|ref|): ok" (or "FAILED, 3 of 1024 elements beyond").
std::string FormatCheckReport(const CheckReport& report);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_CHECK_H_
