#include "model/model_repository.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "core/status_macros.h"
#include "model/safetensors.h"

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxNameLength = 128;
// A config is a dozen keys; anything near this is not a config.
constexpr int64_t kMaxConfigBytes = 1 << 20;

bool IsValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '.' || c == '-';
  });
}

absl::Status FromErrorCode(const std::error_code& ec,
                           absl::string_view message) {
  // std::filesystem reports errno values in the system category.
  return absl::ErrnoToStatus(ec.value(), message);
}

// Every failure of one model is InvalidArgument: whatever the file system
// said, the repository is what is wrong.
absl::Status AsInvalidArgument(const absl::Status& status) {
  return absl::InvalidArgumentError(status.message());
}

absl::StatusOr<LoadedModel> LoadModel(const fs::path& folder,
                                      const std::string& name) {
  if (!IsValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        folder.string(), ": bad model name (expected [A-Za-z0-9_.-]+, at most ",
        kMaxNameLength, " characters)"));
  }
  LoadedModel model;
  model.name = name;

  const std::string config_path = (folder / "config.json").string();
  absl::StatusOr<std::string> text =
      base::ReadFile(config_path, kMaxConfigBytes);
  if (!text.ok()) return AsInvalidArgument(text.status());
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*text);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": ", config.status().message()));
  }
  model.config = *std::move(config);

  const std::string weights_path = (folder / "model.safetensors").string();
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(weights_path);
  if (!file.ok()) return AsInvalidArgument(file.status());
  absl::StatusOr<LayerWeights> weights =
      LoadLayerWeights(model.config, *file, weights_path);
  if (!weights.ok()) return AsInvalidArgument(weights.status());
  model.weights = *std::move(weights);
  return model;
}

}  // namespace

absl::StatusOr<RepositoryContents> LoadModelRepository(const std::string& dir,
                                                       bool skip_bad_models) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", dir, " does not exist"));
  }
  if (ec) {
    return FromErrorCode(ec, absl::StrCat("model repository ", dir));
  }
  if (!fs::is_directory(status)) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", dir, " is not a directory"));
  }

  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code entry_ec;
    // Follows symbolic links: a linked model folder is a model folder.
    // Hidden folders (.git, .ipynb_checkpoints, ...) are not models.
    const std::string name = it->path().filename().string();
    if (it->is_directory(entry_ec) && name[0] != '.') names.push_back(name);
  }
  if (ec) {
    return FromErrorCode(ec,
                         absl::StrCat("cannot list model repository ", dir));
  }
  std::sort(names.begin(), names.end());

  RepositoryContents contents;
  for (const std::string& name : names) {
    absl::StatusOr<LoadedModel> model = LoadModel(fs::path(dir) / name, name);
    if (model.ok()) {
      contents.models.push_back(*std::move(model));
    } else if (skip_bad_models) {
      contents.skipped.push_back(
          absl::StrCat(name, ": ", model.status().message()));
    } else {
      return model.status();
    }
  }
  return contents;
}

}  // namespace attnserve::model
