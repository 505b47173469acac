#include "tests/util/session_mirror.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "wire/dtype.h"

namespace attnserve::testing {
namespace {

float Round(float x, DType dtype) {
  if (dtype == DType::kBFloat16) return BFloat16ToFloat(FloatToBFloat16(x));
  if (dtype == DType::kFloat16) return Float16ToFloat(FloatToFloat16(x));
  return x;
}

}  // namespace

v1::SessionShape WireShape(const MirrorShape& s) {
  v1::SessionShape w;
  w.set_num_layers(s.layers);
  w.set_num_kv_heads(s.kv_heads);
  w.set_head_dim(s.head_dim);
  w.set_value_dim(s.value_dim);
  w.set_storage_dtype(wire::DTypeToWire(s.dtype));
  w.set_max_tokens(s.max_tokens);
  w.set_window_tokens(s.window_tokens);
  w.set_sink_tokens(s.sink_tokens);
  return w;
}

v1::Tensor WireRows(DType dtype, int64_t rows, int64_t heads, int64_t dim,
                    absl::Span<const float> values) {
  v1::Tensor t;
  t.set_dtype(wire::DTypeToWire(dtype));
  t.add_shape(rows);
  t.add_shape(heads);
  t.add_shape(dim);
  std::string data(values.size() * DTypeSize(dtype), '\0');
  ConvertFromFloat(values.data(), data.data(), dtype, values.size());
  t.set_data(std::move(data));
  return t;
}

std::vector<float> WireFloats(const v1::Tensor& tensor) {
  const absl::StatusOr<DType> dtype = wire::DTypeFromWire(tensor.dtype(), "");
  if (!dtype.ok()) return {};
  const size_t n = tensor.data().size() / DTypeSize(*dtype);
  std::vector<float> out(n);
  ConvertToFloat(tensor.data().data(), *dtype, out.data(), n);
  return out;
}

std::vector<float> RandomValues(uint64_t seed, int64_t n) {
  base::SplitMix64 rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.Uniform(-1.0f, 1.0f);
  return v;
}

SessionMirror::SessionMirror(const MirrorShape& shape)
    : shape_(shape),
      keys_(static_cast<size_t>(shape.layers)),
      values_(static_cast<size_t>(shape.layers)),
      held_from_(static_cast<size_t>(shape.layers), shape.sink_tokens) {}

int64_t SessionMirror::tokens(int layer) const {
  return static_cast<int64_t>(keys_[static_cast<size_t>(layer)].size()) /
         (shape_.kv_heads * shape_.head_dim);
}

void SessionMirror::Append(int layer, absl::Span<const float> keys,
                           absl::Span<const float> values) {
  if (shape_.window_tokens > 0) {
    int64_t& held = held_from_[static_cast<size_t>(layer)];
    held = std::max(held, tokens(layer) - shape_.window_tokens + 1);
  }
  StoreRows(keys, shape_.head_dim, &keys_[static_cast<size_t>(layer)]);
  StoreRows(values, shape_.value_dim, &values_[static_cast<size_t>(layer)]);
}

void SessionMirror::StoreRows(absl::Span<const float> rows, int64_t dim,
                              std::vector<float>* to) const {
  if (shape_.dtype != DType::kInt8) {
    for (float x : rows) to->push_back(Round(x, shape_.dtype));
    return;
  }
  // Each row (one token of one kv head) as the server quantizes it.
  std::vector<int8_t> q(static_cast<size_t>(dim));
  std::vector<float> back(static_cast<size_t>(dim));
  for (size_t at = 0; at + dim <= rows.size(); at += dim) {
    const float scale = QuantizeInt8(rows.data() + at, dim, q.data());
    DequantizeInt8(q.data(), dim, scale, back.data());
    to->insert(to->end(), back.begin(), back.end());
  }
}

bool SessionMirror::CanTruncate(int64_t tokens) const {
  if (shape_.window_tokens == 0) return true;
  const int64_t first =
      std::max(shape_.sink_tokens, tokens - shape_.window_tokens + 1);
  for (int l = 0; l < shape_.layers; ++l) {
    if (this->tokens(l) > tokens && first < tokens &&
        first < held_from_[static_cast<size_t>(l)]) {
      return false;
    }
  }
  return true;
}

void SessionMirror::Truncate(int64_t tokens) {
  for (int l = 0; l < shape_.layers; ++l) {
    if (this->tokens(l) <= tokens) continue;
    if (tokens <= shape_.sink_tokens) {
      held_from_[static_cast<size_t>(l)] = shape_.sink_tokens;
    }
    keys_[static_cast<size_t>(l)].resize(
        static_cast<size_t>(tokens * shape_.kv_heads * shape_.head_dim));
    values_[static_cast<size_t>(l)].resize(
        static_cast<size_t>(tokens * shape_.kv_heads * shape_.value_dim));
  }
}

absl::StatusOr<std::vector<float>> SessionMirror::Reference(
    int layer, int64_t hq, absl::Span<const float> query,
    const PagedAttentionInputs& step, std::vector<float>* weights) const {
  const int64_t d = shape_.head_dim, dv = shape_.value_dim;
  const int64_t lnew = static_cast<int64_t>(query.size()) / (hq * d);
  const int64_t t = tokens(layer);
  std::vector<float> q(query.begin(), query.end());
  for (float& x : q) x = Round(x, shape_.dtype);
  AttentionInputs in;
  in.layout = Layout::kBLHD;
  in.query = MakeTensorView(q.data(), DType::kFloat32, {1, lnew, hq, d});
  in.key = MakeTensorView(keys_[static_cast<size_t>(layer)].data(),
                          DType::kFloat32, {1, t, shape_.kv_heads, d});
  in.value = MakeTensorView(values_[static_cast<size_t>(layer)].data(),
                            DType::kFloat32, {1, t, shape_.kv_heads, dv});
  in.mask.causal = step.causal;
  in.mask.alignment = CausalAlignment::kBottomRight;
  in.mask.window_left = step.window_left;
  if (shape_.window_tokens > 0) {
    const int64_t own = shape_.window_tokens - 1;
    if (!in.mask.window_left || own < *in.mask.window_left) {
      in.mask.window_left = own;
    }
    in.mask.sink_tokens = shape_.sink_tokens;
  }
  in.mask.alibi_slopes = step.alibi_slopes;
  in.mask.relative_bias = step.relative_bias;
  in.scale = step.scale;
  in.softcap = step.softcap;
  in.sinks = step.sinks;
  std::vector<float> out(static_cast<size_t>(lnew * hq * dv));
  std::vector<float> w(static_cast<size_t>(hq * lnew * t));
  AttentionOutputs outputs;
  outputs.output =
      MakeMutableTensorView(out.data(), DType::kFloat32, {1, lnew, hq, dv});
  outputs.weights =
      MakeMutableTensorView(w.data(), DType::kFloat32, {1, hq, lnew, t});
  const absl::Status st = ReferenceAttention(in, outputs);
  if (!st.ok()) return st;
  if (weights != nullptr) *weights = std::move(w);
  return out;
}

OneTokenStep MakeOneTokenStep(const std::string& id,
                              const SessionMirror& mirror, int64_t hq,
                              uint64_t seed) {
  const MirrorShape& shape = mirror.shape();
  OneTokenStep step;
  const std::vector<float> q = RandomValues(seed, hq * shape.head_dim);
  step.key = RandomValues(seed + 1, int64_t{shape.kv_heads} * shape.head_dim);
  step.value =
      RandomValues(seed + 2, int64_t{shape.kv_heads} * shape.value_dim);
  v1::SessionQuery* part = step.request.add_sessions();
  part->set_session_id(id);
  *part->mutable_query() = WireRows(DType::kFloat32, 1, hq, shape.head_dim, q);
  *part->mutable_key() =
      WireRows(DType::kFloat32, 1, shape.kv_heads, shape.head_dim, step.key);
  *part->mutable_value() =
      WireRows(DType::kFloat32, 1, shape.kv_heads, shape.value_dim, step.value);
  part->set_position(mirror.tokens(0));
  return step;
}

std::string CheckOneTokenStep(const OneTokenStep& step,
                              const v1::AttendSessionsResponse& response,
                              double tolerance, SessionMirror* mirror) {
  mirror->Append(0, step.key, step.value);
  if (response.results_size() != 1 ||
      response.results(0).tokens() != mirror->tokens(0)) {
    return absl::StrCat("expected one result of ", mirror->tokens(0),
                        " tokens, got ",
                        response.ShortDebugString().substr(0, 200));
  }
  const v1::Tensor& query = step.request.sessions(0).query();
  absl::StatusOr<std::vector<float>> ref = mirror->Reference(
      0, query.shape(1), WireFloats(query), PagedAttentionInputs());
  if (!ref.ok()) return std::string(ref.status().message());
  const std::vector<float> got = WireFloats(response.results(0).output());
  if (got.size() != ref->size()) {
    return absl::StrCat("output of ", got.size(), " elements, expected ",
                        ref->size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - (*ref)[i]) <= tolerance)) {
      return absl::StrCat("output[", i, "] = ", got[i], ", reference ",
                          (*ref)[i], " (tolerance ", tolerance, ")");
    }
  }
  return "";
}

}  // namespace attnserve::testing
