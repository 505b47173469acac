#include "server/scheduler.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/cpu_quota.h"
#include "server/metrics.h"
#include "server/rpc/admission.h"

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
  if (options.batch_max_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_max_size: must be >= 1 (1 = no batching), got ",
                     options.batch_max_size));
  }
  if (options.batch_max_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_max_delay: must be >= 0, got ",
                     absl::FormatDuration(options.batch_max_delay)));
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
  // Every worker is warm before the server can answer (it reports SERVING
  // after Create): the warm-ups run in parallel, one per worker thread.
  absl::Status warm_up;
  {
    absl::MutexLock lock(&scheduler->mu_);
    scheduler->mu_.Await(
        absl::Condition(scheduler.get(), &Scheduler::AllWarmedUp));
    warm_up = scheduler->warm_up_status_;
  }
  if (!warm_up.ok()) {
    scheduler->Shutdown(absl::Now());
    return warm_up;
  }
  return scheduler;
}

Scheduler::Scheduler(const SchedulerOptions& options, int threads_per_worker,
                     Metrics* metrics)
    : workers_(options.workers),
      threads_per_worker_(threads_per_worker),
      inline_slots_(options.workers * threads_per_worker),
      max_queue_(options.max_queue),
      run_small_inline_(options.run_small_inline),
      batch_max_size_(options.batch_max_size),
      batch_max_delay_(options.batch_max_delay),
      metrics_(metrics),
      worker_warm_up_(options.worker_warm_up) {}

Scheduler::~Scheduler() { Shutdown(absl::Now()); }

absl::Status Scheduler::Submit(Task task) {
  if (!task.run || !task.reject) {
    return absl::InvalidArgumentError("task: run and reject must both be set");
  }
  if (!task.batch_key.empty() && (!task.run_batch || !task.batch_part)) {
    return absl::InvalidArgumentError(
        "task: a batch_key needs run_batch and batch_part");
  }
  bool run_inline = false;
  {
    absl::MutexLock lock(&mu_);
    if (!accepting_) return ShuttingDownError();
    // Counting the running tasks lets a task that an idle worker is about to
    // take in, even when max_queue is 0.
    if (static_cast<int64_t>(queue_.size()) + active_ <
        int64_t{max_queue_} + workers_) {
      // A free inline slot and nothing ahead (nor a batch waiting for
      // company): waking a worker would only add a thread hand-off each way.
      if (task.small && run_small_inline_ && queue_.empty() &&
          inline_running_ < inline_slots_ && batch_waiters_ == 0) {
        ++active_;
        ++inline_running_;
        run_inline = true;
      } else {
        const uint64_t id = ++last_queued_id_;
        if (task.ticket != nullptr) task.ticket->id = id;
        queue_.push_back(Queued{std::move(task), absl::Now(), id});
        PublishDepth();
        if (batch_waiters_ > 0) {
          work_or_stop_.SignalAll();
        } else {
          work_or_stop_.Signal();
        }
        return absl::OkStatus();
      }
    }
  }
  if (!run_inline) {
    if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kQueueFull);
    return absl::ResourceExhaustedError(
        absl::StrCat("queue is full (max_queue = ", max_queue_,
                     "); retry later or raise --max_queue"));
  }
  absl::AnyInvocable<void()> after_slot;
  {
    std::vector<Queued> taken;
    taken.push_back(Queued{std::move(task), absl::Now()});
    after_slot = RunTaken(*engines_.front(), taken);
  }
  {
    absl::MutexLock lock(&mu_);
    --active_;
    --inline_running_;
  }
  if (after_slot) after_slot();
  return absl::OkStatus();
}

void Scheduler::TakeCompatible(const std::string& key,
                               std::vector<Queued>* batch) {
  for (auto it = queue_.begin();
       it != queue_.end() &&
       static_cast<int>(batch->size()) < batch_max_size_;) {
    if (it->task.batch_key == key) {
      batch->push_back(std::move(*it));
      it = queue_.erase(it);
      // Taken, not finished: still counts against the queue's bound.
      ++active_;
    } else {
      ++it;
    }
  }
}

absl::AnyInvocable<void()> Scheduler::RunTaken(AttentionEngine& engine,
                                               std::vector<Queued>& taken) {
  const absl::Time now = absl::Now();
  std::vector<Queued*> live;
  std::vector<BatchMember> members;
  for (Queued& queued : taken) {
    const absl::Duration waited = now - queued.enqueued;
    Task& task = queued.task;
    if (now >= task.deadline) {
      RejectUnrun(task, /*deadline=*/true, waited);
    } else if (task.is_cancelled && task.is_cancelled()) {
      RejectUnrun(task, /*deadline=*/false, waited);
    } else {
      if (metrics_ != nullptr) {
        metrics_->RecordQueue(absl::ToDoubleSeconds(waited));
      }
      live.push_back(&queued);
      members.push_back(BatchMember{task.batch_part.get(), waited});
    }
  }
  if (live.empty()) return nullptr;
  if (metrics_ != nullptr) {
    metrics_->RecordBatch(static_cast<int>(live.size()));
  }
  if (live.size() == 1) {
    Task& task = live.front()->task;
    task.run(engine, members.front().queued);
    return std::move(task.after_slot);
  }
  live.front()->task.run_batch(engine, members);
  return nullptr;
}

