#include "tests/fuzz/codec_checks.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/status_macros.h"
#include "kvcache/session_snapshot.h"
#include "model/attention_layer.h"
#include "server/model_codec.h"
#include "server/request_pieces.h"
#include "server/session_codec.h"

namespace attnserve::fuzz {
namespace {

absl::Status Broken(absl::string_view what, const absl::Status& status) {
  return absl::InternalError(absl::StrCat(what, ": ", status.ToString()));
}

// A refusal must carry one of `codes` and say why.
absl::StatusOr<Verdict> Refused(absl::string_view call,
                                const absl::Status& status,
                                std::initializer_list<absl::StatusCode> codes) {
  bool known = false;
  for (absl::StatusCode code : codes) known = known || status.code() == code;
  if (!known) {
    return Broken(absl::StrCat(call, " refused with an undocumented code"),
                  status);
  }
  if (status.message().empty()) {
    return Broken(absl::StrCat(call, " refused without a message"), status);
  }
  return Verdict{Outcome::kRefused, 0, status};
}

absl::Status CheckBudget(const kvcache::SessionStore& store) {
  const kvcache::StoreStats stats = store.Stats();
  if (stats.used_bytes < 0 || stats.used_bytes > stats.budget_bytes) {
    return absl::InternalError(
        absl::StrCat("the store holds ", stats.used_bytes,
                     " bytes of a budget of ", stats.budget_bytes));
  }
  return absl::OkStatus();
}

// What a SessionInfo answer promises: the session asked about, and layer
// tokens within the session's max_tokens.
absl::StatusOr<Verdict> SessionInfoVerdict(absl::string_view call,
                                           const absl::Status& status,
                                           const std::string& expected_id,
                                           const v1::SessionInfo& info,
                                           const kvcache::SessionStore& store) {
  if (absl::Status budget = CheckBudget(store); !budget.ok()) {
    return Broken(absl::StrCat("after ", call), budget);
  }
  if (!status.ok()) {
    return Refused(
        call, status,
        {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
         absl::StatusCode::kAlreadyExists, absl::StatusCode::kResourceExhausted,
         absl::StatusCode::kOutOfRange});
  }
  if (info.session_id().empty() ||
      (!expected_id.empty() && info.session_id() != expected_id)) {
    return absl::InternalError(absl::StrCat(call, " answered session \"",
                                            info.session_id(), "\" for \"",
                                            expected_id, "\""));
  }
  if (info.layer_tokens_size() != info.shape().num_layers()) {
    return absl::InternalError(
        absl::StrCat(call, " answered ", info.layer_tokens_size(),
                     " layers of ", info.shape().num_layers()));
  }
  for (int64_t tokens : info.layer_tokens()) {
    if (tokens < 0 || tokens > info.shape().max_tokens()) {
      return absl::InternalError(absl::StrCat(call, " answered a layer of ",
                                              tokens, " tokens (max_tokens ",
                                              info.shape().max_tokens(), ")"));
    }
  }
  return Verdict{Outcome::kComputed, 0, absl::OkStatus()};
}

std::vector<float> Values(base::SplitMix64& rng, size_t n, float scale) {
  std::vector<float> v(n);
  for (float& x : v) x = scale * (2 * rng.UnitFloat() - 1);
  return v;
}

model::LoadedModel MakeModel(base::SplitMix64& rng, std::string name,
                             const model::ModelConfig& c) {
  const size_t d = c.d_model, q = c.num_heads * c.head_dim,
               kv = c.num_kv_heads * c.head_dim, hd = c.head_dim,
               h = c.num_heads, a = c.additive_dim;
  model::LoadedModel m;
  m.name = std::move(name);
  m.config = c;
  model::LayerWeights& w = m.weights;
  w.q_proj_weight = Values(rng, q * d, 0.3f);
  w.k_proj_weight = Values(rng, kv * d, 0.3f);
  w.v_proj_weight = Values(rng, kv * d, 0.3f);
  w.o_proj_weight = Values(rng, d * q, 0.3f);
  if (c.bias) {
    w.q_proj_bias = Values(rng, q, 0.1f);
    w.k_proj_bias = Values(rng, kv, 0.1f);
    w.v_proj_bias = Values(rng, kv, 0.1f);
    w.o_proj_bias = Values(rng, d, 0.1f);
  }
  if (c.norm != model::NormPlacement::kNone) {
    w.norm_weight.assign(d, 1.0f);
    w.norm_bias.assign(d, 0.0f);
  }
  if (c.scoring == model::Scoring::kGeneral) {
    w.general_weight = Values(rng, h * hd * hd, 0.3f);
  }
  if (c.scoring == model::Scoring::kAdditive) {
    w.additive_w_query = Values(rng, h * a * hd, 0.3f);
    w.additive_w_key = Values(rng, h * a * hd, 0.3f);
    w.additive_v = Values(rng, h * a, 0.3f);
    w.additive_dim = static_cast<int64_t>(a);
  }
  if (c.attention == model::AttentionKind::kLinformer) {
    const size_t e = c.linformer_k * c.linformer_max_len;
    w.linformer_e = Values(rng, e, 0.3f);
    w.linformer_f = Values(rng, e, 0.3f);
  }
  return m;
}

model::ModelConfig Config(int64_t d, int64_t h, int64_t kv, int64_t hd) {
  model::ModelConfig c;
  c.d_model = d;
  c.num_heads = h;
  c.num_kv_heads = kv;
  c.head_dim = hd;
  return c;
}

}  // namespace

absl::StatusOr<Verdict> CheckAttendRequest(const v1::AttendRequest& request,
                                           AttentionEngine& engine,
                                           const server::RequestLimits& limits,
                                           double max_compute_flops,
                                           v1::AttendResponse* response) {
  absl::StatusOr<server::DecodedRequest> decoded =
      server::DecodeRequest(request, engine, limits);
  if (!decoded.ok()) {
    // No registry here: a shared-memory reference is refused as a server
    // without --shared_memory refuses it, naming the flag.
    if (decoded.status().code() == absl::StatusCode::kFailedPrecondition &&
        absl::StrContains(decoded.status().message(), "--shared_memory")) {
      return Refused("DecodeRequest", decoded.status(),
                     {absl::StatusCode::kFailedPrecondition});
    }
    return Refused("DecodeRequest", decoded.status(),
                   {absl::StatusCode::kInvalidArgument,
                    absl::StatusCode::kResourceExhausted});
  }
  if (decoded->response_payload_bytes > limits.max_response_bytes) {
    return absl::InternalError(absl::StrCat(
        "DecodeRequest passed a response of ", decoded->response_payload_bytes,
        " bytes over the limit ", limits.max_response_bytes));
  }
  if (decoded->plan.shape.flops > max_compute_flops) {
    return Verdict{Outcome::kDecoded, decoded->plan.shape.flops,
                   absl::OkStatus()};
  }
  const AttentionOutputs outputs = server::PrepareResponse(*decoded, response);
  const int64_t prepared = static_cast<int64_t>(
      response->output().data().size() + response->weights().data().size() +
      response->entropy().data().size() + response->max_weight().data().size());
  if (prepared != decoded->response_payload_bytes) {
    return absl::InternalError(absl::StrCat("PrepareResponse sized ", prepared,
                                            " bytes, DecodeRequest counted ",
                                            decoded->response_payload_bytes));
  }
  const absl::Status run = engine.Run(decoded->inputs, outputs);
  if (!run.ok()) return Broken("Run failed on a decoded request", run);
  return Verdict{Outcome::kComputed, decoded->plan.shape.flops,
                 absl::OkStatus()};
}

absl::StatusOr<Verdict> CheckModelRequest(const v1::ModelRequest& request,
                                          const server::ModelRegistry& registry,
                                          AttentionEngine& engine,
                                          const server::RequestLimits& limits,
                                          v1::AttendResponse* response) {
  absl::StatusOr<server::DecodedModelRequest> decoded =
      server::DecodeModelRequest(request, registry, engine, limits);
  if (!decoded.ok()) {
    return Refused(
        "DecodeModelRequest", decoded.status(),
        {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
         absl::StatusCode::kResourceExhausted});
  }
  const model::LayerOutputs outputs =
      server::PrepareModelResponse(*decoded, response);
  const int64_t prepared = static_cast<int64_t>(
      response->output().data().size() + response->weights().data().size());
  if (prepared != decoded->response_payload_bytes) {
    return absl::InternalError(
        absl::StrCat("PrepareModelResponse sized ", prepared,
                     " bytes, DecodeModelRequest counted ",
                     decoded->response_payload_bytes));
  }
  const absl::Status run =
      decoded->model->layer->Run(decoded->inputs, outputs, engine);
  if (!run.ok()) return Broken("the layer failed on a decoded request", run);
  return Verdict{Outcome::kComputed, decoded->flops, absl::OkStatus()};
}

absl::StatusOr<Verdict> CheckInferRequest(
    inference::ModelInferRequest& request,
    const std::vector<server::kserve::ModelInterface>& interfaces,
    const server::ModelRegistry& registry, AttentionEngine& engine,
    const server::RequestLimits& limits, double max_compute_flops) {
  const absl::StatusOr<int> index = server::kserve::FindModel(
      interfaces, request.model_name(), request.model_version());
  if (!index.ok()) {
    return Refused("FindModel", index.status(), {absl::StatusCode::kNotFound});
  }
  server::kserve::NativeCall call;
  const absl::Status built =
      server::kserve::ToNative(interfaces[*index], request, &call);
  if (!built.ok()) {
    return Refused("ToNative", built, {absl::StatusCode::kInvalidArgument});
  }
  if (call.outputs.empty()) {
    return absl::InternalError("ToNative asked for no output");
  }
  v1::AttendResponse native;
  ASSIGN_OR_RETURN(
      const Verdict verdict,
      call.model->hosted == nullptr
          ? CheckAttendRequest(call.attend, engine, limits, max_compute_flops,
                               &native)
          : CheckModelRequest(call.hosted, registry, engine, limits, &native));
  if (verdict.outcome != Outcome::kComputed) return verdict;
  inference::ModelInferResponse response;
  server::kserve::ToInferResponse(call, request, native, &response);
  if (response.outputs_size() != static_cast<int>(call.outputs.size()) ||
      response.raw_output_contents_size() != response.outputs_size()) {
    return absl::InternalError(
        absl::StrCat("ToInferResponse answered ", response.outputs_size(),
                     " outputs and ", response.raw_output_contents_size(),
                     " raw contents for ", call.outputs.size(), " asked for"));
  }
  return verdict;
}

absl::StatusOr<Verdict> CheckAttendSessions(
    const v1::AttendSessionsRequest& request, kvcache::SessionStore& store,
    AttentionEngine& engine, const server::RequestLimits& limits,
    v1::AttendSessionsResponse* response) {
  absl::StatusOr<std::shared_ptr<server::SessionsCall>> call =
      server::PrepareAttendSessions(request, store, limits, response);
  if (absl::Status budget = CheckBudget(store); !budget.ok()) {
    return Broken("after AppendAndPin", budget);
  }
  if (!call.ok()) {
    return Refused(
        "PrepareAttendSessions", call.status(),
        {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
         absl::StatusCode::kResourceExhausted, absl::StatusCode::kOutOfRange});
  }
  if (response->results_size() != request.sessions_size()) {
    return absl::InternalError(absl::StrCat(
        "PrepareAttendSessions answered ", response->results_size(),
        " results for ", request.sessions_size(), " sessions"));
  }
  // Admitted means appended: a refusal now would come after the appends,
  // which the API promises never happens.
  const absl::Status run = engine.RunPaged((*call)->inputs);
  if (!run.ok()) return Broken("RunPaged failed on an admitted call", run);
  return Verdict{Outcome::kComputed, (*call)->flops, absl::OkStatus()};
}

absl::StatusOr<Verdict> CheckCreateSession(
    const v1::CreateSessionRequest& request, kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status = server::ApplyCreateSession(request, store, &info);
  return SessionInfoVerdict("CreateSession", status, request.session_id(), info,
                            store);
}

absl::StatusOr<Verdict> CheckAppendKv(const v1::AppendKvRequest& request,
                                      kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status = server::ApplyAppendKv(request, store, &info);
  return SessionInfoVerdict("AppendKv", status, request.session_id(), info,
                            store);
}

absl::StatusOr<Verdict> CheckForkSession(const v1::ForkSessionRequest& request,
                                         kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status = server::ApplyForkSession(request, store, &info);
  return SessionInfoVerdict("ForkSession", status, request.child_id(), info,
                            store);
}

absl::StatusOr<Verdict> CheckTruncateSession(
    const v1::TruncateSessionRequest& request, kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status =
      server::ApplyTruncateSession(request, store, &info);
  ASSIGN_OR_RETURN(Verdict verdict,
                   SessionInfoVerdict("TruncateSession", status,
                                      request.session_id(), info, store));
  for (int64_t tokens : info.layer_tokens()) {
    if (tokens > request.tokens()) {
      return absl::InternalError(
          absl::StrCat("TruncateSession to ", request.tokens(),
                       " tokens left a layer of ", tokens));
    }
  }
  return verdict;
}

absl::StatusOr<Verdict> CheckCloseSession(
    const v1::CloseSessionRequest& request, kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status = server::ApplyCloseSession(request, store, &info);
  return SessionInfoVerdict("CloseSession", status, request.session_id(), info,
                            store);
}

absl::StatusOr<Verdict> CheckGetSession(const v1::GetSessionRequest& request,
                                        kvcache::SessionStore& store) {
  v1::SessionInfo info;
  const absl::Status status = server::ApplyGetSession(request, store, &info);
  return SessionInfoVerdict("GetSession", status, request.session_id(), info,
                            store);
}

absl::StatusOr<Verdict> CheckImportSessions(
    const v1::SessionTransferChunk& chunk, kvcache::SessionStore& store) {
  kvcache::SnapshotReader reader = store.NewReader();
  absl::Status status = reader.Feed(chunk.data());
  size_t consumed = 0;  // bytes of the snapshots imported, in order
  while (std::optional<kvcache::SnapshotReader::Session> s =
             reader.TakeCompleted()) {
    const std::string id = s->header.id;
    absl::StatusOr<kvcache::SessionInfo> info = store.Import(*std::move(s));
    if (!info.ok()) {
      if (status.ok()) status = info.status();
      break;
    }
    // What was imported exports as a snapshot of the same size (the TTL may
    // have been capped) that reads back.
    absl::StatusOr<std::vector<kvcache::ExportedSession>> out =
        store.Export({id}, /*remove=*/false);
    if (!out.ok() || out->size() != 1) {
      return Broken("Export of an imported session", out.status());
    }
    const std::string bytes = kvcache::SnapshotBytes((*out)[0]);
    // Read into a pool of its own: the store's may be full.
    kvcache::BlockPool pool(int64_t{1} << 30);
    kvcache::SnapshotReader again(
        store.options().block_tokens,
        [&pool](int64_t bytes) { return pool.Allocate(bytes); });
    absl::Status reread = again.Feed(bytes);
    if (reread.ok()) reread = again.Finish();
    if (!reread.ok() || consumed + bytes.size() > chunk.data().size()) {
      return Broken(absl::StrCat("the export of imported session \"", id,
                                 "\" (", bytes.size(), " bytes)"),
                    reread);
    }
    consumed += bytes.size();
  }
  if (status.ok()) status = reader.Finish();
  if (absl::Status budget = CheckBudget(store); !budget.ok()) {
    return Broken("after ImportSessions", budget);
  }
  if (!status.ok()) {
    return Refused(
        "ImportSessions", status,
        {absl::StatusCode::kDataLoss, absl::StatusCode::kFailedPrecondition,
         absl::StatusCode::kInvalidArgument, absl::StatusCode::kAlreadyExists,
         absl::StatusCode::kResourceExhausted});
  }
  return Verdict{Outcome::kComputed, 0, absl::OkStatus()};
}

absl::StatusOr<Verdict> CheckAttendPieces(const v1::RequestPiece& piece,
                                          AttentionEngine& engine,
                                          const server::RequestLimits& limits,
                                          double max_compute_flops,
                                          v1::AttendResponse* response) {
  constexpr int64_t kMaxRequestBytes = int64_t{1} << 20;
  server::RequestPieces whole(kMaxRequestBytes);
  v1::RequestPiece copy = piece;
  absl::Status status = whole.Add(copy);
  v1::AttendRequest request;
  if (status.ok()) status = whole.Parse(&request);
  // The same data in small pieces.
  server::RequestPieces cut(kMaxRequestBytes);
  absl::Status cut_status;
  const std::string& data = piece.data();
  for (size_t at = 0, n = 0; cut_status.ok() && (at < data.size() || n == 0);
       ++n) {
    v1::RequestPiece small;
    if (n == 0) small.set_request_bytes(piece.request_bytes());
    const size_t size = std::min<size_t>(data.size() - at, n % 7 + 1);
    small.set_data(data.substr(at, size));
    at += size;
    cut_status = cut.Add(small);
  }
  v1::AttendRequest cut_request;
  if (cut_status.ok()) cut_status = cut.Parse(&cut_request);
  if (status.ok() != cut_status.ok()) {
    return absl::InternalError(
        absl::StrCat("one piece: ", status.ToString(),
                     "; small pieces: ", cut_status.ToString()));
  }
  if (!status.ok()) {
    return Refused("AttendPieces", status,
                   {absl::StatusCode::kInvalidArgument});
  }
  v1::AttendRequest parsed;
  if (!parsed.ParseFromString(data) ||
      parsed.SerializeAsString() != request.SerializeAsString() ||
      cut_request.SerializeAsString() != request.SerializeAsString()) {
    return absl::InternalError(
        "the pieces parsed into another request than their bytes");
  }
  return CheckAttendRequest(request, engine, limits, max_compute_flops,
                            response);
}

absl::Status CheckStoreEmptiesOnClose(kvcache::SessionStore& store) {
  store.CloseAll();
  const kvcache::StoreStats stats = store.Stats();
  if (stats.used_bytes != 0 || stats.sessions != 0) {
    return absl::InternalError(absl::StrCat("after CloseAll the store holds ",
                                            stats.sessions, " sessions and ",
                                            stats.used_bytes, " bytes"));
  }
  return absl::OkStatus();
}

model::RepositoryContents SmallModels(uint64_t seed) {
  base::SplitMix64 rng(seed);
  model::RepositoryContents contents;
  model::ModelConfig c = Config(16, 2, 2, 8);
  contents.models.push_back(MakeModel(rng, "dot", c));
  c = Config(12, 4, 2, 4);
  c.scoring = model::Scoring::kAdditive;
  c.additive_dim = 5;
  c.positional = model::Positional::kRope;
  c.norm = model::NormPlacement::kPre;
  contents.models.push_back(MakeModel(rng, "additive", c));
  c = Config(8, 2, 1, 6);
  c.scoring = model::Scoring::kGeneral;
  c.positional = model::Positional::kSinusoidal;
  c.norm = model::NormPlacement::kNone;
  c.bias = false;
  c.dtype = model::ModelDType::kBFloat16;
  contents.models.push_back(MakeModel(rng, "general", c));
  return contents;
}

}  // namespace attnserve::fuzz
