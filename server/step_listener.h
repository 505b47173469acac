#ifndef ATTNSERVE_SERVER_STEP_LISTENER_H_
#define ATTNSERVE_SERVER_STEP_LISTENER_H_

// Where TCP step channels connect (--step_channel_listen; docs/api.md
// "StepChannel"). A StepChannel call that asks for TCP is issued a token;
// its client connects here and sends the token first. One thread accepts
// connections and reads their tokens (at most kMaxPending connections wait
// for theirs, each at most kTokenTimeout; a wrong or late token closes the
// connection) and hands each socket to the call that holds its token. A token
// serves one connection, and lapses when its call stops waiting.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "wire/step_socket.h"

namespace attnserve::server {

class StepListener {
 public:
  static constexpr int kMaxPending = 64;
  static constexpr absl::Duration kTokenTimeout = absl::Seconds(5);

  // Listens on `address` ("host:port"; port 0 = any free one). Unavailable
  // when it cannot be bound, InvalidArgument when it is not an address.
  static absl::StatusOr<std::unique_ptr<StepListener>> Start(
      const std::string& address);
  ~StepListener();  // stops accepting; connections not handed over close
  StepListener(const StepListener&) = delete;
  StepListener& operator=(const StepListener&) = delete;

  int port() const { return port_; }
  // This process's host and network namespace (StepChannelInfo.host_id),
  // read at Start; empty when /proc does not tell.
  const std::string& host_id() const { return host_id_; }

  // A fresh random token for one connection.
  std::string Issue();
  // Waits for the connection that presents `token` (issued here): Cancelled
  // when stop() turns true, DeadlineExceeded after `timeout`. The token
  // lapses either way.
  absl::StatusOr<wire::StepSocket> Await(const std::string& token,
                                         absl::Duration timeout,
                                         const std::function<bool()>& stop);
  // Lets `token` lapse unawaited (its connection, if one came, closes).
  void Withdraw(const std::string& token);

 private:
  StepListener(int fd, int port, std::string host_id);
  void Accept();
  // Hands `fd` to the holder of `token`; false when none waits.
  bool Deliver(const std::string& token, int fd);

  const int fd_;
  const int port_;
  const std::string host_id_;
  // Wakes the accepting thread to stop.
  const int wake_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  absl::CondVar delivered_;
  // Issued tokens: -1 until their connection came.
  absl::flat_hash_map<std::string, int> tokens_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_STEP_LISTENER_H_
