#include "client/hosted_model.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "nlohmann/json.hpp"

namespace attnserve::client {
namespace {

using Json = nlohmann::json;

// The config's JSON object; a discarded value when it does not parse.
Json ParseConfig(const v1::ModelInfo& model) {
  Json config = Json::parse(model.config_json(), nullptr,
                            /*allow_exceptions=*/false);
  if (!config.is_object()) return Json(Json::value_t::discarded);
  return config;
}

// config[key] when it is a string; "" otherwise.
std::string StringKey(const Json& config, const char* key) {
  const auto it = config.find(key);
  return it != config.end() && it->is_string() ? it->get<std::string>()
                                               : std::string();
}

int32_t Int32At(const std::string& data, int64_t i) {
  uint32_t value = 0;
  for (int byte = 0; byte < 4; ++byte) {
    value |= uint32_t{static_cast<unsigned char>(data[i * 4 + byte])}
             << (8 * byte);
  }
  int32_t result;
  std::memcpy(&result, &value, sizeof result);
  return result;
}

}  // namespace

const v1::ModelInfo* FindModelInfo(const v1::ServerInfo& info,
                                   absl::string_view name) {
  for (const v1::ModelInfo& model : info.models()) {
    if (model.name() == name) return &model;
  }
  return nullptr;
}

grpc::Status LookUpModel(const std::shared_ptr<grpc::Channel>& channel,
                         const ConnectionOptions& connection,
                         const std::string& name, v1::ServerInfo* server,
                         v1::ModelInfo* model) {
  auto stub = v1::AttentionService::NewStub(channel);
  {
    grpc::ClientContext context;
    PrepareContext(connection, &context);
    const grpc::Status status =
        stub->GetServerInfo(&context, v1::GetServerInfoRequest(), server);
    if (!status.ok()) return status;
  }
  if (const v1::ModelInfo* found = FindModelInfo(*server, name)) {
    *model = *found;
    return grpc::Status::OK;
  }
  // The server is the one place requests are validated, and its NOT_FOUND
  // names what it hosts (or says it hosts nothing).
  grpc::ClientContext context;
  PrepareContext(connection, &context);
  v1::ModelRequest request;
  request.set_request_id("attnctl-model-lookup");
  request.set_model(name);
  v1::AttendResponse response;
  const grpc::Status status = stub->AttendModel(&context, request, &response);
  if (!status.ok()) return status;
  return grpc::Status(
      grpc::StatusCode::NOT_FOUND,
      absl::StrCat("model: \"", name,
                   "\" is not in the server's GetServerInfo list"));
}

std::string ModelShapeText(const v1::ModelInfo& model) {
  return absl::StrCat("d_model ", model.d_model(), ", heads ",
                      model.num_heads(), "/", model.num_kv_heads(),
                      ", head_dim ", model.head_dim());
}

std::string ModelSummary(const v1::ModelInfo& model) {
  std::string text = ModelShapeText(model);
  const Json config = ParseConfig(model);
  if (config.is_discarded()) return text;
  const std::pair<const char*, const char*> keys[] = {
      {"scoring", ""},
      {"positional", "positional "},
      {"norm", "norm "},
      {"dtype", ""}};
  for (const auto& [key, prefix] : keys) {
    const std::string value = StringKey(config, key);
    if (!value.empty()) absl::StrAppend(&text, ", ", prefix, value);
  }
  return text;
}

std::string PositionsText(const v1::Tensor& positions) {
  const int64_t row = positions.shape_size() == 2 ? positions.shape(1) : 0;
  if (row <= 0 || positions.data().size() < static_cast<size_t>(row) * 4) {
    return "[]";
  }
  return absl::StrCat(Int32At(positions.data(), 0), "..",
                      Int32At(positions.data(), row - 1));
}

std::string ModelRequestText(const v1::ModelRequest& request) {
  std::string text = absl::StrCat(
      request.model(), " ", wire::ShortDataTypeName(request.hidden().dtype()),
      " hidden ", wire::ShapeText(request.hidden()));
  if (request.has_memory()) {
    absl::StrAppend(&text, " memory ", wire::ShapeText(request.memory()));
  }
  if (request.has_positions()) {
    absl::StrAppend(&text, "; positions ", PositionsText(request.positions()));
  }
  absl::StrAppend(&text, "; mask ", MaskText(request.mask()));
  if (request.return_weights()) absl::StrAppend(&text, "; weights");
  return text;
}

int64_t ModelOutputBytes(const v1::ModelInfo& model, int64_t batch,
                         int64_t q_len, v1::DataType output_dtype) {
  return batch * q_len * model.d_model() * wire::ElementSize(output_dtype);
}

}  // namespace attnserve::client
