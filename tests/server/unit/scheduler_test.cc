// The scheduler with real worker threads and fake tasks: queue bounds,
// deadlines at dequeue, cancellation, shutdown with a grace, depth metrics.
// Long because each case sets up its own blocking tasks.

#include "server/scheduler.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/cpu_quota.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "server/metrics.h"
#include "tests/util/test_util.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

// Occupies a worker until released, so tests can line tasks up behind it
// without sleeping. Releases on destruction too: a failed assertion must not
// leave Shutdown joining a worker that waits forever. Declare it after the
// scheduler so it is destroyed first.
class Blocker {
 public:
  Blocker() : state_(std::make_shared<State>()) {}
  ~Blocker() { Release(); }

  Task MakeTask() {
    Task task;
    task.run = [state = state_](AttentionEngine&, absl::Duration) {
      state->started.Notify();
      state->release.WaitForNotification();
    };
    task.reject = [state = state_](absl::Status status) {
      state->rejected = std::move(status);
      state->started.Notify();
    };
    return task;
  }
  void WaitUntilRunning() { state_->started.WaitForNotification(); }
  void Release() {
    if (!state_->release.HasBeenNotified()) state_->release.Notify();
  }

 private:
  // Shared with the task: the worker may still be returning from
  // WaitForNotification when the test destroys the Blocker.
  struct State {
    absl::Notification started;
    absl::Notification release;
    absl::Status rejected;
  };
  std::shared_ptr<State> state_;
};

// Records what happened to one task.
struct Outcome {
  absl::Mutex mu;
  int runs ABSL_GUARDED_BY(mu) = 0;
  int rejects ABSL_GUARDED_BY(mu) = 0;
  std::optional<absl::Status> status ABSL_GUARDED_BY(mu);
  absl::Notification done;

  int Runs() {
    absl::MutexLock lock(&mu);
    return runs;
  }
  int Rejects() {
    absl::MutexLock lock(&mu);
    return rejects;
  }
  absl::Status Status() {
    absl::MutexLock lock(&mu);
    return status.value_or(absl::OkStatus());
  }
};

Task RecordingTask(std::shared_ptr<Outcome> outcome) {
  Task task;
  task.run = [outcome](AttentionEngine&, absl::Duration) {
    {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->runs;
    }
    outcome->done.Notify();
  };
  task.reject = [outcome](absl::Status status) {
    {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->rejects;
      outcome->status = std::move(status);
    }
    outcome->done.Notify();
  };
  return task;
}

SchedulerOptions Options(int workers, int max_queue) {
  SchedulerOptions options;
  options.workers = workers;
  options.threads_per_worker = 1;
  options.max_queue = max_queue;
  return options;
}

std::unique_ptr<Scheduler> MakeScheduler(const SchedulerOptions& options,
                                         Metrics* metrics = nullptr) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(options, metrics);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? *std::move(scheduler) : nullptr;
}

// Blocks until Shutdown, running on another thread, has stopped admitting
// tasks. While the queue is full Submit answers ResourceExhausted, after that
// Unavailable; the probes are dropped either way.
void WaitUntilNotAccepting(Scheduler& scheduler) {
  while (scheduler.Submit(RecordingTask(std::make_shared<Outcome>())).code() !=
         absl::StatusCode::kUnavailable) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST(SchedulerTest, CreateRejectsBadOptions) {
  SchedulerOptions options = Options(1, 4);
  options.workers = 0;
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("workers: must be >= 1, got 0")));
  options = Options(1, 4);
  options.threads_per_worker = -1;
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("threads_per_worker: must be >= 0")));
  options = Options(1, 4);
  options.max_queue = -1;
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_queue: must be >= 0, got -1")));
  options = Options(1, 4);
  options.engine.k_block = 0;
  EXPECT_THAT(
      Scheduler::Create(options, nullptr).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k_block")));
}

TEST(SchedulerTest, DefaultThreadsShareTheAvailableCpus) {
  SchedulerOptions options = Options(1, 4);
  options.threads_per_worker = 0;
  std::unique_ptr<Scheduler> one = MakeScheduler(options);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->workers(), 1);
  EXPECT_EQ(one->threads_per_worker(), base::AvailableCpus());

  options.workers = 2;
  std::unique_ptr<Scheduler> two = MakeScheduler(options);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->workers(), 2);
  EXPECT_EQ(two->threads_per_worker(), std::max(1, base::AvailableCpus() / 2));
}

TEST(SchedulerTest, EngineHasThreadsPerWorkerThreads) {
  SchedulerOptions options = Options(2, 4);
  options.threads_per_worker = 3;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  ASSERT_NE(scheduler, nullptr);
  EXPECT_EQ(scheduler->threads_per_worker(), 3);
  std::atomic<int> engine_threads{-1};
  absl::Notification ran;
  Task task;
  task.run = [&](AttentionEngine& engine, absl::Duration) {
    engine_threads = engine.num_threads();
    ran.Notify();
  };
  task.reject = [&](absl::Status) { ran.Notify(); };
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  ran.WaitForNotification();
  EXPECT_EQ(engine_threads.load(), 3);
}

