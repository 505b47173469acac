#ifndef ATTNSERVE_TESTS_UTIL_STATUS_MATCHERS_H_
#define ATTNSERVE_TESTS_UTIL_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"

namespace attnserve::testing {

// Abseil 20220623 has no status matchers. Matches an absl::Status with exactly
// `code` whose message matches `message_matcher`, e.g.
// EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
// HasSubstr("key")));
MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code) +
               " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher,
                                                       negation)) {
  if (arg.code() != code) {
    *result_listener << "whose code is "
                     << absl::StatusCodeToString(arg.code());
    return false;
  }
  return ::testing::ExplainMatchResult(
      message_matcher, std::string(arg.message()), result_listener);
}

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_STATUS_MATCHERS_H_
