#include "server/session_codec.h"

#include <cmath>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/status_macros.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::server {
namespace {

// A float tensor named `name`, viewed in the message: the wire's facts only.
// Keys and values get their shape rules from SessionCache::CheckAppend, which
// knows the session's heads and dims.
absl::StatusOr<TensorView> DecodeFloat(absl::string_view name, bool present,
                                       const v1::Tensor& tensor,
                                       absl::string_view axes) {
  if (!present) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": missing (expected a FLOAT32, BFLOAT16 or FLOAT16 tensor ",
        axes, ")"));
  }
  ASSIGN_OR_RETURN(const DType dtype, wire::FloatDType(name, tensor));
  return wire::ViewAs(name, tensor, dtype);
}

// A query: [Lnew, Hq, D] with Lnew >= 1, its one shape rule that no session
// knows (AdmitSessions checks Hq and D against the sessions).
absl::StatusOr<TensorView> DecodeQuery(absl::string_view name, bool present,
                                       const v1::Tensor& tensor) {
  constexpr absl::string_view kAxes = "[Lnew, Hq, head_dim]";
  ASSIGN_OR_RETURN(const TensorView view,
                   DecodeFloat(name, present, tensor, kAxes));
  if (view.rank != 3 || view.shape[0] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".shape: expected ", kAxes, " with Lnew >= 1, got ",
                     ShapeString(view.dims())));
  }
  return view;
}

}  // namespace

std::string PartField(int part) {
  return absl::StrCat("sessions[", part, "].");
}

absl::Status SpellStoreError(const absl::Status& status) {
  const std::optional<int> part = kvcache::FailedPart(status);
  if (!part) return status;
  return absl::Status(status.code(),
                      absl::StrCat(PartField(*part), status.message()));
}

absl::StatusOr<kvcache::SessionShape> DecodeShape(
    const v1::SessionShape& wire) {
  kvcache::SessionShape shape;
  shape.num_layers = wire.num_layers();
  shape.num_kv_heads = wire.num_kv_heads();
  shape.head_dim = wire.head_dim();
  shape.value_dim = wire.value_dim() == 0 ? wire.head_dim() : wire.value_dim();
  shape.max_tokens = wire.max_tokens();
  shape.window_tokens = wire.window_tokens();
  shape.sink_tokens = wire.sink_tokens();
  if (wire.storage_dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    shape.dtype = DType::kFloat32;
  } else if (wire.storage_dtype() == v1::INT8) {
    shape.dtype = DType::kInt8;
  } else {
    ASSIGN_OR_RETURN(shape.dtype, wire::DTypeFromWire(wire.storage_dtype(),
                                                      "shape.storage_dtype"));
  }
  return shape;
}

void EncodeInfo(const kvcache::SessionInfo& info, v1::SessionInfo* wire) {
  wire->set_session_id(info.id);
  v1::SessionShape* shape = wire->mutable_shape();
  shape->set_num_layers(info.shape.num_layers);
  shape->set_num_kv_heads(info.shape.num_kv_heads);
  shape->set_head_dim(info.shape.head_dim);
  shape->set_value_dim(info.shape.value_dim);
  shape->set_storage_dtype(wire::DTypeToWire(info.shape.dtype));
  shape->set_max_tokens(info.shape.max_tokens);
  shape->set_window_tokens(info.shape.window_tokens);
  shape->set_sink_tokens(info.shape.sink_tokens);
  wire->clear_layer_tokens();
  for (int64_t t : info.layer_tokens) wire->add_layer_tokens(t);
  wire->set_kv_bytes(info.bytes);
  wire->set_ttl_ms(absl::ToInt64Milliseconds(info.ttl));
  wire->set_idle_ms(std::max<int64_t>(
      0, absl::ToInt64Milliseconds(absl::Now() - info.last_use)));
  wire->set_created(info.created_now);
  wire->set_parent_id(info.parent);
}