// The workers' threads and engines as the warm-up saw them.
struct WarmUps {
  absl::Mutex mu;
  std::vector<std::pair<std::thread::id, AttentionEngine*>> seen
      ABSL_GUARDED_BY(mu);
};

TEST(SchedulerTest, WarmUpRanOnEveryWorkerThreadBeforeItsFirstTask) {
  constexpr int kWorkers = 3;
  auto warm_ups = std::make_shared<WarmUps>();
  SchedulerOptions options = Options(kWorkers, 4);
  options.worker_warm_up = [warm_ups](AttentionEngine& engine) {
    absl::MutexLock lock(&warm_ups->mu);
    warm_ups->seen.emplace_back(std::this_thread::get_id(), &engine);
    return absl::OkStatus();
  };
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  ASSERT_NE(scheduler, nullptr);
  std::vector<std::pair<std::thread::id, AttentionEngine*>> warmed;
  {
    // Create returns only once every worker is warm.
    absl::MutexLock lock(&warm_ups->mu);
    warmed = warm_ups->seen;
  }
  ASSERT_EQ(warmed.size(), size_t{kWorkers});
  for (size_t i = 0; i < warmed.size(); ++i) {
    EXPECT_NE(warmed[i].first, std::this_thread::get_id());
    for (size_t j = 0; j < i; ++j) {
      EXPECT_NE(warmed[i].first, warmed[j].first);
      EXPECT_NE(warmed[i].second, warmed[j].second);
    }
  }
  // One task held on each worker: every worker's first task runs on a
  // thread that was warmed up, with the engine it was warmed up with.
  absl::Mutex mu;
  std::vector<std::pair<std::thread::id, AttentionEngine*>> ran;
  std::vector<std::unique_ptr<Blocker>> blockers;
  for (int w = 0; w < kWorkers; ++w) {
    blockers.push_back(std::make_unique<Blocker>());
    Task task = blockers.back()->MakeTask();
    absl::AnyInvocable<void(AttentionEngine&, absl::Duration)> block =
        std::move(task.run);
    task.run = [&mu, &ran, block = std::move(block)](
                   AttentionEngine& engine, absl::Duration queued) mutable {
      {
        absl::MutexLock lock(&mu);
        ran.emplace_back(std::this_thread::get_id(), &engine);
      }
      block(engine, queued);
    };
    ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  }
  for (auto& blocker : blockers) blocker->WaitUntilRunning();
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(ran.size(), size_t{kWorkers});
    for (const auto& run : ran) {
      EXPECT_NE(std::find(warmed.begin(), warmed.end(), run), warmed.end());
    }
  }
  for (auto& blocker : blockers) blocker->Release();
  scheduler->Shutdown(absl::InfiniteFuture());
}

TEST(SchedulerTest, WarmUpErrorFailsCreate) {
  SchedulerOptions options = Options(2, 4);
  options.worker_warm_up = [](AttentionEngine&) {
    return absl::InternalError("no model today");
  };
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("worker warm-up: no model today")));
}

TEST(SchedulerTest, RunsOnAWorkerThreadNotTheSubmitter) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  std::thread::id runner;
  absl::Notification ran;
  Task task;
  task.run = [&](AttentionEngine&, absl::Duration queued) {
    runner = std::this_thread::get_id();
    EXPECT_GE(queued, absl::ZeroDuration());
    ran.Notify();
  };
  task.reject = [&](absl::Status) { ran.Notify(); };
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  ran.WaitForNotification();
  EXPECT_NE(runner, std::thread::id());
  EXPECT_NE(runner, std::this_thread::get_id());
}

TEST(SchedulerTest, OneWorkerRunsTasksInSubmissionOrder) {
  constexpr int kTasks = 20;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, kTasks));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();

  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification all_ran;
  for (int i = 0; i < kTasks; ++i) {
    Task task;
    task.run = [&, i](AttentionEngine&, absl::Duration) {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      if (order.size() == kTasks) all_ran.Notify();
    };
    task.reject = [&, i](absl::Status status) {
      ADD_FAILURE() << "task " << i << " rejected: " << status;
    };
    ASSERT_TRUE(scheduler->Submit(std::move(task)).ok()) << i;
  }
  EXPECT_EQ(scheduler->queue_depth(), kTasks);
  blocker.Release();
  all_ran.WaitForNotification();

  std::vector<int> expected(kTasks);
  for (int i = 0; i < kTasks; ++i) expected[i] = i;
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, expected);
}

TEST(SchedulerTest, FullQueueRejectsWithResourceExhaustedAndRunsNothing) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 2));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto first = std::make_shared<Outcome>();
  auto second = std::make_shared<Outcome>();
  ASSERT_TRUE(scheduler->Submit(RecordingTask(first)).ok());
  ASSERT_TRUE(scheduler->Submit(RecordingTask(second)).ok());
  EXPECT_EQ(scheduler->queue_depth(), 2);

  auto refused = std::make_shared<Outcome>();
  EXPECT_THAT(scheduler->Submit(RecordingTask(refused)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("queue is full (max_queue = 2); retry later "
                                 "or raise --max_queue")));
  EXPECT_EQ(scheduler->queue_depth(), 2);

  blocker.Release();
  scheduler->Shutdown(absl::InfiniteFuture());
  EXPECT_EQ(first->Runs(), 1);
  EXPECT_EQ(second->Runs(), 1);
  EXPECT_EQ(refused->Runs(), 0);
  EXPECT_EQ(refused->Rejects(), 0);
}

