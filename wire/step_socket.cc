#include "wire/step_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "wire/step_ring.h"

namespace attnserve::wire {
namespace {

// How long a send may find the peer taking nothing before it fails.
constexpr absl::Duration kStepSendTimeout = absl::Seconds(60);
// What a skipped frame is read through.
constexpr int64_t kSkipChunk = 64 * 1024;
// How much a frame's buffer grows by at most before those bytes came.
constexpr int64_t kGrowChunk = int64_t{1} << 20;

int PollMillis(absl::Time deadline) {
  const absl::Duration left = std::min(kWaitSlice, deadline - absl::Now());
  return static_cast<int>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(left) + 1));
}

void SetBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) {
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
}

std::string ErrnoText(int error) { return std::strerror(error); }

}  // namespace

StepSocket::StepSocket(int fd) : fd_(fd) {
  SetBlocking(fd_);
  const int one = 1;
  // Fails harmlessly on a socket that is not TCP (a test's socket pair).
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval timeout{};
  timeout.tv_sec = absl::ToInt64Seconds(kStepSendTimeout);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
}

StepSocket::StepSocket(StepSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

StepSocket& StepSocket::operator=(StepSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

StepSocket::~StepSocket() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<StepSocket> StepSocket::Connect(const std::string& host,
                                               int port, absl::Time deadline) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int resolved =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::UnavailableError(absl::StrCat(
        "step channel: cannot resolve ", where, ": ", gai_strerror(resolved)));
  }
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               a->ai_protocol);
    if (fd < 0) {
      last = ErrnoText(errno);
      continue;
    }
    int error = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        error = ETIMEDOUT;
        while (absl::Now() < deadline) {
          const int ready = poll(&p, 1, PollMillis(deadline));
          if (ready < 0 && errno == EINTR) continue;
          if (ready > 0) {
            socklen_t size = sizeof(error);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
            break;
          }
        }
      }
    }
    if (error == 0) {
      freeaddrinfo(found);
      return StepSocket(fd);
    }
    last = ErrnoText(error);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("step channel: cannot connect to ", where, ": ", last));
}

absl::Status StepSocket::SendRaw(absl::string_view bytes) {
  return Send(bytes, {});
}

absl::Status StepSocket::SendFrame(absl::string_view frame) {
  if (static_cast<int64_t>(frame.size()) > kStepFrameMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("step channel: a frame of ", frame.size(),
                     " bytes is past the 4 GiB limit"));
  }
  const uint32_t size = static_cast<uint32_t>(frame.size());
  char head[4];
  for (int i = 0; i < 4; ++i) head[i] = static_cast<char>(size >> (8 * i));
  return Send(absl::string_view(head, 4), frame);
}

absl::Status StepSocket::Send(absl::string_view first,
                              absl::string_view second) {
  // One gathered write of both (the length and the frame): no copy.
  while (!first.empty() || !second.empty()) {
    iovec io[2] = {{const_cast<char*>(first.data()), first.size()},
                   {const_cast<char*>(second.data()), second.size()}};
    msghdr message{};
    message.msg_iov = io;
    message.msg_iovlen = 2;
    const ssize_t sent = sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat("step channel: the peer took no bytes for ",
                         absl::FormatDuration(kStepSendTimeout)));
      }
      return absl::UnavailableError(
          absl::StrCat("step channel: send failed: ", ErrnoText(errno)));
    }
    const size_t from_first = std::min(first.size(), static_cast<size_t>(sent));
    first.remove_prefix(from_first);
    second.remove_prefix(static_cast<size_t>(sent) - from_first);
  }
  return absl::OkStatus();
}

absl::Status StepSocket::Read(char* out, int64_t size, absl::Time spin_end,
                              absl::Time deadline,
                              const std::function<bool()>& stop,
                              bool frame_started) {
  std::vector<char> skip;
  if (out == nullptr) skip.resize(std::min(size, kSkipChunk));
  int64_t got = 0;
  while (got < size) {
    char* into = out != nullptr ? out + got : skip.data();
    const size_t want = static_cast<size_t>(
        out != nullptr ? size - got : std::min(size - got, kSkipChunk));
    const ssize_t n = recv(fd_, into, want, MSG_DONTWAIT);
    if (n > 0) {
      got += n;
      frame_started = true;
      continue;
    }
    if (n == 0) {
      return frame_started
                 ? absl::DataLossError(
                       "step channel: the peer closed the connection inside "
                       "a frame")
                 : absl::UnavailableError(
                       "step channel: the peer closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("step channel: receive failed: ", ErrnoText(errno)));
    }
    const absl::Time now = absl::Now();
    if (now < spin_end) continue;
    if (stop && stop()) {
      return absl::CancelledError("step channel: stopped while waiting");
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          "step channel: no answer within the deadline");
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, PollMillis(deadline)) < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("step channel: poll failed: ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status StepSocket::ReceiveRaw(char* out, int64_t size,
                                    absl::Duration spin, absl::Time deadline,
                                    const std::function<bool()>& stop) {
  return Read(out, size, absl::Now() + spin, deadline, stop, false);
}

absl::Status StepSocket::ReceiveFrame(int64_t max_bytes, absl::Duration spin,
                                      absl::Time deadline,
                                      const std::function<bool()>& stop,
                                      std::string* frame) {
  const absl::Time spin_end = absl::Now() + spin;
  unsigned char head[4];
  RETURN_IF_ERROR(
      Read(reinterpret_cast<char*>(head), 4, spin_end, deadline, stop, false));
  const int64_t size = int64_t{head[0]} | int64_t{head[1]} << 8 |
                       int64_t{head[2]} << 16 | int64_t{head[3]} << 24;
  if (size > max_bytes) {
    RETURN_IF_ERROR(Read(nullptr, size, spin_end, deadline, stop, true));
    return absl::InvalidArgumentError(absl::StrCat(
        "request: ", size, " bytes are past the step channel's limit of ",
        max_bytes, " bytes"));
  }
  // Grown as the bytes come: a peer that announces a long frame and sends
  // little of it holds little memory.
  frame->clear();
  for (int64_t got = 0; got < size;) {
    const int64_t piece = std::min(size - got, kGrowChunk);
    frame->resize(static_cast<size_t>(got + piece));
    RETURN_IF_ERROR(
        Read(frame->data() + got, piece, spin_end, deadline, stop, true));
    got += piece;
  }
  return absl::OkStatus();
}

void StepSocket::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

}  // namespace attnserve::wire
