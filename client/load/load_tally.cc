#include "client/load/load_tally.h"

#include <algorithm>

namespace attnserve::client {

int64_t LoadResult::error_total() const {
  int64_t total = 0;
  for (const auto& [code, errors] : errors) total += errors.count;
  return total;
}

double LoadResult::throughput_rps() const {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  return seconds > 0 ? ok / seconds : 0;
}

LoadTally::LoadTally(int channels) {
  result_.ok_per_channel.assign(static_cast<size_t>(channels), 0);
}

void LoadTally::Span(absl::Time scheduled, absl::Time done) {
  ++result_.requests;
  first_scheduled_ = std::min(first_scheduled_, scheduled);
  last_done_ = std::max(last_done_, done);
  result_.elapsed =
      std::max(absl::ZeroDuration(), last_done_ - first_scheduled_);
}

void LoadTally::RecordOk(int channel, absl::Time scheduled, absl::Time done,
                         absl::Duration server_queue,
                         absl::Duration server_compute, double server_flops,
                         int64_t response_bytes) {
  absl::MutexLock lock(&mu_);
  Span(scheduled, done);
  ++result_.ok;
  result_.response_bytes += response_bytes;
  result_.server_flops += server_flops;
  ++result_.ok_per_channel[static_cast<size_t>(channel)];
  result_.latency.Record(done - scheduled);
  result_.server_queue.Record(server_queue);
  result_.server_compute.Record(server_compute);
}

void LoadTally::RecordError(const std::string& code, const std::string& message,
                            absl::Time scheduled, absl::Time done) {
  absl::MutexLock lock(&mu_);
  Span(scheduled, done);
  ErrorCount& errors = result_.errors[code];
  if (errors.count++ == 0) errors.first_message = message;
}

void LoadTally::RecordLateSend() {
  absl::MutexLock lock(&mu_);
  ++result_.late_sends;
}

void LoadTally::StopEarly(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (result_.stopped_early.empty()) result_.stopped_early = reason;
}

LoadResult LoadTally::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return result_;
}

}  // namespace attnserve::client
