#include "client/rpc_status.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::client {

std::string StatusCodeName(grpc::StatusCode code) {
  // grpc::StatusCode and absl::StatusCode both follow google.rpc.Code.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::string RpcErrorLine(const grpc::Status& status) {
  return absl::StrCat("error: ", StatusCodeName(status.error_code()), ": ",
                      status.error_message());
}

}  // namespace attnserve::client
