#ifndef ATTNSERVE_MODEL_MODEL_REPOSITORY_H_
#define ATTNSERVE_MODEL_MODEL_REPOSITORY_H_

// The model repository (--model_repository DIR): one folder per model,
// DIR/<name>/config.json and DIR/<name>/model.safetensors.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace attnserve::model {

struct LoadedModel {
  // The folder's name: [A-Za-z0-9_.-]+, at most 128 characters.
  std::string name;
  ModelConfig config;
  LayerWeights weights;
};

struct RepositoryContents {
  // Sorted by name.
  std::vector<LoadedModel> models;
  // With skip_bad_models: one line per model left out, "<name>: <error>".
  std::vector<std::string> skipped;
};

// Loads every folder of `dir` (files at the top level and hidden folders,
// whose names start with '.', are ignored). NotFound
// when `dir` does not exist or is not a directory. A bad model — a bad name,
// a missing or unreadable config.json or model.safetensors, a config or
// weights that do not validate — fails the whole load with InvalidArgument
// whose message names the file (and the tensor) unless `skip_bad_models`,
// which leaves it out and lists it in `skipped`. An empty repository is not
// an error.
absl::StatusOr<RepositoryContents> LoadModelRepository(const std::string& dir,
                                                       bool skip_bad_models);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_MODEL_REPOSITORY_H_
