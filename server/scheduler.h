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
//
// Small tasks (Task::small) skip the hand-off when they can: with
// run_small_inline, a small task submitted while nothing is queued runs at
// once on the submitting thread, with the first engine, when one of the
// inline slots is free. There are workers × threads_per_worker of them,
// beside the workers' own: a small task (a few microseconds, one thread)
// neither waits for a worker that is busy nor holds a worker's place, so the
// cores may briefly run that many small runs besides the workers' kernels.
// Holding a worker's slot instead sent half the calls of a busy one-worker
// server through the queue (a wake-up and a thread hop each way):
// docs/benchmarks.md, "Small requests and batching".
//
// Dynamic batching (batch_max_size > 1): a worker that takes a task with a
// batch_key also takes, in queue order, the queued tasks with the same key, up
// to batch_max_size in all; with batch_max_delay > 0 it then waits up to that
// long after taking the first for more to arrive (0: only what is queued
// already), but never into a member's last batch_max_delay before its
// deadline. The tasks it takes pass over incompatible ones, which keep their
// order. A batch of one runs as an ordinary task.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
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
  // Small tasks run on the submitting thread when a worker's slot is free
  // and nothing is queued (default true).
  bool run_small_inline = true;
  // Most tasks in one batch; 1 (default) = no batching.
  int batch_max_size = 1;
  // How long a worker holding an incomplete batch waits for more compatible
  // tasks, from when it took the first (default 0: no wait).
  absl::Duration batch_max_delay = absl::ZeroDuration();
  // Optional: run once on each worker's thread with its engine, after the
  // engine's WarmUpThread and before the worker takes a task, so that what a
  // first call would set up (the hosted layers' buffers, products and
  // scratch on that thread and engine) is set up before any request. Create
  // waits for every worker's and fails with the first error.
  std::function<absl::Status(AttentionEngine& engine)> worker_warm_up;
};

struct Task;

// What a task carries for its batch's runner (Task::batch_part); the service
// that makes the task defines it.
class BatchPart {
 public:
  virtual ~BatchPart() = default;
};

// One task of a batch as its runner sees it.
struct BatchMember {
  BatchPart* part = nullptr;
  // Time the task spent queued.
  absl::Duration queued;
};

// Names a task while it waits in the queue, for Scheduler::Withdraw (a call
// cancelled meanwhile). Filled in by Submit when it queues the task; owned by
// the caller, who may withdraw through it at any time (no-op unless the task
// is still queued).
class QueueTicket {
 private:
  friend class Scheduler;
  uint64_t id = 0;  // guarded by the scheduler's mutex; 0 = never queued
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
  // Optional: lets the caller withdraw the task while it is queued.
  std::shared_ptr<QueueTicket> ticket;
  // Optional: called right after run, on the same thread; inline, once the
  // run's slot is free again (another small task may be computing in it
  // already). For the part of the work that needs no engine: the answer.
  absl::AnyInvocable<void()> after_slot;
  // Called instead of run (on a worker, or in Shutdown) with DEADLINE_EXCEEDED,
  // CANCELLED or UNAVAILABLE. For every task that Submit accepted exactly one
  // of run, reject or (as a batch member) a run_batch is called.
  absl::AnyInvocable<void(absl::Status status)> reject;
  // May run inline on the submitting thread (SchedulerOptions::
  // run_small_inline); meant for work of a few microseconds.
  bool small = false;
  // Dynamic batching: tasks with equal non-empty keys may be run together.
  // Then, after each member's deadline and cancellation are checked (a member
  // that fails them is rejected alone and left out), run_batch of the first
  // member left is called once, on a worker, with every member's part and
  // queue time in queue order (its own first), and must finish every member;
  // the members' run and reject are dropped uncalled. Tasks of equal keys must
  // have run_batch and batch_part that work together.
  std::string batch_key;
  std::unique_ptr<BatchPart> batch_part;
  absl::AnyInvocable<void(AttentionEngine& engine,
                          const std::vector<BatchMember>& members)>
      run_batch;
};

