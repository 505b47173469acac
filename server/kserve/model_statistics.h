#ifndef ATTNSERVE_SERVER_KSERVE_MODEL_STATISTICS_H_
#define ATTNSERVE_SERVER_KSERVE_MODEL_STATISTICS_H_

// The cumulative per-model figures of Triton's "statistics" extension
// (ModelStatistics), for the ModelInfer calls of each v2 model. Lock-free
// counters: recording is a few relaxed atomic adds per call.

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "inference/grpc_predict_v2.pb.h"

namespace attnserve::server::kserve {

class ModelStatisticsTable {
 public:
  // Models are addressed by index in [0, models).
  explicit ModelStatisticsTable(int models);
  ModelStatisticsTable(const ModelStatisticsTable&) = delete;
  ModelStatisticsTable& operator=(const ModelStatisticsTable&) = delete;

  // A computed call: `total` from receipt to answer, `queue` until compute
  // began, `compute` the kernel (or layer). Counts one inference and one
  // execution (attnserve batches no requests). Thread-safe.
  void RecordSuccess(int model, absl::Duration total, absl::Duration queue,
                     absl::Duration compute, absl::Time now);
  // A call of a known model that failed. Thread-safe.
  void RecordFailure(int model, absl::Duration total);

  // Sets the counts and durations of `model` in `out` (name and version are
  // the caller's).
  void Fill(int model, inference::ModelStatistics* out) const;

 private:
  struct Counters {
    std::atomic<uint64_t> success_count{0}, success_ns{0};
    std::atomic<uint64_t> fail_count{0}, fail_ns{0};
    std::atomic<uint64_t> queue_ns{0}, compute_ns{0};
    std::atomic<uint64_t> last_inference_ms{0};
  };
  const int models_;
  const std::unique_ptr<Counters[]> counters_;
};

}  // namespace attnserve::server::kserve

#endif  // ATTNSERVE_SERVER_KSERVE_MODEL_STATISTICS_H_
