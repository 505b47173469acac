#include "server/step_listener.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/file.h"

namespace attnserve::server {
namespace {

// A connection that has not sent its whole token yet.
struct Pending {
  int fd;
  absl::Time deadline;
  std::string token;
};

absl::Status SplitAddress(const std::string& address, std::string* host,
                          std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--step_channel_listen: \"", address, "\" is not host:port"));
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int number = 0;
  if (!absl::SimpleAtoi(*port, &number) || number < 0 || number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step_channel_listen: the port of \"", address,
                     "\" is not 0..65535"));
  }
  return absl::OkStatus();
}

// "<boot id>/<net namespace>": two processes with the same one share a
// loopback interface. Empty when /proc does not tell.
std::string HostId() {
  absl::StatusOr<std::string> boot =
      base::ReadFile("/proc/sys/kernel/random/boot_id", 64);
  char net[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/net", net, sizeof(net) - 1);
  if (!boot.ok() || n <= 0) return "";
  return absl::StrCat(absl::StripAsciiWhitespace(*boot), "/",
                      absl::string_view(net, static_cast<size_t>(n)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StepListener>> StepListener::Start(
    const std::string& address) {
  std::string host, port;
  if (absl::Status split = SplitAddress(address, &host, &port); !split.ok()) {
    return split;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                   port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step_channel_listen: cannot resolve \"", address,
                     "\": ", gai_strerror(resolved)));
  }
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      sockaddr_storage bound{};
      socklen_t size = sizeof(bound);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
      char service[16] = {0};
      getnameinfo(reinterpret_cast<sockaddr*>(&bound), size, nullptr, 0,
                  service, sizeof(service), NI_NUMERICSERV);
      int bound_port = 0;
      absl::SimpleAtoi(service, &bound_port);
      freeaddrinfo(found);
      std::unique_ptr<StepListener> listener(
          new StepListener(fd, bound_port, HostId()));
      listener->thread_ = std::thread([l = listener.get()] { l->Accept(); });
      return listener;
    }
    last = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat(
      "--step_channel_listen: cannot listen on ", address, ": ", last));
}

StepListener::StepListener(int fd, int port, std::string host_id)
    : fd_(fd),
      port_(port),
      host_id_(std::move(host_id)),
      wake_(eventfd(0, EFD_CLOEXEC)) {}

StepListener::~StepListener() {
  stopping_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t woken = write(wake_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(wake_);
  close(fd_);
  absl::MutexLock lock(&mu_);
  for (auto& [token, fd] : tokens_) {
    if (fd >= 0) close(fd);
  }
}

std::string StepListener::Issue() {
  std::string token(wire::kStepTokenBytes, '\0');
  size_t filled = 0;
  while (filled < token.size()) {
    const ssize_t n =
        getrandom(token.data() + filled, token.size() - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  absl::MutexLock lock(&mu_);
  tokens_.emplace(token, -1);
  return token;
}

absl::StatusOr<wire::StepSocket> StepListener::Await(
    const std::string& token, absl::Duration timeout,
    const std::function<bool()>& stop) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = tokens_.find(token);
    if (it == tokens_.end()) {
      return absl::InternalError("step channel: the token was never issued");
    }
    if (it->second >= 0) {
      const int fd = it->second;
      tokens_.erase(it);
      return wire::StepSocket(fd);
    }
    if (stop()) {
      tokens_.erase(it);
      return absl::CancelledError(
          "step channel: ended before its client connected");
    }
    if (absl::Now() >= deadline) {
      tokens_.erase(it);
      return absl::DeadlineExceededError(absl::StrCat(
          "step channel: the client did not connect to port ", port_,
          " with its token within ", absl::FormatDuration(timeout)));
    }
    // Slices: stop() is polled, not signalled.
    delivered_.WaitWithTimeout(
        &mu_, std::min(absl::Milliseconds(10), deadline - absl::Now()));
  }
}

void StepListener::Withdraw(const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return;
  if (it->second >= 0) close(it->second);
  tokens_.erase(it);
}

bool StepListener::Deliver(const std::string& token, int fd) {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(token);
  if (it == tokens_.end() || it->second >= 0) return false;
  it->second = fd;
  delivered_.SignalAll();
  return true;
}

void StepListener::Accept() {
  std::deque<Pending> pending;
  std::vector<pollfd> polled;
  while (!stopping_.load()) {
    // Asleep until a connection, a token's bytes, the oldest pending
    // connection's deadline, or the destructor's wake-up.
    polled.assign({pollfd{fd_, POLLIN, 0}, pollfd{wake_, POLLIN, 0}});
    for (const Pending& p : pending) polled.push_back(pollfd{p.fd, POLLIN, 0});
    const int timeout_ms =
        pending.empty() ? -1
                        : static_cast<int>(std::max<int64_t>(
                              0, absl::ToInt64Milliseconds(
                                     pending.front().deadline - absl::Now()) +
                                     1));
    if (poll(polled.data(), polled.size(), timeout_ms) < 0 && errno != EINTR) {
      break;
    }
    const absl::Time now = absl::Now();
    std::deque<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      bool done = false;
      if ((polled[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char buffer[wire::kStepTokenBytes];
        const ssize_t n = recv(
            p.fd, buffer, wire::kStepTokenBytes - p.token.size(), MSG_DONTWAIT);
        if (n > 0) {
          p.token.append(buffer, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          done = true;
        }
      }
      if (!done && static_cast<int>(p.token.size()) == wire::kStepTokenBytes) {
        if (Deliver(p.token, p.fd)) continue;  // the socket is the call's now
        done = true;
      }
      if (done || now >= p.deadline) {
        close(p.fd);
        continue;
      }
      still.push_back(std::move(p));
    }
    pending = std::move(still);
    if ((polled[0].revents & POLLIN) != 0) {
      const int fd =
          accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        if (static_cast<int>(pending.size()) >= kMaxPending) {
          close(pending.front().fd);
          pending.pop_front();
        }
        pending.push_back(Pending{fd, now + kTokenTimeout, {}});
      }
    }
  }
  for (const Pending& p : pending) close(p.fd);
}

}  // namespace attnserve::server