absl::StatusOr<absl::Duration> DecodeTtl(int64_t ttl_ms) {
  if (ttl_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl_ms: ", ttl_ms, " is negative (0 = the server's)"));
  }
  return absl::Milliseconds(ttl_ms);
}

absl::StatusOr<DecodedAppend> DecodeAppend(const v1::AppendKvRequest& request) {
  DecodedAppend decoded;
  ASSIGN_OR_RETURN(decoded.key,
                   DecodeFloat("key", request.has_key(), request.key(),
                               "[Lnew, num_kv_heads, head_dim]"));
  ASSIGN_OR_RETURN(decoded.value,
                   DecodeFloat("value", request.has_value(), request.value(),
                               "[Lnew, num_kv_heads, value_dim]"));
  return decoded;
}

absl::StatusOr<DecodedSessionsRequest> DecodeAttendSessions(
    const v1::AttendSessionsRequest& request) {
  DecodedSessionsRequest d;
  d.layer = request.layer();
  const int n = request.sessions_size();
  if (n < 1 || n > kMaxSessionsPerCall) {
    return absl::InvalidArgumentError(absl::StrCat("sessions: ", n,
                                                   " sessions (expected 1 to ",
                                                   kMaxSessionsPerCall, ")"));
  }
  d.parts.resize(static_cast<size_t>(n));
  d.queries.resize(static_cast<size_t>(n));
  std::unordered_map<std::string, int> seen;  // ids of parts 0..i-1
  for (int i = 0; i < n; ++i) {
    const v1::SessionQuery& q = request.sessions(i);
    const std::string at = PartField(i);
    kvcache::AttendPart& part = d.parts[static_cast<size_t>(i)];
    part.session_id = q.session_id();
    if (q.session_id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "session_id: missing"));
    }
    const auto [first, inserted] = seen.emplace(q.session_id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "session_id: \"", q.session_id(), "\" is also ",
                       PartField(first->second),
                       "session_id (a session may appear once "
                       "per call)"));
    }
    ASSIGN_OR_RETURN(
        d.queries[static_cast<size_t>(i)],
        DecodeQuery(absl::StrCat(at, "query"), q.has_query(), q.query()));
    if (q.has_key()) {
      ASSIGN_OR_RETURN(part.keys,
                       DecodeFloat(absl::StrCat(at, "key"), true, q.key(),
                                   "[Lnew, num_kv_heads, head_dim]"));
    }
    if (q.has_value()) {
      ASSIGN_OR_RETURN(part.values,
                       DecodeFloat(absl::StrCat(at, "value"), true, q.value(),
                                   "[Lnew, num_kv_heads, value_dim]"));
    }
    if (q.has_position()) part.position = q.position();
  }
  d.options.causal = !request.has_causal() || request.causal();
  if (request.has_window_left()) {
    if (request.window_left() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("window_left: ", request.window_left(), " is negative"));
    }
    d.options.window_left = request.window_left();
  }
  // The engine's range of Hq and its ALiBi checks, made here because the
  // engine would make them only after the appends (one Hq per call:
  // AdmitSessions holds the other queries to this one).
  const int64_t hq = d.queries[0].shape[1];
  if (hq < 1 || hq > kMaxPagedQueryHeads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sessions[0].query.shape: Hq = ", hq, " is outside [1, ",
        kMaxPagedQueryHeads, "] (got ", ShapeString(d.queries[0].dims()), ")"));
  }
  d.options.alibi_slopes = absl::MakeConstSpan(request.alibi_slopes().data(),
                                               request.alibi_slopes().size());
  if (!d.options.alibi_slopes.empty() &&
      static_cast<int64_t>(d.options.alibi_slopes.size()) != hq) {
    return absl::InvalidArgumentError(
        absl::StrCat("alibi_slopes: expected Hq = ", hq,
                     " entries (one per query head) or none, got ",
                     d.options.alibi_slopes.size()));
  }
  for (size_t h = 0; h < d.options.alibi_slopes.size(); ++h) {
    if (!std::isfinite(d.options.alibi_slopes[h])) {
      return absl::InvalidArgumentError(
          absl::StrCat("alibi_slopes[", h, "]: must be finite, got ",
                       d.options.alibi_slopes[h]));
    }
  }
  if (request.has_scale()) {
    if (!std::isfinite(request.scale())) {
      return absl::InvalidArgumentError(
          absl::StrCat("scale: ", request.scale(), " is not finite"));
    }
    d.options.scale = request.scale();
  }
  if (request.has_softcap()) d.options.softcap = request.softcap();
  RETURN_IF_ERROR(CheckSoftcap(d.options.softcap));
  d.options.sinks =
      absl::MakeConstSpan(request.sinks().data(), request.sinks().size());
  RETURN_IF_ERROR(CheckSinks(d.options.sinks, hq));
  if (request.has_relative_bias()) {
    d.options.relative_bias = wire::DecodeRelativeBias(request.relative_bias());
    RETURN_IF_ERROR(
        CheckRelativeBias(*d.options.relative_bias, hq, "relative_bias"));
  }
  if (request.has_relative_keys()) {
    ASSIGN_OR_RETURN(
        d.options.relative_keys,
        wire::DecodeRelativeKeys(request.relative_keys(), "relative_keys"));
    RETURN_IF_ERROR(CheckRelativeKeys(*d.options.relative_keys, hq,
                                      d.queries[0].shape[2], "relative_keys"));
  }
  d.return_weights = request.return_weights();
  d.return_weight_stats = request.return_weight_stats();
  ASSIGN_OR_RETURN(
      d.output_dtype,
      wire::DecodeOutputDType(request.output_dtype(), d.queries[0].dtype));
  return d;
}