TEST(SchedulerTest, MaxQueueZeroAdmitsOnlyWhatIdleWorkersTake) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 0));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  EXPECT_THAT(scheduler->Submit(RecordingTask(std::make_shared<Outcome>())),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("queue is full (max_queue = 0)")));
  blocker.WaitUntilRunning();
  EXPECT_THAT(scheduler->Submit(RecordingTask(std::make_shared<Outcome>())),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("queue is full (max_queue = 0)")));
}

TEST(SchedulerTest, ExpiredDeadlineIsRejectedAndNeverRun) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  task.deadline = absl::Now() - absl::Seconds(1);
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  outcome->done.WaitForNotification();
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_EQ(outcome->Rejects(), 1);
  EXPECT_THAT(outcome->Status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("deadline expired after "),
                             HasSubstr(" ms in queue; not computed"))));
}

TEST(SchedulerTest, DeadlinePassingWhileQueuedIsRejected) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(20);
  task.deadline = deadline;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  // Hold the worker until the deadline has certainly passed; only the order of
  // events matters, not how long anything took.
  while (absl::Now() <= deadline) absl::SleepFor(absl::Milliseconds(5));
  blocker.Release();
  outcome->done.WaitForNotification();
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_THAT(outcome->Status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("ms in queue; not computed")));
}

TEST(SchedulerTest, CancelledCallIsRejectedAndNeverRun) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  task.is_cancelled = [] { return true; };
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  outcome->done.WaitForNotification();
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_THAT(outcome->Status(), StatusIs(absl::StatusCode::kCancelled,
                                          HasSubstr("not computed")));
}

TEST(SchedulerTest, CancellationIsPolledWhenDequeuedNotWhenSubmitted) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  task.is_cancelled = [cancelled] { return cancelled->load(); };
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  *cancelled = true;
  blocker.Release();
  outcome->done.WaitForNotification();
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_THAT(outcome->Status(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled")));
}

TEST(SchedulerTest, ShutdownDrainsQueuedTasksBeforeTheDeadline) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 3));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  std::vector<std::shared_ptr<Outcome>> outcomes;
  for (int i = 0; i < 3; ++i) {
    outcomes.push_back(std::make_shared<Outcome>());
    ASSERT_TRUE(scheduler->Submit(RecordingTask(outcomes.back())).ok());
  }

  std::thread shutdown(
      [&] { scheduler->Shutdown(absl::Now() + absl::Hours(1)); });
  WaitUntilNotAccepting(*scheduler);
  // Shutdown has begun with all three still queued behind the blocker.
  EXPECT_EQ(scheduler->queue_depth(), 3);
  EXPECT_THAT(scheduler->Submit(RecordingTask(std::make_shared<Outcome>())),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("server is shutting down")));
  blocker.Release();
  shutdown.join();

  for (const auto& outcome : outcomes) {
    EXPECT_EQ(outcome->Runs(), 1);
    EXPECT_EQ(outcome->Rejects(), 0);
  }
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

TEST(SchedulerTest, ShutdownRejectsTasksLeftAfterTheDeadline) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 3));
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  std::vector<std::shared_ptr<Outcome>> outcomes;
  for (int i = 0; i < 3; ++i) {
    outcomes.push_back(std::make_shared<Outcome>());
    ASSERT_TRUE(scheduler->Submit(RecordingTask(outcomes.back())).ok());
  }

  // The deadline is already over, so Shutdown rejects the queue at once and
  // then waits only for the running blocker.
  std::thread shutdown([&] { scheduler->Shutdown(absl::Now()); });
  for (const auto& outcome : outcomes) outcome->done.WaitForNotification();
  blocker.Release();
  shutdown.join();

  for (const auto& outcome : outcomes) {
    EXPECT_EQ(outcome->Runs(), 0);
    EXPECT_EQ(outcome->Rejects(), 1);
    EXPECT_THAT(outcome->Status(),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr("server is shutting down")));
  }
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

TEST(SchedulerTest, SubmitAfterShutdownIsUnavailable) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(2, 4));
  ASSERT_NE(scheduler, nullptr);
  scheduler->Shutdown(absl::Now());
  auto outcome = std::make_shared<Outcome>();
  EXPECT_THAT(scheduler->Submit(RecordingTask(outcome)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("server is shutting down")));
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_EQ(outcome->Rejects(), 0);
}

TEST(SchedulerTest, ShutdownIsIdempotent) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(2, 4));
  ASSERT_NE(scheduler, nullptr);
  auto outcome = std::make_shared<Outcome>();
  ASSERT_TRUE(scheduler->Submit(RecordingTask(outcome)).ok());
  scheduler->Shutdown(absl::InfiniteFuture());
  scheduler->Shutdown(absl::InfiniteFuture());
  scheduler->Shutdown(absl::Now());
  EXPECT_EQ(outcome->Runs(), 1);
  scheduler.reset();
}

