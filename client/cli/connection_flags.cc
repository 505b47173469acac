#include "client/cli/connection_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, target, "localhost:50051",
          "server host:port; a comma list names several servers (infer uses "
          "the first, health and info ask each)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(30),
          "deadline of each call, e.g. 500ms, 30s, 2m");
ABSL_FLAG(bool, tls, false, "connect with TLS (system roots unless --ca)");
ABSL_FLAG(std::string, ca, "", "PEM file of the CA to trust (needs --tls)");
ABSL_FLAG(std::string, token, "",
          "bearer token, sent as \"authorization: Bearer TOKEN\"");
ABSL_FLAG(int64_t, max_message_bytes,
          attnserve::client::kDefaultMaxMessageBytes,
          "largest message sent or received (the channel also uses 16 MiB "
          "HTTP/2 frames and a 64 MiB stream window)");

namespace attnserve::client {

FlagGroup ConnectionFlagGroup() {
  return {"connection",
          {"target", "timeout", "tls", "ca", "token", "max_message_bytes"}};
}

absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags() {
  ConnectionOptions options;
  absl::StatusOr<std::vector<std::string>> targets =
      ParseTargets(absl::GetFlag(FLAGS_target));
  if (!targets.ok()) return targets.status();
  options.targets = *std::move(targets);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.ca_file = absl::GetFlag(FLAGS_ca);
  options.token = absl::GetFlag(FLAGS_token);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  const absl::Status status = ValidateConnectionOptions(options);
  if (!status.ok()) return status;
  return options;
}

}  // namespace attnserve::client