absl::StatusOr<SessionsAdmission> AdmitSessions(
    const DecodedSessionsRequest& d, absl::Span<const kvcache::PartPlan> plans,
    const RequestLimits& limits) {
  const kvcache::SessionShape& first = plans[0].shape;
  const int64_t hq = d.queries[0].shape[1];
  double flops = 0;
  int64_t bytes = 0;
  const int64_t out_size = static_cast<int64_t>(DTypeSize(d.output_dtype));
  for (size_t i = 0; i < plans.size(); ++i) {
    const kvcache::SessionShape& s = plans[i].shape;
    const int part = static_cast<int>(i);  // spelled only for a message
    if (s.num_kv_heads != first.num_kv_heads || s.head_dim != first.head_dim ||
        s.value_dim != first.value_dim || s.dtype != first.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          PartField(part), "session_id: session \"", d.parts[i].session_id,
          "\" has ", kvcache::ShapeText(s), ", sessions[0] ",
          kvcache::ShapeText(first),
          " (the sessions of one call share kv heads, dims and storage "
          "dtype)"));
    }
    const TensorView& q = d.queries[i];
    if (q.shape[1] != hq || q.shape[2] != s.head_dim ||
        hq % s.num_kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          PartField(part), "query.shape: expected [Lnew, Hq = ", hq,
          " (a multiple of num_kv_heads = ", s.num_kv_heads,
          "), head_dim = ", s.head_dim, "], got ", ShapeString(q.dims())));
    }
    const int64_t lnew = q.shape[0];
    const int64_t tokens = plans[i].tokens_after;
    AttentionShape step;  // the stateless Attend this part equals
    step.batch = 1;
    step.q_heads = hq;
    step.kv_heads = s.num_kv_heads;
    step.q_len = lnew;
    step.k_len = kvcache::ReachableTokens(s, tokens, lnew);
    step.head_dim = s.head_dim;
    step.value_dim = s.value_dim;
    flops += step.dense_flops() +
             (d.options.relative_keys ? step.relative_keys_flops() : 0.0);
    bytes += lnew * hq * s.value_dim * out_size;
    if (d.return_weights) bytes += hq * lnew * tokens * 4;
    if (d.return_weight_stats) bytes += 2 * hq * lnew * 4;
  }
  if (bytes > limits.max_response_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("response: ", bytes, " bytes of outputs",
                     d.return_weights ? " and weights" : "",
                     d.return_weight_stats ? " and weight statistics" : "",
                     " exceed the limit of ", limits.max_response_bytes,
                     " bytes (the server's --max_response_bytes flag)"));
  }
  if (flops > limits.max_flops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request: ", flops, " FLOPs of attention exceed the limit of ",
        limits.max_flops, " (the server's --max_request_flops flag)"));
  }
  return SessionsAdmission{flops, bytes};
}

void PrepareSessionsCall(const DecodedSessionsRequest& d,
                         std::vector<kvcache::PinnedPart> pinned,
                         int block_tokens, v1::AttendSessionsResponse* response,
                         SessionsCall* call) {
  call->pinned = std::move(pinned);
  const size_t n = call->pinned.size();
  const kvcache::SessionShape& shape = call->pinned[0].shape;
  const int64_t hq = d.queries[0].shape[1];
  call->converted_queries.resize(n);
  call->sequences.resize(n);
  response->clear_results();
  for (size_t i = 0; i < n; ++i) {
    const kvcache::PinnedLayer& layer = call->pinned[i].layer;
    const TensorView& q = d.queries[i];
    const int64_t lnew = q.shape[0];
    PagedSequence& seq = call->sequences[i];
    const DType operands = PagedOperandDType(shape.dtype);
    if (q.dtype == operands) {
      seq.query = q;
    } else {
      // The engine's queries share the cache's dtype (f32 for int8).
      const size_t elements = static_cast<size_t>(q.num_elements());
      std::vector<char>& bytes = call->converted_queries[i];
      bytes.resize(elements * DTypeSize(operands));
      ConvertDType(q.data, q.dtype, bytes.data(), operands, elements);
      seq.query = MakeTensorView(bytes.data(), operands,
                                 {lnew, hq, int64_t{shape.head_dim}});
    }
    seq.kv.blocks = layer.data;
    seq.kv.tokens = layer.tokens;
    seq.kv.kept_blocks = layer.kept_blocks;
    seq.kv.evicted_blocks = layer.evicted_blocks;
    const kvcache::SessionShape& own = call->pinned[i].shape;
    if (own.window_tokens > 0) {
      seq.window_left = own.window_tokens - 1;
      seq.sink_tokens = own.sink_tokens;
    }
    v1::SessionResult* result = response->add_results();
    result->set_session_id(d.parts[i].session_id);
    result->set_tokens(layer.tokens);
    const int64_t out_shape[] = {lnew, hq, int64_t{shape.value_dim}};
    seq.output = wire::PrepareTensor(d.output_dtype, out_shape,
                                     result->mutable_output());
    if (d.return_weights) {
      const int64_t w_shape[] = {hq, lnew, layer.tokens};
      seq.weights = wire::PrepareTensor(DType::kFloat32, w_shape,
                                        result->mutable_weights());
    }
    if (d.return_weight_stats) {
      const int64_t stats_shape[] = {hq, lnew};
      seq.entropy = wire::PrepareTensor(DType::kFloat32, stats_shape,
                                        result->mutable_entropy());
      seq.max_weight = wire::PrepareTensor(DType::kFloat32, stats_shape,
                                           result->mutable_max_weight());
    }
  }
  PagedAttentionInputs& in = call->inputs;
  in.q_heads = hq;
  in.kv_heads = shape.num_kv_heads;
  in.head_dim = shape.head_dim;
  in.value_dim = shape.value_dim;
  in.kv_dtype = shape.dtype;
  in.block_tokens = block_tokens;
  static_cast<PagedCallOptions&>(in) = d.options;
  in.sequences = call->sequences;
}

