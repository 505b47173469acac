#include "server/bench/rpc_load.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "wire/transport.h"

namespace attnserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(absl::ToInt64Microseconds(timeout));
}

// OK, or why a finished call does not count.
absl::Status CheckCall(const grpc::Status& status,
                       const v1::AttendResponse& response,
                       int64_t expected_output_bytes) {
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("call failed: code ",
                                            status.error_code(), ": ",
                                            status.error_message()));
  }
  const int64_t got = static_cast<int64_t>(response.output().data().size());
  if (got != expected_output_bytes) {
    return absl::InternalError(absl::StrCat("response output has ", got,
                                            " bytes, expected ",
                                            expected_output_bytes));
  }
  return absl::OkStatus();
}

void RecordCall(const v1::AttendResponse& response, double latency_us,
                WindowResult* r) {
  r->latencies_us.push_back(latency_us);
  r->server_total_us.push_back(
      static_cast<double>(response.timing().total_us()));
  r->server_compute_us.push_back(
      static_cast<double>(response.timing().compute_us()));
  r->server_queue_us.push_back(
      static_cast<double>(response.timing().queue_us()));
}

// N outstanding callback-API calls, each slot reissuing its call when it
// finishes, until the window ends.
class ClosedLoop {
 public:
  ClosedLoop(const std::vector<v1::AttentionService::Stub*>& stubs,
             int concurrency, const v1::AttendRequest& request,
             const WindowSpec& window)
      : request_(request), window_(window) {
    slots_.resize(concurrency);
    for (int i = 0; i < concurrency; ++i) {
      slots_[i].stub = stubs[i % stubs.size()];
    }
  }

  absl::StatusOr<WindowResult> Run() {
    start_ = Clock::now();
    stop_ = start_ + std::chrono::microseconds(
                         absl::ToInt64Microseconds(window_.duration));
    {
      absl::MutexLock lock(&mu_);
      active_ = static_cast<int>(slots_.size());
    }
    for (Slot& slot : slots_) Issue(&slot);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* active) { return *active == 0; }, &active_));
    if (!error_.ok()) return error_;
    WindowResult r;
    for (const Slot& slot : slots_) r.Append(slot.result);
    r.completed = static_cast<int64_t>(r.latencies_us.size());
    r.seconds = std::chrono::duration<double>(stop_ - start_).count();
    return r;
  }

 private:
  struct Slot {
    v1::AttentionService::Stub* stub = nullptr;
    std::unique_ptr<grpc::ClientContext> context;
    v1::AttendResponse response;
    Clock::time_point start;
    WindowResult result;  // only this slot's chain of calls touches it
  };

  void Issue(Slot* slot) {
    slot->context = std::make_unique<grpc::ClientContext>();
    slot->context->set_deadline(DeadlineAfter(window_.call_timeout));
    slot->response.Clear();
    slot->start = Clock::now();
    slot->stub->async()->Attend(
        slot->context.get(), &request_, &slot->response,
        [this, slot](grpc::Status status) { Done(slot, status); });
  }

  void Done(Slot* slot, const grpc::Status& status) {
    const Clock::time_point end = Clock::now();
    absl::Status checked =
        CheckCall(status, slot->response, window_.expected_output_bytes);
    if (checked.ok() && end <= stop_) {
      RecordCall(slot->response, Micros(end - slot->start), &slot->result);
      slot->result.response_bytes =
          static_cast<int64_t>(slot->response.ByteSizeLong());
    }
    if (checked.ok() && end < stop_) {
      Issue(slot);
      return;
    }
    absl::MutexLock lock(&mu_);
    if (!checked.ok() && error_.ok()) error_ = std::move(checked);
    --active_;
  }

  const v1::AttendRequest& request_;
  const WindowSpec window_;
  std::vector<Slot> slots_;
  Clock::time_point start_, stop_;  // set before the first Issue
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void WindowResult::Append(const WindowResult& other) {
  latencies_us.insert(latencies_us.end(), other.latencies_us.begin(),
                      other.latencies_us.end());
  server_total_us.insert(server_total_us.end(), other.server_total_us.begin(),
                         other.server_total_us.end());
  server_compute_us.insert(server_compute_us.end(),
                           other.server_compute_us.begin(),
                           other.server_compute_us.end());
  server_queue_us.insert(server_queue_us.end(), other.server_queue_us.begin(),
                         other.server_queue_us.end());
  completed += other.completed;
  seconds += other.seconds;
  response_bytes = std::max(response_bytes, other.response_bytes);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const std::string& pool_domain) {
  const grpc::ChannelArguments args =
      wire::ClientChannelArguments(int64_t{512} << 20, pool_domain);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::StatusOr<WindowResult> RunBlocking(v1::AttentionService::Stub& stub,
                                         const v1::AttendRequest& request,
                                         const WindowSpec& window) {
  WindowResult r;
  const Clock::time_point start = Clock::now();
  const auto duration =
      std::chrono::microseconds(absl::ToInt64Microseconds(window.duration));
  Clock::time_point end = start;
  while (end - start < duration || r.completed < window.min_calls) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(window.call_timeout));
    v1::AttendResponse response;
    const Clock::time_point call_start = Clock::now();
    const grpc::Status status = stub.Attend(&context, request, &response);
    end = Clock::now();
    const absl::Status checked =
        CheckCall(status, response, window.expected_output_bytes);
    if (!checked.ok()) return checked;
    RecordCall(response, Micros(end - call_start), &r);
    r.response_bytes = static_cast<int64_t>(response.ByteSizeLong());
    ++r.completed;
  }
  r.seconds = std::chrono::duration<double>(end - start).count();
  return r;
}

absl::StatusOr<WindowResult> RunClosedLoop(
    const std::vector<v1::AttentionService::Stub*>& stubs, int concurrency,
    const v1::AttendRequest& request, const WindowSpec& window) {
  if (stubs.empty() || concurrency < 1) {
    return absl::InvalidArgumentError("closed loop needs stubs and calls");
  }
  return ClosedLoop(stubs, concurrency, request, window).Run();
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * values.size());
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(index, values.size() - 1)];
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace attnserve::bench
