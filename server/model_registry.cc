#include "server/model_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/model_config.h"

namespace attnserve::server {

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Create(
    const model::RepositoryContents& contents) {
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry);
  for (const model::LoadedModel& loaded : contents.models) {
    absl::StatusOr<std::unique_ptr<model::AttentionLayer>> layer =
        model::AttentionLayer::Create(loaded.config, loaded.weights);
    if (!layer.ok()) {
      return absl::Status(
          layer.status().code(),
          absl::StrCat("model ", loaded.name, ": ", layer.status().message()));
    }
    HostedModel hosted;
    hosted.name = loaded.name;
    hosted.layer = *std::move(layer);
    registry->models_.push_back(std::move(hosted));
  }
  std::sort(registry->models_.begin(), registry->models_.end(),
            [](const HostedModel& a, const HostedModel& b) {
              return a.name < b.name;
            });
  for (size_t i = 0; i < registry->models_.size(); ++i) {
    registry->models_[i].index = static_cast<int>(i);
  }
  return registry;
}

const HostedModel* ModelRegistry::Find(absl::string_view name) const {
  auto it = std::lower_bound(
      models_.begin(), models_.end(), name,
      [](const HostedModel& m, absl::string_view n) { return m.name < n; });
  return it != models_.end() && it->name == name ? &*it : nullptr;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> names;
  for (const HostedModel& m : models_) names.push_back(m.name);
  return names;
}

std::string ModelRegistry::NameList() const {
  return models_.empty() ? std::string("none") : absl::StrJoin(names(), ", ");
}

absl::Status ModelRegistry::WarmUp(AttentionEngine& engine) const {
  for (const HostedModel& m : models_) {
    const absl::Status status = m.layer->WarmUp(engine);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("model ", m.name, ": ",
                                                      status.message()));
    }
  }
  return absl::OkStatus();
}

void ModelRegistry::Describe(v1::ServerInfo* info) const {
  for (const HostedModel& m : models_) {
    const model::ModelConfig& c = m.layer->config();
    v1::ModelInfo* model = info->add_models();
    model->set_name(m.name);
    model->set_config_json(model::ModelConfigToJson(c));
    model->set_d_model(c.d_model);
    model->set_num_heads(static_cast<int32_t>(c.num_heads));
    model->set_num_kv_heads(static_cast<int32_t>(c.num_kv_heads));
    model->set_head_dim(static_cast<int32_t>(c.head_dim));
  }
}

}  // namespace attnserve::server
