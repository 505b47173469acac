#include "server/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/cpu_quota.h"
#include "server/metrics.h"

namespace attnserve::server {

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
  const int threads =
      options.threads_per_worker > 0
          ? options.threads_per_worker
          : std::max(1, base::AvailableCpus() / options.workers);
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