TEST(SchedulerTest, SubmitRejectsATaskWithoutCallbacks) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  ASSERT_NE(scheduler, nullptr);
  Task no_reject;
  no_reject.run = [](AttentionEngine&, absl::Duration) {};
  EXPECT_THAT(scheduler->Submit(std::move(no_reject)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("run and reject must both be set")));
}

TEST(SchedulerTest, EveryAcceptedTaskGetsExactlyOneCallbackUnderConcurrency) {
  constexpr int kSubmitters = 4;
  constexpr int kPerSubmitter = 500;
  constexpr int kTasks = kSubmitters * kPerSubmitter;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(2, 8));
  ASSERT_NE(scheduler, nullptr);

  std::vector<std::atomic<int>> runs(kTasks);
  std::vector<std::atomic<int>> rejects(kTasks);
  std::vector<char> accepted(kTasks, 0);
  std::vector<std::thread> submitters;
  for (int s = 0; s < kSubmitters; ++s) {
    submitters.emplace_back([&, s] {
      for (int i = 0; i < kPerSubmitter; ++i) {
        const int id = s * kPerSubmitter + i;
        Task task;
        task.run = [&runs, id](AttentionEngine&, absl::Duration) {
          ++runs[id];
        };
        task.reject = [&rejects, id](absl::Status) { ++rejects[id]; };
        // Mix in the two dequeue-time rejections.
        if (id % 7 == 0) task.deadline = absl::InfinitePast();
        if (id % 11 == 0) task.is_cancelled = [] { return true; };
        absl::Status status = scheduler->Submit(std::move(task));
        if (status.ok()) {
          accepted[id] = 1;
        } else {
          EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted)
              << status;
        }
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  // Whatever is still queued now is rejected UNAVAILABLE; that is a callback
  // too.
  scheduler->Shutdown(absl::Now());

  int accepted_count = 0;
  for (int id = 0; id < kTasks; ++id) {
    accepted_count += accepted[id];
    if (accepted[id]) {
      EXPECT_EQ(runs[id] + rejects[id], 1) << "task " << id;
      if (id % 7 == 0 || id % 11 == 0) {
        EXPECT_EQ(runs[id], 0) << "task " << id;
      }
    } else {
      EXPECT_EQ(runs[id] + rejects[id], 0) << "task " << id;
    }
  }
  EXPECT_GT(accepted_count, 0);
}

// Reads one sample of the registry: the child of `name` whose labels include
// `labels`.
std::optional<double> Sample(
    prometheus::Registry& registry, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& labels) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      bool match = true;
      for (const auto& [key, value] : labels) {
        bool found = false;
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          found |= label.name == key && label.value == value;
        }
        match &= found;
      }
      if (!match) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

TEST(SchedulerTest, ReportsQueueDepthAndRejectionsToMetrics) {
  Metrics metrics(BuildInfo{"test", "0", "avx2"});
  prometheus::Registry& registry = metrics.registry();
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 2), &metrics);
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();

  auto expired = std::make_shared<Outcome>();
  Task expired_task = RecordingTask(expired);
  expired_task.deadline = absl::InfinitePast();
  auto cancelled = std::make_shared<Outcome>();
  Task cancelled_task = RecordingTask(cancelled);
  cancelled_task.is_cancelled = [] { return true; };
  ASSERT_TRUE(scheduler->Submit(std::move(expired_task)).ok());
  ASSERT_TRUE(scheduler->Submit(std::move(cancelled_task)).ok());
  EXPECT_THAT(Sample(registry, "attnserve_queue_depth", {}), Optional(2.0));
  EXPECT_FALSE(
      scheduler->Submit(RecordingTask(std::make_shared<Outcome>())).ok());
  EXPECT_THAT(
      Sample(registry, "attnserve_rejected_total", {{"reason", "queue_full"}}),
      Optional(1.0));

  blocker.Release();
  expired->done.WaitForNotification();
  cancelled->done.WaitForNotification();
  auto ran = std::make_shared<Outcome>();
  ASSERT_TRUE(scheduler->Submit(RecordingTask(ran)).ok());
  ran->done.WaitForNotification();
  scheduler->Shutdown(absl::InfiniteFuture());

  EXPECT_THAT(
      Sample(registry, "attnserve_rejected_total", {{"reason", "deadline"}}),
      Optional(1.0));
  EXPECT_THAT(
      Sample(registry, "attnserve_rejected_total", {{"reason", "cancelled"}}),
      Optional(1.0));
  EXPECT_THAT(
      Sample(registry, "attnserve_rejected_total", {{"reason", "shutdown"}}),
      Optional(0.0));
  // The blocker and `ran` were computed; the two rejected tasks were not.
  EXPECT_THAT(Sample(registry, "attnserve_queue_duration_seconds", {}),
              Optional(2.0));
  EXPECT_THAT(Sample(registry, "attnserve_queue_depth", {}), Optional(0.0));
}

