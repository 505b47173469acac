#ifndef ATTNSERVE_CORE_STATUS_MACROS_H_
#define ATTNSERVE_CORE_STATUS_MACROS_H_

// Abseil 20220623 has no status macros; these two are all the project uses.

#include "absl/status/status.h"

#define ATTNSERVE_STATUS_CONCAT_INNER(a, b) a##b
#define ATTNSERVE_STATUS_CONCAT(a, b) ATTNSERVE_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)              \
  do {                                     \
    const ::absl::Status status_ = (expr); \
    if (!status_.ok()) return status_;     \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, rexpr)                                        \
  ASSIGN_OR_RETURN_IMPL(ATTNSERVE_STATUS_CONCAT(status_or_, __LINE__), lhs, \
                        rexpr)
#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                          \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // ATTNSERVE_CORE_STATUS_MACROS_H_
