#ifndef ATTNSERVE_SERVER_SCHEDULER_H_
#define ATTNSERVE_SERVER_SCHEDULER_H_

// Runs attention work off the gRPC threads: a bounded FIFO queue and a fixed
// set of workers, each with its own AttentionEngine of threads_per_worker
// OpenMP threads.
//
// Sizing: every worker thread is the master of its own OpenMP team (libgomp
// keeps one pool per master), so workers × threads_per_worker should not exceed
// the CPUs the process may use (base::AvailableCpus()). More than that
// oversubscribes the cores, and idle OpenMP threads spin before they sleep, so
// the teams slow each other down by far more than the extra threads could gain.
// Prefer one worker with all cores for large calls and several narrower workers
// for many small ones; with more than one worker, OMP_WAIT_POLICY=passive stops
// idle teams spinning. This is documented, not enforced: Create only rejects
// negative values.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/attention.h"

namespace attnserve::server {

class Metrics;

struct SchedulerOptions {
  // Worker threads (default 1).
  int workers = 1;
  // OpenMP threads per worker's engine; 0 = max(1, base::AvailableCpus() /
  // workers).
  int threads_per_worker = 0;
  // Tasks waiting beyond the running ones (default 256).
  int max_queue = 256;
  // Everything else about the engines (ISA cap, tiles); num_threads is
  // overridden.
  EngineOptions engine;
};

struct Task {
  // Past this time the task is rejected DEADLINE_EXCEEDED when dequeued, never
  // run.
  absl::Time deadline = absl::InfiniteFuture();
  // Polled when dequeued; true → rejected CANCELLED, never run. May be empty.
  std::function<bool()> is_cancelled;
  // Runs on a worker with that worker's engine; `queued` is the time spent
  // queued.
  absl::AnyInvocable<void(AttentionEngine& engine, absl::Duration queued)> run;
  // Called instead of run (on a worker, or in Shutdown) with DEADLINE_EXCEEDED,
  // CANCELLED or UNAVAILABLE. Exactly one of run and reject is called for every
  // task that Submit accepted.
  absl::AnyInvocable<void(absl::Status status)> reject;
};

class Scheduler {
 public:
  // InvalidArgument for workers < 1, threads_per_worker < 0, max_queue < 0;
  // errors of engine creation. `metrics` (may be null) gets queue depth and
  // rejections.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, Metrics* metrics);
  ~Scheduler();  // Shutdown(now) if not yet shut down.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a task. ResourceExhausted "queue is full (max_queue = N)" when full;
  // Unavailable once shutting down; InvalidArgument when run or reject is
  // empty. On error the task is dropped without calling run or reject (the
  // caller answers). Thread-safe. Full means workers + max_queue tasks admitted
  // and not yet finished, so an idle worker takes a task even at max_queue = 0.
  absl::Status Submit(Task task);

  // Stops accepting, lets running and queued tasks run until `deadline`,
  // rejects what is still queued then with UNAVAILABLE, and joins the workers.
  // Idempotent. Must not be called from a task's run or reject, which would
  // wait for its own worker.
  void Shutdown(absl::Time deadline);

  int queue_depth() const;
  int workers() const;
  int threads_per_worker() const;

 private:
  struct Queued {
    Task task;
    absl::Time enqueued;
  };

  Scheduler(const SchedulerOptions& options, int threads_per_worker,
            Metrics* metrics);
  void WorkerLoop(AttentionEngine* engine);
  // Reports the queue's size to the metrics; called after every change.
  void PublishDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int workers_;
  const int threads_per_worker_;
  const int max_queue_;
  Metrics* const metrics_;
  std::vector<std::unique_ptr<AttentionEngine>> engines_;
  std::vector<std::thread> threads_;

  mutable absl::Mutex mu_;
  absl::CondVar work_or_stop_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // Tasks a worker has taken and not yet finished (run or reject).
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  // Set by Shutdown once queued tasks must no longer start; workers then exit.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::CondVar queue_empty_;

  // Serializes Shutdown so a second call returns only after the workers are
  // joined.
  absl::Mutex shutdown_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool joined_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SCHEDULER_H_
