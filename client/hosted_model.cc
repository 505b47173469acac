#include "client/hosted_model.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/wire_names.h"
#include "client/wire_tensor.h"
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
  std::string text =
      absl::StrCat(request.model(), " ", DataTypeName(request.hidden().dtype()),
                   " hidden ", ShapeText(request.hidden()));
  if (request.has_memory()) {
    absl::StrAppend(&text, " memory ", ShapeText(request.memory()));
  }
  if (request.has_positions()) {
    absl::StrAppend(&text, "; positions ", PositionsText(request.positions()));
  }
  absl::StrAppend(&text, "; mask ", MaskText(request.mask()));
  if (request.return_weights()) absl::StrAppend(&text, "; weights");
  return text;
}

double ModelFlops(const v1::ModelInfo& model, int64_t batch, int64_t q_len,
                  int64_t k_len) {
  // model/attention_layer.cc's AttentionLayer::Flops, from ModelInfo.
  const double d_model = double(model.d_model());
  const double head_dim = double(model.head_dim());
  const double q_rows = double(batch) * q_len;
  const double k_rows = double(batch) * k_len;
  const double hq_hd = double(model.num_heads()) * head_dim;
  const double hkv_hd = double(model.num_kv_heads()) * head_dim;
  double flops = 2 * q_rows * d_model * hq_hd     // q
                 + 4 * k_rows * d_model * hkv_hd  // k, v
                 + 2 * q_rows * hq_hd * d_model;  // o
  const double pairs = double(batch) * model.num_heads() * q_len * k_len;
  flops += 4 * pairs * head_dim;  // scores and P·V
  const Json config = ParseConfig(model);
  if (config.is_discarded()) return flops;
  const std::string scoring = StringKey(config, "scoring");
  if (scoring == "general") flops += 2 * q_rows * hq_hd * head_dim;
  const auto a_key = config.find("additive_dim");
  if (scoring == "additive" && a_key != config.end() && a_key->is_number()) {
    const double a = a_key->get<double>();
    flops += 2 * (q_rows + k_rows) * model.num_heads() * head_dim * a;
    flops += 2 * pairs * a;
  }
  return flops;
}

int64_t ModelOutputBytes(const v1::ModelInfo& model, int64_t batch,
                         int64_t q_len, v1::DataType output_dtype) {
  return batch * q_len * model.d_model() * DataTypeSize(output_dtype);
}

}  // namespace attnserve::client
