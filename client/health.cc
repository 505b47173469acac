#include "client/health.h"

#include "client/rpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client {

ExitCode RunHealth(const ConnectionOptions& connection,
                   const std::string& service, std::ostream& out,
                   std::ostream& err) {
  return AskEveryTarget(connection, err, [&](const TargetCall& call) {
    const std::string prefix = call.prefix();
    auto stub = grpc::health::v1::Health::NewStub(call.channel);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = stub->Check(call.context, request, &response);
    if (!status.ok()) {
      err << prefix << RpcErrorLine(status) << "\n";
      return kExitRpcFailed;
    }
    out << prefix
        << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
               response.status())
        << "\n";
    return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
               ? kExitOk
               : kExitRpcFailed;
  });
}

}  // namespace attnserve::client
