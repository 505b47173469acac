#ifndef ATTNSERVE_SERVER_MODEL_REGISTRY_H_
#define ATTNSERVE_SERVER_MODEL_REGISTRY_H_

// The hosted attention layers of a server (--model_repository), packed once
// at start-up and looked up by name per request.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "core/attention.h"
#include "model/attention_layer.h"
#include "model/model_repository.h"

namespace attnserve::server {

struct HostedModel {
  std::string name;
  // Its position in models() (the metrics' label children).
  int index = 0;
  std::unique_ptr<model::AttentionLayer> layer;
};

class ModelRegistry {
 public:
  // Packs every model of `contents` (an empty repository gives an empty
  // registry). Internal when a layer cannot be built.
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Create(
      const model::RepositoryContents& contents);

  // Null when no model has that name.
  const HostedModel* Find(absl::string_view name) const;
  // Sorted by name.
  const std::vector<HostedModel>& models() const { return models_; }
  std::vector<std::string> names() const;
  // "a, b, c", or "none" — for messages.
  std::string NameList() const;
  // Each layer's WarmUp with `engine` on the calling thread: a scheduler
  // worker's warm-up (SchedulerOptions::worker_warm_up), so that its first
  // call of a model costs what its repeats do. Errors name the model.
  absl::Status WarmUp(AttentionEngine& engine) const;
  // Adds one ModelInfo per model to `info`.
  void Describe(v1::ServerInfo* info) const;

 private:
  ModelRegistry() = default;
  std::vector<HostedModel> models_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_MODEL_REGISTRY_H_