TEST(SchedulerTest, ShutdownRejectionsAreCountedInMetrics) {
  Metrics metrics(BuildInfo{"test", "0", "avx2"});
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4), &metrics);
  ASSERT_NE(scheduler, nullptr);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto left = std::make_shared<Outcome>();
  ASSERT_TRUE(scheduler->Submit(RecordingTask(left)).ok());
  std::thread shutdown([&] { scheduler->Shutdown(absl::Now()); });
  left->done.WaitForNotification();
  blocker.Release();
  shutdown.join();
  EXPECT_THAT(Sample(metrics.registry(), "attnserve_rejected_total",
                     {{"reason", "shutdown"}}),
              Optional(1.0));
}

TEST(SchedulerTest, CreateRejectsBadBatchingOptions) {
  SchedulerOptions options = Options(1, 4);
  options.batch_max_size = 0;
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch_max_size: must be >= 1 (1 = no "
                                 "batching), got 0")));
  options = Options(1, 4);
  options.batch_max_delay = absl::Microseconds(-1);
  EXPECT_THAT(Scheduler::Create(options, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch_max_delay: must be >= 0, got -1us")));
}

TEST(SchedulerTest, SubmitRejectsABatchKeyWithoutItsRunner) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  Task task = RecordingTask(std::make_shared<Outcome>());
  task.batch_key = "k";
  EXPECT_THAT(
      scheduler->Submit(std::move(task)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("a batch_key needs run_batch and batch_part")));
}

// Where a task ran.
Task ThreadRecordingTask(std::shared_ptr<Outcome> outcome,
                         std::shared_ptr<std::thread::id> ran_on) {
  Task task = RecordingTask(outcome);
  task.run = [outcome, ran_on](AttentionEngine&, absl::Duration) {
    *ran_on = std::this_thread::get_id();
    {
      absl::MutexLock lock(&outcome->mu);
      ++outcome->runs;
    }
    outcome->done.Notify();
  };
  return task;
}

TEST(SchedulerTest, SmallTaskRunsInlineWhenAWorkerIsFree) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  auto outcome = std::make_shared<Outcome>();
  auto ran_on = std::make_shared<std::thread::id>();
  Task task = ThreadRecordingTask(outcome, ran_on);
  task.small = true;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  // Inline: done before Submit returned, on this thread.
  EXPECT_TRUE(outcome->done.HasBeenNotified());
  EXPECT_EQ(*ran_on, std::this_thread::get_id());
  EXPECT_EQ(outcome->Runs(), 1);
}

TEST(SchedulerTest, SmallTaskGoesToTheQueueWhenInlineIsOff) {
  SchedulerOptions options = Options(1, 4);
  options.run_small_inline = false;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  auto outcome = std::make_shared<Outcome>();
  auto ran_on = std::make_shared<std::thread::id>();
  Task task = ThreadRecordingTask(outcome, ran_on);
  task.small = true;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  outcome->done.WaitForNotification();
  EXPECT_NE(*ran_on, std::this_thread::get_id());
}

