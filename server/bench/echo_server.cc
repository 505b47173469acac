// attnserve_echo_server: the RPC benchmark's no-op echo
// (server/bench/echo_service.h) as a process of its own, so that attnctl bench
// can load it exactly as it loads attnserve and show what the transport alone
// carries (docs/benchmarks.md, "Connections per target"). Serves until SIGINT
// or SIGTERM.

#include <signal.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "server/bench/echo_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "address to serve on; port 0 picks a free one (printed as port=N)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A no-op AttentionService: Attend answers at once with a zero output of "
      "attnserve's size; GetServerInfo gives the message limits.");
  absl::ParseCommandLine(argc, argv);
  // Block the signals before gRPC starts its threads, so that only sigwait
  // takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  attnserve::bench::EchoServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  auto server = attnserve::bench::EchoServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "echo serving port=%d\n", (*server)->port());
  int signal_number = 0;
  sigwait(&stop, &signal_number);
  return 0;
}