absl::Status Scheduler::WarmUpWorker(AttentionEngine& engine) {
  absl::Status status = engine.WarmUpThread();
  if (status.ok() && worker_warm_up_) status = worker_warm_up_(engine);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("worker warm-up: ", status.message()));
  }
  return absl::OkStatus();
}

bool Scheduler::AllWarmedUp() const { return warmed_up_ == workers_; }

void Scheduler::WorkerLoop(AttentionEngine* engine) {
  {
    const absl::Status warm_up = WarmUpWorker(*engine);
    absl::MutexLock lock(&mu_);
    if (!warm_up.ok() && warm_up_status_.ok()) warm_up_status_ = warm_up;
    ++warmed_up_;
  }
  int finished = 0;
  while (true) {
    // Declared per iteration so the tasks' captures (request, responder) are
    // released before the worker takes its next task.
    std::vector<Queued> taken;
    {
      absl::MutexLock lock(&mu_);
      if (finished > 0) {
        active_ -= finished;
        --running_;
        finished = 0;
      }
      while (true) {
        if (stop_) return;
        if (!queue_.empty() && running_ < workers_) break;
        // After Shutdown's deadline the queued tasks belong to Shutdown,
        // which rejects them; the worker only has to leave.
        if (!accepting_ &&
            (queue_.empty() || absl::Now() >= shutdown_deadline_)) {
          return;
        }
        work_or_stop_.Wait(&mu_);
      }
      taken.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++active_;
      ++running_;
      // A copy: `taken` grows, and its first element moves.
      const std::string key = taken.front().task.batch_key;
      if (batch_max_size_ > 1 && !key.empty()) {
        TakeCompatible(key, &taken);
        if (batch_max_delay_ > absl::ZeroDuration()) {
          // The wait never reaches into a member's last batch_max_delay
          // before its deadline, so that waiting does not expire it.
          absl::Time until = absl::Now() + batch_max_delay_;
          size_t capped = 0;
          auto cap = [&] {
            for (; capped < taken.size(); ++capped) {
              until = std::min(until,
                               taken[capped].task.deadline - batch_max_delay_);
            }
          };
          cap();
          ++batch_waiters_;
          PublishDepth();
          while (static_cast<int>(taken.size()) < batch_max_size_ &&
                 accepting_ && !stop_ &&
                 !work_or_stop_.WaitWithDeadline(&mu_, until)) {
            TakeCompatible(key, &taken);
            cap();
            PublishDepth();
          }
          TakeCompatible(key, &taken);
          --batch_waiters_;
        }
      }
      PublishDepth();
      if (queue_.empty()) queue_empty_.SignalAll();
    }
    finished = static_cast<int>(taken.size());
    absl::AnyInvocable<void()> after_slot = RunTaken(*engine, taken);
    if (after_slot) after_slot();
  }
}

bool Scheduler::Withdraw(const QueueTicket& ticket) {
  std::optional<Queued> withdrawn;
  {
    absl::MutexLock lock(&mu_);
    if (ticket.id == 0) return false;
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->id == ticket.id) {
        withdrawn = std::move(*it);
        queue_.erase(it);
        PublishDepth();
        if (queue_.empty()) queue_empty_.SignalAll();
        break;
      }
    }
  }
  if (!withdrawn.has_value()) return false;
  // gRPC cancels a call whose deadline passes, on its own timer: a cancel
  // this close to the task's deadline is taken for the deadline's.
  constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(10);
  const absl::Time now = absl::Now();
  RejectUnrun(withdrawn->task, now + kDeadlineSlack >= withdrawn->task.deadline,
              now - withdrawn->enqueued);
  return true;
}

void Scheduler::RejectUnrun(Task& task, bool deadline, absl::Duration waited) {
  if (deadline) {
    if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kDeadline);
    task.reject(absl::DeadlineExceededError(
        absl::StrFormat("deadline expired after %.3f ms in queue; not computed",
                        absl::ToDoubleMilliseconds(waited))));
  } else {
    if (metrics_ != nullptr) metrics_->RecordRejection(Rejection::kCancelled);
    task.reject(
        absl::CancelledError("call cancelled while queued; not computed"));
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
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &inline_running_));
  }
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