class Scheduler {
 public:
  // InvalidArgument for workers < 1, threads_per_worker < 0, max_queue < 0,
  // batch_max_size < 1, a negative batch_max_delay; errors of engine
  // creation and of the workers' warm-up (WarmUpThread, worker_warm_up),
  // which has run on every worker when Create returns. `metrics` (may be
  // null) gets queue depth and rejections.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, Metrics* metrics);
  ~Scheduler();  // Shutdown(now) if not yet shut down.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a task, or runs a small one inline before returning (see the top
  // of this file). ResourceExhausted "queue is full (max_queue = N)" when
  // full; Unavailable once shutting down; InvalidArgument when run or reject
  // is empty, or batch_key is set without run_batch and batch_part. On error
  // the task is dropped without calling run or reject (the caller answers).
  // Thread-safe. Full means workers + max_queue tasks admitted and not yet
  // finished, so an idle worker takes a task even at max_queue = 0.
  absl::Status Submit(Task task);

  // Takes the ticket's task out of the queue if it is still there and rejects
  // it at once with CANCELLED (DEADLINE_EXCEEDED when its deadline has come,
  // within 10 ms), counted as at dequeue, so that what it holds (its request,
  // its memory-budget bytes) goes now rather than when a worker reaches it.
  // True when it did; false when the task was never queued, or has been taken
  // or rejected already. Thread-safe; not from inside the task's own run or
  // reject.
  bool Withdraw(const QueueTicket& ticket);

  // Stops accepting, lets running and queued tasks run until `deadline`,
  // rejects what is still queued then with UNAVAILABLE, joins the workers and
  // waits for inline runs to end. Idempotent. Must not be called from a
  // task's run or reject, which would wait for its own worker.
  void Shutdown(absl::Time deadline);

  int queue_depth() const;
  int workers() const;
  int threads_per_worker() const;

 private:
  struct Queued {
    Task task;
    absl::Time enqueued;
    uint64_t id = 0;  // QueueTicket::id
  };

  Scheduler(const SchedulerOptions& options, int threads_per_worker,
            Metrics* metrics);
  void WorkerLoop(AttentionEngine* engine);
  // On the worker's thread: the engine's WarmUpThread, then worker_warm_up.
  absl::Status WarmUpWorker(AttentionEngine& engine);
  bool AllWarmedUp() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the queued tasks with `key` into `batch`, in queue order, until it
  // holds batch_max_size; they count as active from then on.
  void TakeCompatible(const std::string& key, std::vector<Queued>* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks each task's deadline and cancellation (rejecting those that fail),
  // then runs the rest: alone, or as a batch. Returns the after_slot of a
  // task run alone (empty otherwise), for the caller to call next.
  absl::AnyInvocable<void()> RunTaken(AttentionEngine& engine,
                                      std::vector<Queued>& taken);
  // Rejects a task taken from the queue unrun: DEADLINE_EXCEEDED (after
  // `waited` in the queue) or CANCELLED, counted.
  void RejectUnrun(Task& task, bool deadline, absl::Duration waited);
  // Reports the queue's size to the metrics; called after every change.
  void PublishDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int workers_;
  const int threads_per_worker_;
  // Inline runs at once: workers × threads_per_worker, the CPUs the workers
  // are sized for.
  const int inline_slots_;
  const int max_queue_;
  const bool run_small_inline_;
  const int batch_max_size_;
  const absl::Duration batch_max_delay_;
  Metrics* const metrics_;
  const std::function<absl::Status(AttentionEngine&)> worker_warm_up_;
  std::vector<std::unique_ptr<AttentionEngine>> engines_;
  std::vector<std::thread> threads_;

  mutable absl::Mutex mu_;
  absl::CondVar work_or_stop_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t last_queued_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Tasks taken from the queue (or run inline) and not yet finished.
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  // Runs in progress on workers (a batch is one); at most workers_.
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // Inline runs in progress, at most inline_slots_ (Shutdown waits for
  // them).
  int inline_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers waiting out batch_max_delay for more of their batch.
  int batch_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers whose warm-up has ended, and the first error among them.
  int warmed_up_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status warm_up_status_ ABSL_GUARDED_BY(mu_);
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
