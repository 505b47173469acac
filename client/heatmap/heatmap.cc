#include "client/heatmap/heatmap.h"

#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/rpc_status.h"
#include "client/tensors/input_files.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "core/block_sparse.h"
#include "wire/attend.h"
#include "wire/attend_call.h"

namespace attnserve::client {
namespace {

ExitCode Fail(std::ostream& err, const absl::Status& status, ExitCode code) {
  err << "error: " << status.message() << "\n";
  return code;
}

ExitCode Usage(std::ostream& err, absl::string_view message) {
  err << "error: " << message << "\n(attnctl heatmap --help lists its flags)\n";
  return kExitUsage;
}

// The dimensions that decide what is drawn.
struct Dims {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t q_len = 0;
  int64_t k_len = 0;
};

// Batch, heads and length of a 4-D query or key in `layout`; InvalidArgument
// naming `path` otherwise.
absl::Status InputDims(const v1::Tensor& tensor, v1::Layout layout,
                       absl::string_view role, const std::string& path,
                       int64_t* batch, int64_t* heads, int64_t* length) {
  if (tensor.shape_size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the ", role, " must be 4-D (",
        layout == v1::BLHD ? "[B, L, H, D]" : "[B, H, L, D]", " in layout ",
        LayoutName(layout), "); it is ", wire::ShapeText(tensor)));
  }
  const bool blhd = layout == v1::BLHD;
  *batch = tensor.shape(0);
  *heads = tensor.shape(blhd ? 2 : 1);
  *length = tensor.shape(blhd ? 1 : 2);
  return absl::OkStatus();
}

// A zero value for `key`: its shape with Dv = 1 (D is last in both
// layouts), its dtype (all-zero bytes are 0 in f32, f16 and bf16).
v1::Tensor ZeroValue(const v1::Tensor& key) {
  v1::Tensor value;
  value.set_dtype(key.dtype());
  *value.mutable_shape() = key.shape();
  value.set_shape(3, 1);
  value.mutable_data()->assign(static_cast<size_t>(wire::NumElements(value)) *
                                   wire::ElementSize(key.dtype()),
                               '\0');
  return value;
}

// "1 key", "7 keys".
std::string Count(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// Everything that makes the heatmap unusable before the call is sent.
absl::Status CheckDims(const HeatmapOptions& options, const Dims& dims) {
  for (const auto& [name, what, length] :
       {std::tuple<const char*, const char*, int64_t>{"Lq", "queries",
                                                      dims.q_len},
        {"Lk", "keys", dims.k_len}}) {
    if (length > kMaxHeatmapLength) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " = ", length, " ", what,
          " is too many for a heatmap (at most ", kMaxHeatmapLength,
          "): use a shorter --lq/--lk or a smaller input"));
    }
    if (length < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " = ", length,
                       ": a heatmap needs at least one row and column"));
    }
  }
  if (dims.heads < 1 || dims.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "B = ", dims.batch, ", Hq = ", dims.heads,
        ": a heatmap needs at least one batch element and one head"));
  }
  if (options.batch_index >= dims.batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_index=", options.batch_index,
        " but the batch has B = ", dims.batch,
        dims.batch == 1
            ? " element (index 0)"
            : absl::StrCat(" elements (0 to ", dims.batch - 1, ")")));
  }
  if (options.head) {
    if (*options.head >= dims.heads) {
      return absl::InvalidArgumentError(
          absl::StrCat("--head=", *options.head, " but there are Hq = ",
                       Count(dims.heads, "query head", "query heads"),
                       " (0 to ", dims.heads - 1, ")"));
    }
  } else if (dims.heads > kMaxHeatmapPanels) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hq = ", dims.heads,
                     " heads make more panels than a heatmap shows (at "
                     "most ",
                     kMaxHeatmapPanels, "): pick one with --head=N"));
  }
  if (!options.key_tokens.empty() &&
      static_cast<int64_t>(options.key_tokens.size()) != dims.k_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokens has ", Count(options.key_tokens.size(), "token", "tokens"),
        " but there are Lk = ", Count(dims.k_len, "key", "keys"),
        ": give one token per key"));
  }
  if (!options.query_tokens.empty() &&
      static_cast<int64_t>(options.query_tokens.size()) != dims.q_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--query_tokens has ",
        Count(options.query_tokens.size(), "token", "tokens"),
        " but there are Lq = ", Count(dims.q_len, "query", "queries"),
        ": give one token per query"));
  }
  if (options.text && dims.k_len > kMaxTextKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ascii draws at most ", kMaxTextKeys,
                     " keys across a terminal; Lk = ", dims.k_len,
                     " (--png draws up to ", kMaxHeatmapLength, ")"));
  }
  if (options.text && dims.q_len > kMaxTextQueries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ascii draws at most ", kMaxTextQueries, " query rows; Lq = ",
        dims.q_len, " (--png draws up to ", kMaxHeatmapLength, ")"));
  }
  return absl::OkStatus();
}

