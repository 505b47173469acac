#include "server/session_codec.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/status_macros.h"
#include "wire/tensor.h"

namespace attnserve::server {

absl::StatusOr<SessionsAdmission> AdmitSessions(
    const wire::DecodedSessionsRequest& d,
    absl::Span<const kvcache::PartPlan> plans, const RequestLimits& limits) {
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
          wire::PartField(part), "session_id: session \"",
          d.parts[i].session_id, "\" has ", kvcache::ShapeText(s),
          ", sessions[0] ", kvcache::ShapeText(first),
          " (the sessions of one call share kv heads, dims and storage "
          "dtype)"));
    }
    const TensorView& q = d.queries[i];
    if (q.shape[1] != hq || q.shape[2] != s.head_dim ||
        hq % s.num_kv_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          wire::PartField(part), "query.shape: expected [Lnew, Hq = ", hq,
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

void PrepareSessionsCall(const wire::DecodedSessionsRequest& d,
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
                   wire::DecodeShape(request.shape()));
  ASSIGN_OR_RETURN(const absl::Duration ttl, wire::DecodeTtl(request.ttl_ms()));
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.CreateSession(request.session_id(), shape, ttl));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyAppendKv(const v1::AppendKvRequest& request,
                           kvcache::SessionStore& store,
                           v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const wire::DecodedAppend decoded,
                   wire::DecodeAppend(request));
  std::optional<int64_t> position;
  if (request.has_position()) position = request.position();
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Append(request.session_id(), request.layer(), position,
                                decoded.key, decoded.value));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyForkSession(const v1::ForkSessionRequest& request,
                              kvcache::SessionStore& store,
                              v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const absl::Duration ttl, wire::DecodeTtl(request.ttl_ms()));
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Fork(request.session_id(), request.child_id(), ttl));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyTruncateSession(const v1::TruncateSessionRequest& request,
                                  kvcache::SessionStore& store,
                                  v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Truncate(request.session_id(), request.tokens()));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyCloseSession(const v1::CloseSessionRequest& request,
                               kvcache::SessionStore& store,
                               v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Close(request.session_id()));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::Status ApplyGetSession(const v1::GetSessionRequest& request,
                             kvcache::SessionStore& store,
                             v1::SessionInfo* response) {
  ASSIGN_OR_RETURN(const kvcache::SessionInfo info,
                   store.Get(request.session_id()));
  wire::EncodeInfo(info, response);
  return absl::OkStatus();
}

absl::StatusOr<kvcache::SessionStore::AppendPlan> PlanSessions(
    const wire::DecodedSessionsRequest& decoded, kvcache::SessionStore& store) {
  absl::StatusOr<kvcache::SessionStore::AppendPlan> plan =
      store.PlanAppend(decoded.layer, decoded.parts);
  if (!plan.ok()) return wire::SpellStoreError(plan.status());
  return plan;
}

absl::StatusOr<std::shared_ptr<SessionsCall>> CommitSessions(
    std::shared_ptr<const wire::DecodedSessionsRequest> decoded,
    kvcache::SessionStore::AppendPlan plan, const SessionsAdmission& admission,
    kvcache::SessionStore& store, v1::AttendSessionsResponse* response) {
  absl::StatusOr<std::vector<kvcache::PinnedPart>> pinned =
      store.CommitAppend(std::move(plan), decoded->parts);
  if (!pinned.ok()) return wire::SpellStoreError(pinned.status());
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
  auto decoded = std::make_shared<wire::DecodedSessionsRequest>();
  ASSIGN_OR_RETURN(*decoded, wire::DecodeAttendSessions(request));
  ASSIGN_OR_RETURN(kvcache::SessionStore::AppendPlan plan,
                   PlanSessions(*decoded, store));
  ASSIGN_OR_RETURN(const SessionsAdmission admission,
                   AdmitSessions(*decoded, plan.parts(), limits));
  return CommitSessions(std::move(decoded), std::move(plan), admission, store,
                        response);
}

}  // namespace attnserve::server
