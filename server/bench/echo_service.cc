#include "server/bench/echo_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/dtype.h"
#include "wire/transport.h"

namespace attnserve::bench {
absl::StatusOr<OutputSpec> OutputSpecOf(const v1::AttendRequest& request) {
  const v1::Tensor& q = request.query();
  const v1::Tensor& v = request.value();
  if (q.shape_size() != 4 || v.shape_size() != 4) {
    return absl::InvalidArgumentError("echo: query and value must be 4-D");
  }
  OutputSpec spec;
  spec.dtype = request.output_dtype() != v1::DATA_TYPE_UNSPECIFIED
                   ? request.output_dtype()
                   : q.dtype();
  // The float dtypes only, as the server's outputs.
  const int64_t element = spec.dtype == v1::BOOL || spec.dtype == v1::INT32
                              ? 0
                              : wire::ElementSize(spec.dtype);
  if (element == 0) {
    return absl::InvalidArgumentError("echo: unsupported output dtype");
  }
  spec.shape.assign(q.shape().begin(), q.shape().end());
  spec.shape[3] = v.shape(3);
  spec.bytes = element;
  for (int64_t d : spec.shape) spec.bytes *= d;
  return spec;
}

grpc::ServerUnaryReactor* EchoService::Attend(
    grpc::CallbackServerContext* context, const v1::AttendRequest* request,
    v1::AttendResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::StatusOr<OutputSpec> spec = OutputSpecOf(*request);
  if (!spec.ok()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 std::string(spec.status().message())));
    return reactor;
  }
  response->set_request_id(request->request_id());
  v1::Tensor* output = response->mutable_output();
  output->set_dtype(spec->dtype);
  for (int64_t d : spec->shape) output->add_shape(d);
  // As the server's codec (PrepareTensor): a zero-filled string of the size.
  output->mutable_data()->assign(static_cast<size_t>(spec->bytes), '\0');
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

absl::StatusOr<std::unique_ptr<EchoServer>> EchoServer::Start(
    const EchoServerOptions& options) {
  std::unique_ptr<EchoServer> echo(new EchoServer(options));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &echo->port_);
  builder.RegisterService(&echo->service_);
  // The same limits and transport arguments as server/server.cc.
  wire::ServerTransportOptions transport;
  transport.max_message_bytes = options.max_request_bytes;
  transport.max_response_bytes = options.max_response_bytes;
  wire::ApplyServerTransport(transport, &builder);
  echo->server_ = builder.BuildAndStart();
  if (echo->server_ == nullptr || echo->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("echo server cannot listen on \"", options.listen, "\""));
  }
  return echo;
}

grpc::ServerUnaryReactor* EchoService::GetServerInfo(
    grpc::CallbackServerContext* context, const v1::GetServerInfoRequest*,
    v1::ServerInfo* response) {
  response->set_version("echo");
  response->set_max_request_bytes(max_request_bytes_);
  response->set_max_response_bytes(max_response_bytes_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

EchoServer::~EchoServer() {
  if (server_ != nullptr) server_->Shutdown();
}

}  // namespace attnserve::bench
