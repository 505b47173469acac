#include "client/health.h"

#include "client/rpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::client {

ExitCode RunHealth(const ConnectionOptions& connection,
                   const std::string& service, std::ostream& out,
                   std::ostream& err) {
  const bool several = connection.targets.size() > 1;
  return AskEveryTarget(
      connection, err,
      [&](size_t target, const std::shared_ptr<grpc::Channel>& channel,
          grpc::ClientContext* context) {
        const std::string prefix =
            several ? connection.targets[target] + ": " : std::string();
        auto stub = grpc::health::v1::Health::NewStub(channel);
        grpc::health::v1::HealthCheckRequest request;
        request.set_service(service);
        grpc::health::v1::HealthCheckResponse response;
        const grpc::Status status = stub->Check(context, request, &response);
        if (!status.ok()) {
          err << prefix << RpcErrorLine(status) << "\n";
          return kExitRpcFailed;
        }
        out << prefix
            << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                   response.status())
            << "\n";
        return response.status() ==
                       grpc::health::v1::HealthCheckResponse::SERVING
                   ? kExitOk
                   : kExitRpcFailed;
      });
}

}  // namespace attnserve::client