TEST(SchedulerTest, SmallTaskRunsInlineBesideABusyWorker) {
  // The worker computes; nothing is queued: a small task runs inline at
  // once, in an inline slot, rather than waiting for the worker.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto outcome = std::make_shared<Outcome>();
  auto ran_on = std::make_shared<std::thread::id>();
  Task task = ThreadRecordingTask(outcome, ran_on);
  task.small = true;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  EXPECT_TRUE(outcome->done.HasBeenNotified());
  EXPECT_EQ(*ran_on, std::this_thread::get_id());
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

TEST(SchedulerTest, SmallTaskDoesNotJumpTheQueue) {
  // A task is queued (the worker is busy): a small one submitted after it
  // queues behind it rather than running first.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  std::vector<int> order;
  absl::Mutex order_mu;
  auto make = [&](int id, bool small, absl::Notification* done) {
    Task task;
    task.small = small;
    task.run = [&, id, done](AttentionEngine&, absl::Duration) {
      {
        absl::MutexLock lock(&order_mu);
        order.push_back(id);
      }
      done->Notify();
    };
    task.reject = [done](absl::Status) { done->Notify(); };
    return task;
  };
  absl::Notification first, second;
  ASSERT_TRUE(scheduler->Submit(make(1, false, &first)).ok());
  ASSERT_TRUE(scheduler->Submit(make(2, true, &second)).ok());
  blocker.Release();
  first.WaitForNotification();
  second.WaitForNotification();
  absl::MutexLock lock(&order_mu);
  EXPECT_THAT(order, ElementsAre(1, 2));
}

// A small task running inline on a thread of its own (its submitter),
// blocked until Finish.
class InlineRun {
 public:
  explicit InlineRun(Scheduler* scheduler) {
    Task task = blocker_.MakeTask();
    task.small = true;
    submitter_ = std::thread([scheduler, task = std::move(task)]() mutable {
      ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
    });
    blocker_.WaitUntilRunning();
  }
  ~InlineRun() { Finish(); }
  // Lets the task end and waits for its submitter.
  void Finish() {
    blocker_.Release();
    if (submitter_.joinable()) submitter_.join();
  }

 private:
  Blocker blocker_;
  std::thread submitter_;
};

TEST(SchedulerTest, InlineRunLeavesTheWorkerFree) {
  // One worker: a small task running inline does not hold the worker's
  // place, so a queued task runs on the worker meanwhile.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  InlineRun inline_run(scheduler.get());
  auto queued = std::make_shared<Outcome>();
  ASSERT_TRUE(scheduler->Submit(RecordingTask(queued)).ok());
  EXPECT_TRUE(queued->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(queued->Runs(), 1);
  inline_run.Finish();
}

TEST(SchedulerTest, InlineRunsAreBoundedByTheWorkersThreads) {
  // One worker of one thread: one inline slot. While it is taken, a second
  // small task is queued and runs on the worker, not on its submitter.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  InlineRun inline_run(scheduler.get());
  auto outcome = std::make_shared<Outcome>();
  auto ran_on = std::make_shared<std::thread::id>();
  Task second = ThreadRecordingTask(outcome, ran_on);
  second.small = true;
  ASSERT_TRUE(scheduler->Submit(std::move(second)).ok());
  EXPECT_TRUE(outcome->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_NE(*ran_on, std::this_thread::get_id());
  inline_run.Finish();
}

TEST(SchedulerTest, AfterSlotRunsOnceTheInlineSlotIsFree) {
  // One inline slot. The first task's after_slot, on its submitter's thread,
  // lets a second small task be submitted and waits for it: the second runs
  // inline on its own submitter only if the first's slot is free by then.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  absl::Notification in_after_slot, second_done;
  std::thread::id first_submitter_id, first_after_on;
  Task first;
  first.small = true;
  first.run = [](AttentionEngine&, absl::Duration) {};
  first.after_slot = [&] {
    first_after_on = std::this_thread::get_id();
    in_after_slot.Notify();
    EXPECT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  };
  first.reject = [](absl::Status) {};
  std::thread first_submitter([&] {
    first_submitter_id = std::this_thread::get_id();
    ASSERT_TRUE(scheduler->Submit(std::move(first)).ok());
  });
  in_after_slot.WaitForNotification();
  auto outcome = std::make_shared<Outcome>();
  auto ran_on = std::make_shared<std::thread::id>();
  Task second = ThreadRecordingTask(outcome, ran_on);
  second.small = true;
  ASSERT_TRUE(scheduler->Submit(std::move(second)).ok());
  // Inline: done before Submit returned, on this thread.
  EXPECT_TRUE(outcome->done.HasBeenNotified());
  EXPECT_EQ(*ran_on, std::this_thread::get_id());
  second_done.Notify();
  first_submitter.join();
  EXPECT_EQ(first_after_on, first_submitter_id);
}

TEST(SchedulerTest, WithdrawRejectsAQueuedTaskAtOnce) {
  Metrics metrics(BuildInfo{"test", "0", "avx2"});
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4), &metrics);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  auto ticket = std::make_shared<QueueTicket>();
  task.ticket = ticket;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  EXPECT_EQ(scheduler->queue_depth(), 1);
  // Rejected on this thread, while the worker is still busy.
  EXPECT_TRUE(scheduler->Withdraw(*ticket));
  EXPECT_TRUE(outcome->done.HasBeenNotified());
  EXPECT_THAT(outcome->Status(),
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("cancelled while queued; not computed")));
  EXPECT_EQ(scheduler->queue_depth(), 0);
  EXPECT_FALSE(scheduler->Withdraw(*ticket));  // once only
  blocker.Release();
  scheduler->Shutdown(absl::InfiniteFuture());
  EXPECT_EQ(outcome->Runs(), 0);
  EXPECT_THAT(Sample(metrics.registry(), "attnserve_rejected_total",
                     {{"reason", "cancelled"}}),
              Optional(1.0));
}

TEST(SchedulerTest, WithdrawAtTheDeadlineIsTheDeadlines) {
  // gRPC cancels a call at its deadline: a withdrawal then says so.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  auto outcome = std::make_shared<Outcome>();
  Task task = RecordingTask(outcome);
  task.deadline = absl::Now();
  auto ticket = std::make_shared<QueueTicket>();
  task.ticket = ticket;
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  EXPECT_TRUE(scheduler->Withdraw(*ticket));
  EXPECT_THAT(outcome->Status(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                          HasSubstr("in queue; not computed")));
  blocker.Release();
}

TEST(SchedulerTest, WithdrawLeavesRunningAndUnqueuedTasksAlone) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  // Never submitted.
  EXPECT_FALSE(scheduler->Withdraw(QueueTicket()));
  // Taken by the worker: it runs to its end.
  Blocker blocker;
  Task running = blocker.MakeTask();
  auto ticket = std::make_shared<QueueTicket>();
  running.ticket = ticket;
  ASSERT_TRUE(scheduler->Submit(std::move(running)).ok());
  blocker.WaitUntilRunning();
  EXPECT_FALSE(scheduler->Withdraw(*ticket));
  blocker.Release();
  scheduler->Shutdown(absl::InfiniteFuture());
}

