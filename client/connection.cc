#include "client/connection.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/tensors/file_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "wire/transport.h"

namespace attnserve::client {
namespace {

constexpr absl::Duration kLongestDeadline = absl::Hours(24 * 365);

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseTargets(absl::string_view list) {
  std::vector<std::string> targets;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--target \"", list,
          "\" has an empty entry (expected host:port[,host:port...])"));
    }
    targets.emplace_back(part);
  }
  return targets;
}

absl::Status ValidateConnectionOptions(const ConnectionOptions& options) {
  if (options.targets.empty()) {
    return absl::InvalidArgumentError("--target: no server given");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes must be in [1, ", std::numeric_limits<int>::max(),
        "], got ", options.max_message_bytes));
  }
  if (!options.ca_file.empty() && !options.tls) {
    return absl::InvalidArgumentError("--ca needs --tls");
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ParseConnections(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  if (absl::EqualsIgnoreCase(stripped, "auto")) return kAutoConnections;
  int64_t count = 0;
  if (!absl::SimpleAtoi(stripped, &count) || count < 1 ||
      count > kMaxConnections) {
    return absl::InvalidArgumentError(
        absl::StrCat("--connections must be auto or a count in [1, ",
                     kMaxConnections, "], got \"", text, "\""));
  }
  return static_cast<int>(count);
}

int ConnectionsFor(int requested, int concurrency) {
  if (requested != kAutoConnections) return requested;
  return std::clamp(concurrency, 1, kMaxAutoConnections);
}

std::string TargetHost(absl::string_view target) {
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&target, scheme)) break;
  }
  if (absl::ConsumePrefix(&target, "[")) {
    return std::string(target.substr(0, target.find(']')));
  }
  const size_t colon = target.rfind(':');
  return std::string(
      colon == absl::string_view::npos ? target : target.substr(0, colon));
}

absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> CreateChannels(
    const ConnectionOptions& options, int connections_per_target) {
  if (connections_per_target < 1 || connections_per_target > kMaxConnections) {
    return absl::InvalidArgumentError(
        absl::StrCat("--connections must be in [1, ", kMaxConnections,
                     "], got ", connections_per_target));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      absl::StatusOr<std::string> roots = ReadFileToString(options.ca_file);
      if (!roots.ok()) return roots.status();
      ssl.pem_root_certs = *std::move(roots);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int connection = 0; connection < connections_per_target; ++connection) {
    // Each connection index its own TCP connection per target.
    const grpc::ChannelArguments connection_args = wire::ClientChannelArguments(
        options.max_message_bytes, absl::StrCat("attnctl-", connection));
    for (const std::string& target : options.targets) {
      channels.push_back(
          grpc::CreateCustomChannel(target, credentials, connection_args));
    }
  }
  return channels;
}

absl::Duration ConnectChannel(grpc::Channel& channel, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const auto deadline =
      std::chrono::system_clock::now() +
      absl::ToChronoMicroseconds(std::min(timeout, kLongestDeadline));
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY &&
         state != GRPC_CHANNEL_TRANSIENT_FAILURE &&
         state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel.WaitForStateChange(state, deadline)) break;
    state = channel.GetState(/*try_to_connect=*/false);
  }
  return absl::Now() - start;
}

void PrepareContext(const ConnectionOptions& options,
                    grpc::ClientContext* context) {
  // Beyond a year (or "inf") means no deadline, which also keeps the time
  // point inside system_clock's range.
  if (options.timeout <= kLongestDeadline) {
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoMicroseconds(options.timeout));
  }
  if (!options.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options.token);
  }
}

ExitCode AskEveryTarget(
    const ConnectionOptions& options, std::ostream& err,
    absl::FunctionRef<ExitCode(const TargetCall& call)> ask) {
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      CreateChannels(options);
  if (!channels.ok()) {
    err << "error: " << channels.status().message() << "\n";
    return kExitFileError;
  }
  ExitCode code = kExitOk;
  for (size_t i = 0; i < channels->size(); ++i) {
    grpc::ClientContext context;
    PrepareContext(options, &context);
    const ExitCode answer = ask(TargetCall{.index = i,
                                           .name = options.targets[i],
                                           .several = channels->size() > 1,
                                           .channel = (*channels)[i],
                                           .context = &context});
    if (answer != kExitOk) code = answer;
  }
  return code;
}

}  // namespace attnserve::client
