#include "server/rpc/auth.h"

#include <map>

#include "absl/status/status.h"
#include "grpcpp/support/string_ref.h"
#include "gtest/gtest.h"

namespace attnserve::server {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

TEST(BearerTokenAuthTest, EmptyTokenAdmitsEverything) {
  const BearerTokenAuth auth("");
  EXPECT_EQ(auth.Check(Metadata{}), absl::OkStatus());
  EXPECT_EQ(auth.Check(Metadata{{"authorization", "Bearer x"}}),
            absl::OkStatus());
}

TEST(BearerTokenAuthTest, AdmitsExactlyTheBearerToken) {
  const BearerTokenAuth auth("s3cret");
  EXPECT_EQ(auth.Check(Metadata{{"authorization", "Bearer s3cret"}}),
            absl::OkStatus());
  EXPECT_EQ(auth.Check(Metadata{}),
            absl::UnauthenticatedError(
                "missing \"authorization: Bearer <token>\" metadata"));
  for (const char* wrong :
       {"Bearer s3cre", "Bearer s3cret ", "bearer s3cret", "s3cret", ""}) {
    EXPECT_EQ(auth.Check(Metadata{{"authorization", wrong}}),
              absl::UnauthenticatedError("invalid bearer token"))
        << wrong;
  }
}

}  // namespace
}  // namespace attnserve::server
