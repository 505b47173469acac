#include "wire/sessions.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/status_macros.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::wire {
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
  ASSIGN_OR_RETURN(const DType dtype, FloatDType(name, tensor));
  return ViewAs(name, tensor, dtype);
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
    ASSIGN_OR_RETURN(shape.dtype, DTypeFromWire(wire.storage_dtype(),
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
  shape->set_storage_dtype(DTypeToWire(info.shape.dtype));
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
    d.options.relative_bias = DecodeRelativeBias(request.relative_bias());
    RETURN_IF_ERROR(
        CheckRelativeBias(*d.options.relative_bias, hq, "relative_bias"));
  }
  if (request.has_relative_keys()) {
    ASSIGN_OR_RETURN(
        d.options.relative_keys,
        DecodeRelativeKeys(request.relative_keys(), "relative_keys"));
    RETURN_IF_ERROR(CheckRelativeKeys(*d.options.relative_keys, hq,
                                      d.queries[0].shape[2], "relative_keys"));
  }
  d.return_weights = request.return_weights();
  d.return_weight_stats = request.return_weight_stats();
  ASSIGN_OR_RETURN(d.output_dtype, DecodeOutputDType(request.output_dtype(),
                                                     d.queries[0].dtype));
  return d;
}

}  // namespace attnserve::wire
