#include "server/rpc/auth.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attnserve::server {

BearerTokenAuth::BearerTokenAuth(const std::string& token)
    : expected_(token.empty() ? std::string()
                              : absl::StrCat("Bearer ", token)) {}

absl::Status BearerTokenAuth::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (expected_.empty()) return absl::OkStatus();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "missing \"authorization: Bearer <token>\" metadata");
  }
  const grpc::string_ref got = it->second;
  if (absl::string_view(got.data(), got.size()) != expected_) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