// Whether the server's `name` tensor is f32 of `shape` with its bytes;
// prints the error when it is not.
bool IsF32OfShape(absl::string_view name, const v1::Tensor& tensor,
                  const std::string& shape, std::ostream& err) {
  if (tensor.dtype() == v1::FLOAT32 && wire::ShapeText(tensor) == shape &&
      static_cast<int64_t>(tensor.data().size()) ==
          wire::NumElements(tensor) * 4) {
    return true;
  }
  err << "error: the server's " << name << ": "
      << wire::ShortDataTypeName(tensor.dtype()) << " "
      << wire::ShapeText(tensor) << " with " << tensor.data().size()
      << " bytes; expected f32 " << shape << "\n";
  return false;
}

int64_t CountKept(const BlockLayout& layout) {
  int64_t kept = 0;
  for (int64_t qb = 0; qb < layout.q_blocks(); ++qb) {
    for (int64_t kb = 0; kb < layout.k_blocks(); ++kb) {
      kept += layout.Kept(qb, kb) ? 1 : 0;
    }
  }
  return kept;
}

}  // namespace

std::vector<std::string> SplitTokens(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"),
                        absl::SkipEmpty());
}

Heatmap HeatmapFromWeights(const v1::Tensor& weights, int64_t batch_index,
                           std::optional<int64_t> head,
                           const v1::Tensor* entropy) {
  Heatmap heatmap;
  const int64_t heads = weights.shape(1);
  heatmap.q_len = static_cast<int>(weights.shape(2));
  heatmap.k_len = static_cast<int>(weights.shape(3));
  const size_t panel_size = static_cast<size_t>(heatmap.q_len) * heatmap.k_len;
  const int64_t first = head.value_or(0);
  const int64_t last = head ? *head + 1 : heads;
  for (int64_t h = first; h < last; ++h) {
    HeatmapPanel panel;
    panel.title = absl::StrCat("head ", h);
    panel.weights.resize(panel_size);
    const size_t offset = (static_cast<size_t>(batch_index) * heads + h) *
                          panel_size * sizeof(float);
    std::memcpy(panel.weights.data(), weights.data().data() + offset,
                panel_size * sizeof(float));
    if (entropy != nullptr) {
      panel.entropy.resize(static_cast<size_t>(heatmap.q_len));
      std::memcpy(panel.entropy.data(),
                  entropy->data().data() +
                      (static_cast<size_t>(batch_index) * heads + h) *
                          heatmap.q_len * sizeof(float),
                  heatmap.q_len * sizeof(float));
      double sum = 0;
      for (float e : panel.entropy) sum += e;
      absl::StrAppend(
          &panel.title, ", entropy ",
          absl::StrFormat("%.2f",
                          heatmap.q_len > 0 ? sum / heatmap.q_len : 0.0));
    }
    heatmap.panels.push_back(std::move(panel));
  }
  return heatmap;
}

absl::StatusOr<HeatmapPanel> LayoutPanel(const v1::AttendRequest& request,
                                         int64_t q_len, int64_t k_len,
                                         float on) {
  absl::StatusOr<MaskSpec> mask = wire::DecodeMask(request.mask());
  if (!mask.ok()) return mask.status();
  if (!mask->block_sparse) {
    return absl::InvalidArgumentError("the request has no block-sparse layout");
  }
  const int64_t offset =
      mask->alignment == CausalAlignment::kBottomRight ? k_len - q_len : 0;
  absl::StatusOr<std::shared_ptr<const BlockLayout>> layout =
      BlockLayout::Build(*mask->block_sparse, q_len, k_len, offset);
  if (!layout.ok()) return layout.status();
  HeatmapPanel panel;
  panel.title =
      absl::StrFormat("block layout (%d of %d blocks)", CountKept(**layout),
                      (*layout)->q_blocks() * (*layout)->k_blocks());
  panel.weights.resize(static_cast<size_t>(q_len * k_len));
  for (int64_t i = 0; i < q_len; ++i) {
    for (int64_t j = 0; j < k_len; ++j) {
      panel.weights[i * k_len + j] = (*layout)->Allowed(i, j) ? on : 0.0f;
    }
  }
  return panel;
}

