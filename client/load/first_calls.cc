#include "client/load/first_calls.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "wire/attend_call.h"

namespace attnserve::client {

absl::StatusOr<LatencyHistogram> TimeFirstCalls(
    const ConnectionOptions& connection, const v1::AttendRequest& request,
    int count, int64_t expected_output_bytes) {
  LatencyHistogram round_trips;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
        CreateChannels(connection);
    if (!channels.ok()) return channels.status();
    const std::shared_ptr<grpc::Channel>& channel =
        (*channels)[static_cast<size_t>(i) % channels->size()];
    ConnectChannel(*channel, connection.timeout);
    auto stub = v1::AttentionService::NewStub(channel);
    grpc::ClientContext context;
    PrepareContext(connection, &context);
    v1::AttendResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status =
        wire::CallAttend(*stub, &context, request, &response);
    const absl::Duration round_trip = absl::Now() - start;
    const std::string which = absl::StrCat("new connection ", i + 1, ": ");
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat(which, status.error_message()));
    }
    if (static_cast<int64_t>(response.output().data().size()) !=
        expected_output_bytes) {
      return absl::InternalError(absl::StrCat(
          which, "the answer holds ", response.output().data().size(),
          " bytes of output, not ", expected_output_bytes));
    }
    round_trips.Record(round_trip);
  }
  return round_trips;
}

}  // namespace attnserve::client
