#include "tests/util/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

#ifndef ATTNSERVE_SERVER_BINARY
#error "ATTNSERVE_SERVER_BINARY must name the attnserve binary"
#endif

namespace attnserve::testing {
namespace {

// The "Field:   123 kB" line of /proc/PID/status, in bytes; -1 when absent.
int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, field + ":")) {
      int64_t kb = -1;
      std::istringstream(line.substr(field.size() + 1)) >> kb;
      return kb < 0 ? -1 : kb * 1024;
    }
  }
  return -1;
}

// Reads "key=123" from a log line.
int FindInt(const std::string& text, const std::string& key) {
  const size_t at = text.find(" " + key + "=");
  if (at == std::string::npos) return 0;
  int value = 0;
  size_t i = at + key.size() + 2;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + (text[i++] - '0');
  }
  return value;
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  }
  return absl::StrCat("signal ", WTERMSIG(wait_status));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    std::vector<std::string> args) {
  bool has_listen = false, has_metrics = false;
  for (const std::string& a : args) {
    has_listen |= absl::StartsWith(a, "--listen");
    has_metrics |= absl::StartsWith(a, "--metrics_listen");
  }
  if (!has_listen) args.push_back("--listen=127.0.0.1:0");
  if (!has_metrics) args.push_back("--metrics_listen=127.0.0.1:0");
  std::vector<std::string> argv_strings = {ATTNSERVE_SERVER_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int pipe_fds[2];
  // Close-on-exec so that processes forked meanwhile (other servers,
  // std::system) hold no copy of the write end, which would keep the reader
  // from seeing EOF.
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe failed");
  }
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  p->pid_ = fork();
  if (p->pid_ < 0) return absl::InternalError("fork failed");
  if (p->pid_ == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  p->reader_ =
      std::thread([raw = p.get(), fd = pipe_fds[0]] { raw->ReadLog(fd); });

  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    const std::string log = p->Log();
    if (log.find(" port=") != std::string::npos) {
      p->port_ = FindInt(log, "port");
      p->metrics_port_ = FindInt(log, "metrics_port");
      p->step_channel_port_ = FindInt(log, "step_channel_port");
      return p;
    }
    int status;
    if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->exited_ = true;
      // The last lines may still be in the pipe; the reader ends at EOF.
      p->reader_.join();
      return absl::InternalError(absl::StrCat("attnserve exited at start with ",
                                              DescribeExit(status), ": ",
                                              p->Log()));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("attnserve did not start in 60 s: ", p->Log()));
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (reader_.joinable()) reader_.join();
}

void ServerProcess::ReadLog(int fd) {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    log_.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
}

std::string ServerProcess::Log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

std::shared_ptr<grpc::Channel> ServerProcess::Channel(
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const grpc::ChannelArguments& extra) const {
  grpc::ChannelArguments args = extra;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  return grpc::CreateCustomChannel(target(), credentials, args);
}

void ServerProcess::Kill(int signal) const { kill(pid_, signal); }

absl::StatusOr<int> ServerProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (reader_.joinable()) reader_.join();
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return absl::InternalError(
          absl::StrCat("attnserve died from signal ", WTERMSIG(status)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError("attnserve did not exit in time");
}

int64_t ServerProcess::ResidentBytes() const {
  return StatusBytes(pid_, "VmRSS");
}

int64_t ServerProcess::PeakResidentBytes() const {
  return StatusBytes(pid_, "VmHWM");
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to port ", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("write failed");
  }
  std::string response;
  char buffer[8192];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos) {
    return absl::InternalError("malformed HTTP response");
  }
  if (response.find(" 200 ") > response.find("\r\n")) {
    return absl::InternalError(absl::StrCat(
        "HTTP status line: ", response.substr(0, response.find("\r\n"))));
  }
  return response.substr(body + 4);
}

absl::StatusOr<double> MetricValue(const std::string& exposition,
                                   const std::string& series) {
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, series + " ")) {
      double value;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) {
        return value;
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

double MetricSample(const ServerProcess& server, const std::string& series) {
  absl::StatusOr<std::string> body = HttpGet(server.metrics_port(), "/metrics");
  if (!body.ok()) return -1;
  return MetricValue(*body, series).value_or(0);
}

double AwaitMetric(const ServerProcess& server, const std::string& series,
                   double at_least, absl::Duration patience) {
  const absl::Time deadline = absl::Now() + patience;
  double value = MetricSample(server, series);
  while (value < at_least && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    value = MetricSample(server, series);
  }
  return value;
}

double AwaitMetricAtMost(const ServerProcess& server, const std::string& series,
                         double at_most, absl::Duration patience) {
  const absl::Time deadline = absl::Now() + patience;
  double value = MetricSample(server, series);
  while ((value < 0 || value > at_most) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    value = MetricSample(server, series);
  }
  return value;
}

}  // namespace attnserve::testing
