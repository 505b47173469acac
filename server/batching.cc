#include "server/batching.h"

#include <vector>

namespace attnserve::server {

std::string AttendBatchKey(const DecodedRequest& decoded) {
  if (!decoded.shared_memory.empty() || decoded.output_data != nullptr ||
      decoded.weights_data != nullptr) {
    return "";
  }
  // The decode kernel splits the keys by its thread count: its results are
  // not those of a run alone on another number of threads.
  if (decoded.plan.kernel != KernelPath::kFlash &&
      decoded.plan.kernel != KernelPath::kMaterialized) {
    return "";
  }
  return "attend";
}

absl::Status RunAttendBatch(absl::Span<const BatchedAttend> members,
                            AttentionEngine& engine) {
  std::vector<const AttentionPlan*> plans;
  std::vector<AttentionOutputs> outputs;
  plans.reserve(members.size());
  outputs.reserve(members.size());
  for (const BatchedAttend& m : members) {
    plans.push_back(&m.decoded->plan);
    outputs.push_back(PrepareResponse(*m.decoded, m.response));
  }
  return engine.RunBatch(plans, outputs);
}

}  // namespace attnserve::server