ExitCode RunHeatmap(const HeatmapOptions& options, std::ostream& out,
                    std::ostream& err) {
  if (options.png_file.empty() && !options.text) {
    return Usage(err, "nothing to draw: give --png=FILE, --ascii, or both");
  }
  if (options.vmax && !(*options.vmax > 0 && std::isfinite(*options.vmax))) {
    return Usage(err, absl::StrCat("--vmax must be a positive number; got ",
                                   *options.vmax));
  }
  for (const auto& [flag, tokens] :
       {std::pair<const char*, const std::vector<std::string>*>{
            "tokens", &options.key_tokens},
        {"query_tokens", &options.query_tokens}}) {
    if (static_cast<int64_t>(tokens->size()) > kMaxHeatmapTokens) {
      return Usage(err, absl::StrCat("--", flag, " has ", tokens->size(),
                                     " tokens; at most ", kMaxHeatmapTokens,
                                     " can be labelled"));
    }
  }
  CallOptions call = options.spec.call;
  call.return_weights = true;
  call.return_weight_stats = true;

  v1::AttendRequest request;
  request.set_request_id(options.request_id);
  Dims dims;
  const bool files = !options.files.query.empty() || !options.files.key.empty();
  if (files) {
    if (options.files.query.empty() || options.files.key.empty()) {
      return Usage(err,
                   "--q and --k go together (--v is optional): give both "
                   "files, or neither for random inputs");
    }
    const std::tuple<const std::string*, const char*, v1::Tensor*> inputs[] = {
        {&options.files.query, "query", request.mutable_query()},
        {&options.files.key, "key", request.mutable_key()},
        {&options.files.value, "value", request.mutable_value()}};
    for (const auto& [path, role, tensor] : inputs) {
      if (path->empty()) continue;
      const absl::Status status =
          LoadInputFile(*path, role, options.files.dtype, tensor);
      if (!status.ok()) return Fail(err, status, kExitFileError);
    }
    absl::Status status =
        InputDims(request.query(), call.layout, "query", options.files.query,
                  &dims.batch, &dims.heads, &dims.q_len);
    if (status.ok()) {
      int64_t batch;
      status = InputDims(request.key(), call.layout, "key", options.files.key,
                         &batch, &dims.kv_heads, &dims.k_len);
    }
    if (!status.ok()) return Fail(err, status, kExitFileError);
    if (options.files.value.empty()) {
      *request.mutable_value() = ZeroValue(request.key());
    }
  } else {
    if (!options.files.value.empty()) {
      return Usage(err, "--v needs --q and --k");
    }
    const absl::Status status = ValidateRandomInputs(
        options.spec.random, options.connection.max_message_bytes);
    if (!status.ok()) return Usage(err, status.message());
    const RandomInputs random = ResolveDefaults(options.spec.random);
    dims = {random.batch, random.heads, random.kv_heads, random.q_len,
            random.k_len};
  }
  absl::Status status = CheckDims(options, dims);
  if (!status.ok()) return Usage(err, status.message());
  if (!files) FillRandomInputs(options.spec.random, call.layout, &request);
  if (!options.files.mask.empty()) {
    status = LoadMaskFile(options.files.mask,
                          request.mutable_mask()->mutable_explicit_mask());
    if (!status.ok()) return Fail(err, status, kExitFileError);
  }
  ApplyCallOptions(call, &request);

  auto channels = CreateChannels(options.connection);
  if (!channels.ok()) return Fail(err, channels.status(), kExitFileError);
  auto stub = v1::AttentionService::NewStub(channels->front());
  grpc::ClientContext context;
  PrepareContext(options.connection, &context);
  v1::AttendResponse response;
  const grpc::Status rpc =
      wire::CallAttend(*stub, &context, request, &response);
  if (!rpc.ok()) {
    err << RpcErrorLine(rpc) << "\n";
    return kExitRpcFailed;
  }
  const v1::Tensor& weights = response.weights();
  const v1::Tensor& entropy = response.entropy();
  if (!IsF32OfShape("weights", weights,
                    absl::StrCat("[", dims.batch, ", ", dims.heads, ", ",
                                 dims.q_len, ", ", dims.k_len, "]"),
                    err) ||
      !IsF32OfShape("entropy", entropy,
                    absl::StrCat("[", dims.batch, ", ", dims.heads, ", ",
                                 dims.q_len, "]"),
                    err)) {
    return kExitRpcFailed;
  }
  Heatmap heatmap =
      HeatmapFromWeights(weights, options.batch_index, options.head, &entropy);
  heatmap.key_labels = options.key_tokens;
  if (!options.query_tokens.empty()) {
    heatmap.query_labels = options.query_tokens;
  } else if (dims.q_len == dims.k_len) {
    heatmap.query_labels = options.key_tokens;
  }
  heatmap.vmax = options.vmax.value_or(MaxWeight(heatmap));
  if (request.mask().has_block_sparse()) {
    absl::StatusOr<HeatmapPanel> layout =
        LayoutPanel(request, dims.q_len, dims.k_len, heatmap.vmax);
    if (!layout.ok()) return Usage(err, layout.status().message());
    heatmap.panels.insert(heatmap.panels.begin(), *std::move(layout));
  }
  heatmap.caption =
      absl::StrFormat("attention weights, batch %d: Lq %d x Lk %d",
                      options.batch_index, dims.q_len, dims.k_len);

  if (options.text) out << RenderHeatmapText(heatmap, options.text_color);
  if (!options.png_file.empty()) {
    const RgbImage image = RenderHeatmapImage(heatmap);
    status = WritePngFile(options.png_file, image);
    if (!status.ok()) return Fail(err, status, kExitFileError);
    out << "wrote " << options.png_file << " (" << image.width() << "x"
        << image.height() << ", "
        << Count(heatmap.panels.size(), "panel", "panels") << ")\n";
  }
  return kExitOk;
}

}  // namespace attnserve::client
