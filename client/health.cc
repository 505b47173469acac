#include "client/health.h"

#include "client/rpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client {

ExitCode RunHealth(const ConnectionOptions& connection,
                   const std::string& service, std::ostream& out,
                   std::ostream& err) {
  auto channels = CreateChannels(connection);
  if (!channels.ok()) {
    err << "error: " << channels.status().message() << "\n";
    return kExitFileError;
  }
  const bool several = channels->size() > 1;
  ExitCode code = kExitOk;
  for (size_t i = 0; i < channels->size(); ++i) {
    const std::string prefix =
        several ? connection.targets[i] + ": " : std::string();
    auto stub = grpc::health::v1::Health::NewStub((*channels)[i]);
    grpc::ClientContext context;
    PrepareContext(connection, &context);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = stub->Check(&context, request, &response);
    if (!status.ok()) {
      err << prefix << RpcErrorLine(status) << "\n";
      code = kExitRpcFailed;
      continue;
    }
    out << prefix
        << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
               response.status())
        << "\n";
    if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      code = kExitRpcFailed;
    }
  }
  return code;
}

}  // namespace attnserve::client
