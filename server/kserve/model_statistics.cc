#include "server/kserve/model_statistics.h"

#include <algorithm>

namespace attnserve::server::kserve {
namespace {

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}

void Add(std::atomic<uint64_t>& counter, uint64_t value) {
  counter.fetch_add(value, std::memory_order_relaxed);
}

uint64_t Load(const std::atomic<uint64_t>& counter) {
  return counter.load(std::memory_order_relaxed);
}

void SetDuration(uint64_t count, uint64_t ns,
                 inference::StatisticDuration* out) {
  out->set_count(count);
  out->set_ns(ns);
}

}  // namespace

ModelStatisticsTable::ModelStatisticsTable(int models)
    : models_(models), counters_(new Counters[std::max(models, 1)]) {}

void ModelStatisticsTable::RecordSuccess(int model, absl::Duration total,
                                         absl::Duration queue,
                                         absl::Duration compute,
                                         absl::Time now) {
  if (model < 0 || model >= models_) return;
  Counters& c = counters_[model];
  Add(c.success_count, 1);
  Add(c.success_ns, Nanos(total));
  Add(c.queue_ns, Nanos(queue));
  Add(c.compute_ns, Nanos(compute));
  c.last_inference_ms.store(static_cast<uint64_t>(absl::ToUnixMillis(now)),
                            std::memory_order_relaxed);
}

void ModelStatisticsTable::RecordFailure(int model, absl::Duration total) {
  if (model < 0 || model >= models_) return;
  Counters& c = counters_[model];
  Add(c.fail_count, 1);
  Add(c.fail_ns, Nanos(total));
}

void ModelStatisticsTable::Fill(int model,
                                inference::ModelStatistics* out) const {
  if (model < 0 || model >= models_) return;
  const Counters& c = counters_[model];
  const uint64_t successes = Load(c.success_count);
  out->set_last_inference(Load(c.last_inference_ms));
  out->set_inference_count(successes);
  out->set_execution_count(successes);
  inference::InferStatistics* s = out->mutable_inference_stats();
  SetDuration(successes, Load(c.success_ns), s->mutable_success());
  SetDuration(Load(c.fail_count), Load(c.fail_ns), s->mutable_fail());
  SetDuration(successes, Load(c.queue_ns), s->mutable_queue());
  // Inputs are read in place and outputs written in place: the kernel's time
  // is compute_infer; input and output preparation take no time of their own.
  SetDuration(successes, 0, s->mutable_compute_input());
  SetDuration(successes, Load(c.compute_ns), s->mutable_compute_infer());
  SetDuration(successes, 0, s->mutable_compute_output());
}

}  // namespace attnserve::server::kserve