absl::Status ApplyCreateSession(const v1::CreateSessionRequest& request,
                                kvcache::SessionStore& store,
                                v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionShape shape,
                   DecodeShape(request.shape()));
  ASSIGN_OR_RETURN(const absl::Duration ttl, DecodeTtl(request.ttl_ms()));
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.CreateSession(request.session_id(), shape, ttl));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyAppendKv(const v1::AppendKvRequest& request,
                           kvcache::SessionStore& store,
                           v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const DecodedAppend decoded, DecodeAppend(request));
  std::optional<int64_t> position;
  if (request.has_position()) position = request.position();
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Append(request.session_id(), request.layer(), position,
                                decoded.key, decoded.value));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyForkSession(const v1::ForkSessionRequest& request,
                              kvcache::SessionStore& store,
                              v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const absl::Duration ttl, DecodeTtl(request.ttl_ms()));
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Fork(request.session_id(), request.child_id(), ttl));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyTruncateSession(const v1::TruncateSessionRequest& request,
                                  kvcache::SessionStore& store,
                                  v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Truncate(request.session_id(), request.tokens()));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyCloseSession(const v1::CloseSessionRequest& request,
                               kvcache::SessionStore& store,
                               v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Close(request.session_id()));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyGetSession(const v1::GetSessionRequest& request,
                             kvcache::SessionStore& store,
                             v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Get(request.session_id()));
  EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::StatusOr<kvcache::SessionStore::AppendPlan> PlanSessions(
    const DecodedSessionsRequest& decoded, kvcache::SessionStore& store) {
  absl::StatusOr<kvcache::SessionStore::AppendPlan> plan =
      store.PlanAppend(decoded.layer, decoded.parts);
  if (!plan.ok()) return SpellStoreError(plan.status());
  return plan;
}

absl::StatusOr<std::shared_ptr<SessionsCall>> CommitSessions(
    std::shared_ptr<const DecodedSessionsRequest> decoded,
    kvcache::SessionStore::AppendPlan plan, const SessionsAdmission& admission,
    kvcache::SessionStore& store, v1::AttendSessionsResponse* response) {
  absl::StatusOr<std::vector<kvcache::PinnedPart>> pinned =
      store.CommitAppend(std::move(plan), decoded->parts);
  if (!pinned.ok()) return SpellStoreError(pinned.status());
  auto call = std::make_shared<SessionsCall>();
  PrepareSessionsCall(*decoded, *std::move(pinned),
                      store.options().block_tokens, response, call.get());
  call->flops = admission.flops;
  call->decoded = std::move(decoded);
  return call;
}

absl::StatusOr<std::shared_ptr<SessionsCall>> PrepareAttendSessions(
    const v1::AttendSessionsRequest& request, kvcache::SessionStore& store,
    const RequestLimits& limits, v1::AttendSessionsResponse* response) {
  auto decoded = std::make_shared<DecodedSessionsRequest>();
  ASSIGN_OR_RETURN(*decoded, DecodeAttendSessions(request));
  ASSIGN_OR_RETURN(kvcache::SessionStore::AppendPlan plan,
                   PlanSessions(*decoded, store));
  ASSIGN_OR_RETURN(const SessionsAdmission admission,
                   AdmitSessions(*decoded, plan.parts(), limits));
  return CommitSessions(std::move(decoded), std::move(plan), admission, store,
                        response);
}

}  // namespace attnserve::server
