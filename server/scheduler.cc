#include "server/scheduler.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/metrics.h"

namespace attnserve::server {
namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// `cgroup` is this process's path inside a hierarchy mounted at `mount`. The
// effective quota is the smallest along the path up to the mount's root. Inside
// a container the mount's root usually is the container's own cgroup while the
// path still names the host's, so missing levels are skipped rather than
// trusted.
template <typename LimitAt>
std::optional<int> MinLimitUpTo(const std::string& mount, std::string cgroup,
                                const LimitAt& limit_at) {
  std::optional<int> limit;
  while (true) {
    while (!cgroup.empty() && cgroup.back() == '/') cgroup.pop_back();
    if (std::optional<int> here = limit_at(mount + cgroup + "/")) {
      limit = limit ? std::min(*limit, *here) : *here;
    }
    if (cgroup.empty()) return limit;
    const size_t slash = cgroup.rfind('/');
    cgroup.erase(slash == std::string::npos ? 0 : slash);
  }
}

std::optional<int> CgroupV2Limit(const std::string& dir) {
  std::optional<std::string> cpu_max = ReadFile(dir + "cpu.max");
  if (!cpu_max) return std::nullopt;
  return CpuLimitFromCgroupCpuMax(*cpu_max);
}

std::optional<int> CgroupV1Limit(const std::string& dir) {
  std::optional<std::string> quota = ReadFile(dir + "cpu.cfs_quota_us");
  std::optional<std::string> period = ReadFile(dir + "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return CpuLimitFromCgroupCpuMax(
      absl::StrCat(absl::StripAsciiWhitespace(*quota), " ", *period));
}

// Kubernetes and Docker turn a CPU limit into a CFS quota; the process still
// sees every core of the node, so sizing thread pools from the core count alone
// oversubscribes the pod and gets it throttled.
std::optional<int> CgroupCpuLimit() {
  std::optional<std::string> self = ReadFile("/proc/self/cgroup");
  if (!self) return std::nullopt;
  std::optional<int> limit;
  auto take = [&limit](std::optional<int> l) {
    if (l) limit = limit ? std::min(*limit, *l) : *l;
  };
  // Lines are "hierarchy-id:controllers:path"; v2 has id 0 and no controllers.
  for (absl::string_view line :
       absl::StrSplit(*self, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string& path = parts[2];
    if (parts[0] == "0" && parts[1].empty()) {
      take(MinLimitUpTo("/sys/fs/cgroup", path, CgroupV2Limit));
      take(MinLimitUpTo("/sys/fs/cgroup/unified", path, CgroupV2Limit));
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller != "cpu") continue;
      take(MinLimitUpTo(absl::StrCat("/sys/fs/cgroup/", parts[1]), path,
                        CgroupV1Limit));
      if (parts[1] != "cpu") {
        take(MinLimitUpTo("/sys/fs/cgroup/cpu", path, CgroupV1Limit));
      }
    }
  }
  return limit;
}

}  // namespace

std::optional<int> CpuLimitFromCgroupCpuMax(absl::string_view cpu_max) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(cpu_max, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  int64_t quota = 0;
  int64_t period = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period) || quota < 0 || period <= 0) {
    return std::nullopt;
  }
  // Rounded down: a 1.5-CPU quota spread over two busy threads is throttled
  // every period, which costs more latency than leaving half a core unused.
  return static_cast<int>(std::max<int64_t>(1, quota / period));
}

int AvailableCpus() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (std::optional<int> limit = CgroupCpuLimit()) {
    cpus = cpus > 0 ? std::min(cpus, *limit) : *limit;
  }
  return std::max(1, cpus);
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, Metrics* metrics) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: must be >= 1, got ", options.workers));
  }
  if (options.threads_per_worker < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads_per_worker: must be >= 0 (0 = cores / workers), got ",
        options.threads_per_worker));
  }
  if (options.max_queue < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue: must be >= 0, got ", options.max_queue));
  }
  const int threads = options.threads_per_worker > 0
                          ? options.threads_per_worker
                          : std::max(1, AvailableCpus() / options.workers);
  EngineOptions engine_options = options.engine;
  engine_options.num_threads = threads;

  std::unique_ptr<Scheduler> scheduler(
      new Scheduler(options, threads, metrics));
  // Engines come first so a creation error leaves no thread to stop.
  for (int w = 0; w < options.workers; ++w) {
    absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
        AttentionEngine::Create(engine_options);
    if (!engine.ok()) return engine.status();
    scheduler->engines_.push_back(*std::move(engine));
  }
  {
    absl::MutexLock lock(&scheduler->mu_);
    scheduler->PublishDepth();
  }
  for (auto& engine : scheduler->engines_) {
    scheduler->threads_.emplace_back(&Scheduler::WorkerLoop, scheduler.get(),
                                     engine.get());
  }
  return scheduler;
}