TEST(SchedulerTest, ShutdownWaitsForInlineRuns) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 4));
  InlineRun inline_run(scheduler.get());
  absl::Notification shut;
  std::thread shutdown([&] {
    scheduler->Shutdown(absl::InfiniteFuture());
    shut.Notify();
  });
  EXPECT_FALSE(shut.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  inline_run.Finish();
  shutdown.join();
  EXPECT_TRUE(shut.HasBeenNotified());
}

// A batch part that names its task.
struct NamedPart final : BatchPart {
  explicit NamedPart(std::string n) : name(std::move(n)) {}
  std::string name;
};

// Records every run: a batch as its members' names, a task alone as its own.
class RunLog {
 public:
  Task Make(const std::string& name, const std::string& key) {
    Task task;
    task.batch_key = key;
    task.batch_part = std::make_unique<NamedPart>(name);
    task.run = [this, name](AttentionEngine&, absl::Duration) { Add({name}); };
    task.run_batch = [this](AttentionEngine&,
                            const std::vector<BatchMember>& members) {
      std::vector<std::string> names;
      for (const BatchMember& m : members) {
        names.push_back(static_cast<NamedPart*>(m.part)->name);
      }
      Add(names);
    };
    task.reject = [this, name](absl::Status status) {
      absl::MutexLock lock(&mu_);
      rejected_.push_back(absl::StrCat(name, ": ", status.message()));
      ++finished_;
    };
    return task;
  }
  void WaitFor(int tasks) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::pair<int*, int>* p) { return *p->first >= p->second; },
        new_pair(tasks)));
  }
  std::vector<std::vector<std::string>> runs() {
    absl::MutexLock lock(&mu_);
    return runs_;
  }
  std::vector<std::string> rejected() {
    absl::MutexLock lock(&mu_);
    return rejected_;
  }

 private:
  std::pair<int*, int>* new_pair(int tasks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pair_ = {&finished_, tasks};
    return &pair_;
  }
  void Add(std::vector<std::string> names) {
    absl::MutexLock lock(&mu_);
    finished_ += static_cast<int>(names.size());
    runs_.push_back(std::move(names));
  }
  absl::Mutex mu_;
  std::vector<std::vector<std::string>> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> rejected_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  std::pair<int*, int> pair_;
};

using ::testing::IsEmpty;
using Runs = std::vector<std::vector<std::string>>;

TEST(SchedulerTest, BatchTakesQueuedCompatibleTasksInOrderUpToTheCap) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 3;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  RunLog log;
  for (const auto& [name, key] :
       std::vector<std::pair<std::string, std::string>>{{"a1", "a"},
                                                        {"b1", "b"},
                                                        {"a2", "a"},
                                                        {"n1", ""},
                                                        {"a3", "a"},
                                                        {"b2", "b"},
                                                        {"a4", "a"},
                                                        {"n2", ""},
                                                        {"a5", "a"}}) {
    ASSERT_TRUE(scheduler->Submit(log.Make(name, key)).ok());
  }
  blocker.Release();
  log.WaitFor(9);
  // a1 takes a2 and a3 (the cap); b1 takes b2 past n1; tasks without a key
  // run alone; the rest of a follows in order.
  EXPECT_EQ(
      log.runs(),
      (Runs{{"a1", "a2", "a3"}, {"b1", "b2"}, {"n1"}, {"a4", "a5"}, {"n2"}}));
  EXPECT_THAT(log.rejected(), IsEmpty());
}

TEST(SchedulerTest, BatchSizeOneNeverBatches) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(Options(1, 16));
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  RunLog log;
  for (const char* name : {"a1", "a2", "a3"}) {
    ASSERT_TRUE(scheduler->Submit(log.Make(name, "a")).ok());
  }
  blocker.Release();
  log.WaitFor(3);
  EXPECT_EQ(log.runs(), (Runs{{"a1"}, {"a2"}, {"a3"}}));
}

TEST(SchedulerTest, BatchWithoutDelayTakesOnlyWhatIsQueued) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 8;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  RunLog log;
  ASSERT_TRUE(scheduler->Submit(log.Make("a1", "a")).ok());
  log.WaitFor(1);
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  log.WaitFor(2);
  EXPECT_EQ(log.runs(), (Runs{{"a1"}, {"a2"}}));
}

TEST(SchedulerTest, BatchDelayWaitsForCompatibleTasks) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 3;
  options.batch_max_delay = absl::Seconds(30);
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  RunLog log;
  ASSERT_TRUE(scheduler->Submit(log.Make("a1", "a")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(scheduler->Submit(log.Make("b1", "b")).ok());
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_THAT(log.runs(), IsEmpty());
  // The third fills the batch, which runs at once rather than after 30 s.
  ASSERT_TRUE(scheduler->Submit(log.Make("a3", "a")).ok());
  log.WaitFor(3);
  EXPECT_EQ(log.runs()[0], (std::vector<std::string>{"a1", "a2", "a3"}));
  // b1 waits its own delay; shutdown ends it.
  scheduler->Shutdown(absl::InfiniteFuture());
  EXPECT_EQ(log.runs(), (Runs{{"a1", "a2", "a3"}, {"b1"}}));
}

TEST(SchedulerTest, BatchDelayEndsAfterTheDelay) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 4;
  options.batch_max_delay = absl::Milliseconds(30);
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  RunLog log;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(scheduler->Submit(log.Make("a1", "a")).ok());
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  log.WaitFor(2);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_EQ(log.runs(), (Runs{{"a1", "a2"}}));
}

