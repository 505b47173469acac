#ifndef ATTNSERVE_SERVER_BENCH_ECHO_SERVICE_H_
#define ATTNSERVE_SERVER_BENCH_ECHO_SERVICE_H_

// A no-op AttentionService for the RPC benchmark: Attend answers at once, on
// the gRPC thread, with an output tensor of the dtype, shape and byte size
// attnserve's output would have (zero-filled, allocated the way the server's
// codec allocates it), and computes nothing. It runs on a gRPC server built
// with the same message limits and HTTP/2 frame/window arguments as
// server/server.cc, and its Attend messages on a per-call arena as the
// server's (server/rpc/arena_messages.h), so the difference between the two
// is attnserve's own cost: validation, scheduling, the kernel and the
// metrics.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/rpc/arena_messages.h"

namespace attnserve::bench {

class EchoService final : public v1::AttentionService::CallbackService {
 public:
  // The limits GetServerInfo reports (attnctl bench checks its request
  // against them before the load).
  EchoService(int64_t max_request_bytes, int64_t max_response_bytes)
      : max_request_bytes_(max_request_bytes),
        max_response_bytes_(max_response_bytes) {
    SetMessageAllocatorFor_Attend(&attend_messages_);
  }

  grpc::ServerUnaryReactor* Attend(grpc::CallbackServerContext* context,
                                   const v1::AttendRequest* request,
                                   v1::AttendResponse* response) override;
  // Version "echo" and the limits, so that attnctl bench can load the echo.
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context,
      const v1::GetServerInfoRequest* request,
      v1::ServerInfo* response) override;

 private:
  const int64_t max_request_bytes_;
  const int64_t max_response_bytes_;
  server::ArenaMessageAllocator<v1::AttendRequest, v1::AttendResponse>
      attend_messages_;
};

// The output attnserve returns for `request`, without its data: dtype
// (output_dtype, else the query's) and shape (the query's, last axis the
// value's), and the data's byte size. Both layouts keep the head dimension
// last, so no layout case is needed.
struct OutputSpec {
  v1::DataType dtype = v1::FLOAT32;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};
absl::StatusOr<OutputSpec> OutputSpecOf(const v1::AttendRequest& request);

struct EchoServerOptions {
  std::string listen = "127.0.0.1:0";
  // The defaults of server::ServerOptions.
  int64_t max_request_bytes = int64_t{256} << 20;
  int64_t max_response_bytes = int64_t{256} << 20;
};

class EchoServer {
 public:
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(
      const EchoServerOptions& options);
  ~EchoServer();

  int port() const { return port_; }

 private:
  explicit EchoServer(const EchoServerOptions& options)
      : service_(options.max_request_bytes, options.max_response_bytes) {}
  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace attnserve::bench

#endif  // ATTNSERVE_SERVER_BENCH_ECHO_SERVICE_H_