Scheduler::Scheduler(const SchedulerOptions& options, int threads_per_worker,
                     Metrics* metrics)
    : workers_(options.workers),
      threads_per_worker_(threads_per_worker),
      max_queue_(options.max_queue),
      metrics_(metrics) {}

Scheduler::~Scheduler() { Shutdown(absl::Now()); }

absl::Status Scheduler::Submit(Task task) {
  if (!task.run || !task.reject) {
    return absl::InvalidArgumentError("task: run and reject must both be set");
  }
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) return absl::UnavailableError("server is shutting down");
    // Counting the running tasks lets a task that an idle worker is about to
    // take in, even when max_queue is 0.
    if (static_cast<int64_t>(queue_.size()) + active_ <
        int64_t{max_queue_} + workers_) {
      queue_.push_back(Queued{std::move(task), absl::Now()});
      PublishDepth();
      work_or_stop_.Signal();
      return absl::OkStatus();
    }
  }
  if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kQueueFull);
  return absl::ResourceExhaustedError(
      absl::StrCat("queue is full (max_queue = ", max_queue_,
                   "); retry later or raise --max_queue"));
}

void Scheduler::WorkerLoop(AttentionEngine* engine) {
  bool finished_one = false;
  while (true) {
    // Declared per iteration so the task's captures (request, responder) are
    // released before the worker counts as free again.
    Queued queued;
    {
      absl::MutexLock lock(&mu_);
      if (finished_one) --active_;
      while (queue_.empty() && accepting_ && !stop_) work_or_stop_.Wait(&mu_);
      // After Shutdown's deadline the queued tasks belong to Shutdown, which
      // rejects them; the worker only has to leave.
      if (stop_ || queue_.empty() ||
          (!accepting_ && absl::Now() >= shutdown_deadline_)) {
        return;
      }
      queued = std::move(queue_.front());
      queue_.pop_front();
      ++active_;
      PublishDepth();
      if (queue_.empty()) queue_empty_.SignalAll();
    }
    finished_one = true;

    const absl::Time now = absl::Now();
    const absl::Duration waited = now - queued.enqueued;
    Task& task = queued.task;
    if (now >= task.deadline) {
      if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kDeadline);
      task.reject(absl::DeadlineExceededError(absl::StrFormat(
          "deadline expired after %.3f ms in queue; not computed",
          absl::ToDoubleMilliseconds(waited))));
    } else if (task.is_cancelled && task.is_cancelled()) {
      if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kCancelled);
      task.reject(
          absl::CancelledError("call cancelled while queued; not computed"));
    } else {
      if (metrics_ != nullptr) {
        metrics_->RecordQueue(absl::ToDoubleSeconds(waited));
      }
      task.run(*engine, waited);
    }
  }
}

void Scheduler::Shutdown(absl::Time deadline) {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (joined_) return;
  std::deque<Queued> leftover;
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    shutdown_deadline_ = deadline;
    // Idle workers wait for work; they must wake to see that none will come.
    work_or_stop_.SignalAll();
    while (!queue_.empty()) {
      if (queue_empty_.WaitWithDeadline(&mu_, deadline)) break;
    }
    stop_ = true;
    leftover.swap(queue_);
    PublishDepth();
    work_or_stop_.SignalAll();
  }
  for (Queued& queued : leftover) {
    if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kShutdown);
    queued.task.reject(
        absl::UnavailableError("server is shutting down; not computed"));
  }
  leftover.clear();
  for (std::thread& thread : threads_) thread.join();
  joined_ = true;
}

void Scheduler::PublishDepth() {
  if (metrics_ != nullptr) {
    metrics_->SetQueueDepth(static_cast<int64_t>(queue_.size()));
  }
}

int Scheduler::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

int Scheduler::workers() const { return workers_; }

int Scheduler::threads_per_worker() const { return threads_per_worker_; }

}  // namespace attnserve::server