TEST(SchedulerTest, BatchDelayStopsShortOfAMembersDeadline) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 4;
  options.batch_max_delay = absl::Milliseconds(100);
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  RunLog log;
  Task task = log.Make("a1", "a");
  // Less than the delay away: waiting would expire it, so the worker does
  // not wait, and it is computed.
  task.deadline = absl::Now() + absl::Seconds(5) - absl::Milliseconds(4950);
  ASSERT_TRUE(scheduler->Submit(std::move(task)).ok());
  log.WaitFor(1);
  EXPECT_EQ(log.runs(), (Runs{{"a1"}}));
  EXPECT_THAT(log.rejected(), IsEmpty());
}

TEST(SchedulerTest, ExpiredOrCancelledMembersAreRejectedAloneAndTheRestRun) {
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 8;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  RunLog log;
  Task expired = log.Make("a1", "a");
  expired.deadline = absl::InfinitePast();
  Task cancelled = log.Make("a3", "a");
  cancelled.is_cancelled = [] { return true; };
  ASSERT_TRUE(scheduler->Submit(std::move(expired)).ok());
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  ASSERT_TRUE(scheduler->Submit(std::move(cancelled)).ok());
  ASSERT_TRUE(scheduler->Submit(log.Make("a4", "a")).ok());
  blocker.Release();
  log.WaitFor(4);
  EXPECT_EQ(log.runs(), (Runs{{"a2", "a4"}}));
  EXPECT_THAT(log.rejected(),
              ElementsAre(HasSubstr("a1: deadline expired"),
                          "a3: call cancelled while queued; not computed"));
}

TEST(SchedulerTest, BatchedTasksCountAgainstTheQueueUntilFinished) {
  // max_queue 2 + 1 worker: three tasks admitted in all, batched or not.
  SchedulerOptions options = Options(1, 2);
  options.batch_max_size = 8;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  RunLog log;
  ASSERT_TRUE(scheduler->Submit(log.Make("a1", "a")).ok());
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  EXPECT_THAT(scheduler->Submit(log.Make("a3", "a")),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("queue is full (max_queue = 2)")));
  blocker.Release();
  log.WaitFor(2);
  EXPECT_EQ(log.runs(), (Runs{{"a1", "a2"}}));
}

TEST(SchedulerTest, TasksWaitingInABatchCountAgainstTheQueue) {
  // max_queue 1 + 1 worker: two tasks admitted, even while the worker holds
  // both in a batch that waits for more.
  SchedulerOptions options = Options(1, 1);
  options.batch_max_size = 8;
  options.batch_max_delay = absl::Seconds(30);
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options);
  RunLog log;
  ASSERT_TRUE(scheduler->Submit(log.Make("a1", "a")).ok());
  while (scheduler->queue_depth() != 0) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(scheduler->Submit(log.Make("a2", "a")).ok());
  while (scheduler->queue_depth() != 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_THAT(scheduler->Submit(log.Make("a3", "a")),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("queue is full (max_queue = 1)")));
  scheduler->Shutdown(absl::InfiniteFuture());
  EXPECT_EQ(log.runs(), (Runs{{"a1", "a2"}}));
}

TEST(SchedulerTest, BatchSizesGoToTheHistogram) {
  Metrics metrics(BuildInfo{"test", "0", "avx2"});
  SchedulerOptions options = Options(1, 16);
  options.batch_max_size = 4;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(options, &metrics);
  Blocker blocker;
  ASSERT_TRUE(scheduler->Submit(blocker.MakeTask()).ok());
  blocker.WaitUntilRunning();
  RunLog log;
  for (const char* name : {"a1", "a2", "a3", "b1"}) {
    ASSERT_TRUE(
        scheduler->Submit(log.Make(name, name[0] == 'a' ? "a" : "b")).ok());
  }
  blocker.Release();
  log.WaitFor(4);
  scheduler->Shutdown(absl::InfiniteFuture());
  // Three runs (the blocker, a1-a3, b1) of 1 + 3 + 1 tasks.
  for (const prometheus::MetricFamily& family : metrics.registry().Collect()) {
    if (family.name != "attnserve_batch_size") continue;
    ASSERT_EQ(family.metric.size(), 1u);
    const prometheus::ClientMetric::Histogram& h = family.metric[0].histogram;
    EXPECT_EQ(h.sample_count, 3u);
    EXPECT_DOUBLE_EQ(h.sample_sum, 5.0);
    // Buckets le=1, le=2, le=4: cumulative 2, 2, 3.
    ASSERT_GE(h.bucket.size(), 3u);
    EXPECT_EQ(h.bucket[0].cumulative_count, 2u);
    EXPECT_EQ(h.bucket[1].cumulative_count, 2u);
    EXPECT_EQ(h.bucket[2].cumulative_count, 3u);
    return;
  }
  ADD_FAILURE() << "no attnserve_batch_size";
}

}  // namespace
}  // namespace attnserve::server
