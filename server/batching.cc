#include "server/batching.h"

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace attnserve::server {
namespace {

// Appends the bytes of `value` to a key.
template <typename T>
void Put(std::string* key, const T& value) {
  key->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void PutOptional(std::string* key, const std::optional<int64_t>& value) {
  Put(key, value.has_value());
  Put(key, value.value_or(0));
}

int64_t Bytes(const TensorView& view) {
  return view.num_elements() * static_cast<int64_t>(DTypeSize(view.dtype));
}

int64_t OutputBytes(const DecodedRequest& d) {
  int64_t elements = 1;
  for (int64_t x : d.plan.shape.output_shape) elements *= x;
  return elements * static_cast<int64_t>(DTypeSize(d.output_dtype));
}

int64_t WeightsBytes(const DecodedRequest& d) {
  if (!d.return_weights) return 0;
  int64_t elements = 1;
  for (int64_t x : d.plan.shape.weights_shape) elements *= x;
  return elements * static_cast<int64_t>(sizeof(float));
}

// The operands concatenated along their first (batch) axis.
struct Gathered {
  std::unique_ptr<char[]> bytes;
  TensorView view;
};

Gathered Gather(absl::Span<const BatchedAttend> members, int64_t batch,
                const TensorView& (*of)(const DecodedRequest&)) {
  int64_t total = 0;
  for (const BatchedAttend& m : members) total += Bytes(of(*m.decoded));
  Gathered g;
  g.bytes.reset(new char[static_cast<size_t>(total > 0 ? total : 1)]);
  int64_t offset = 0;
  for (const BatchedAttend& m : members) {
    const TensorView& v = of(*m.decoded);
    const int64_t n = Bytes(v);
    if (n > 0)
      std::memcpy(g.bytes.get() + offset, v.data, static_cast<size_t>(n));
    offset += n;
  }
  const TensorView& first = of(*members.front().decoded);
  std::array<int64_t, kMaxRank> shape = first.shape;
  shape[0] = batch;
  g.view = MakeTensorView(g.bytes.get(), first.dtype,
                          absl::MakeConstSpan(shape.data(), first.rank));
  return g;
}

}  // namespace

std::string AttendBatchKey(const DecodedRequest& decoded) {
  const AttentionInputs& in = decoded.inputs;
  const MaskSpec& mask = in.mask;
  const AttentionShape& s = decoded.plan.shape;
  // Shared-memory requests run alone: their output goes into the client's
  // region and their regions are checked after their own kernel.
  if (!decoded.shared_memory.empty() || decoded.output_data != nullptr ||
      decoded.weights_data != nullptr) {
    return "";
  }
  if (in.method != AttentionMethod::kSoftmax || mask.explicit_mask ||
      mask.block_sparse || !in.query.is_contiguous() ||
      !in.key.is_contiguous() || !in.value.is_contiguous()) {
    return "";
  }
  const KernelPath kernel = decoded.plan.kernel;
  if (kernel == KernelPath::kDecode) return "";
  std::string key = "attend/";
  key.reserve(160 + mask.alibi_slopes.size() * sizeof(float));
  Put(&key, in.layout);
  Put(&key, in.query.dtype);
  Put(&key, decoded.output_dtype);
  Put(&key, decoded.return_weights);
  Put(&key, in.kernel);
  Put(&key, kernel);
  for (int64_t x :
       {s.q_heads, s.kv_heads, s.q_len, s.k_len, s.head_dim, s.value_dim}) {
    Put(&key, x);
  }
  Put(&key, in.scale.has_value());
  Put(&key, in.scale.value_or(0.0f));
  Put(&key, mask.causal);
  Put(&key, mask.alignment);
  PutOptional(&key, mask.window_left);
  PutOptional(&key, mask.window_right);
  Put(&key, !mask.key_lengths.empty());
  Put(&key, mask.alibi_slopes.size());
  key.append(reinterpret_cast<const char*>(mask.alibi_slopes.data()),
             mask.alibi_slopes.size() * sizeof(float));
  return key;
}

int64_t AttendBatchBytes(absl::Span<const BatchedAttend> members) {
  int64_t total = 0;
  for (const BatchedAttend& m : members) {
    const DecodedRequest& d = *m.decoded;
    total += Bytes(d.inputs.query) + Bytes(d.inputs.key) +
             Bytes(d.inputs.value) +
             static_cast<int64_t>(d.inputs.mask.key_lengths.size() *
                                  sizeof(int32_t)) +
             OutputBytes(d) + WeightsBytes(d);
  }
  return total;
}

absl::Status RunAttendBatch(absl::Span<const BatchedAttend> members,
                            AttentionEngine& engine) {
  if (members.empty()) return absl::OkStatus();
  const DecodedRequest& first = *members.front().decoded;
  int64_t batch = 0;
  for (const BatchedAttend& m : members) batch += m.decoded->plan.shape.batch;

  AttentionInputs inputs = first.inputs;
  const Gathered query =
      Gather(members, batch, [](const DecodedRequest& d) -> const TensorView& {
        return d.inputs.query;
      });
  const Gathered key =
      Gather(members, batch, [](const DecodedRequest& d) -> const TensorView& {
        return d.inputs.key;
      });
  const Gathered value =
      Gather(members, batch, [](const DecodedRequest& d) -> const TensorView& {
        return d.inputs.value;
      });
  inputs.query = query.view;
  inputs.key = key.view;
  inputs.value = value.view;
  std::vector<int32_t> key_lengths;
  if (!first.inputs.mask.key_lengths.empty()) {
    key_lengths.reserve(static_cast<size_t>(batch));
    for (const BatchedAttend& m : members) {
      const absl::Span<const int32_t> k = m.decoded->inputs.mask.key_lengths;
      key_lengths.insert(key_lengths.end(), k.begin(), k.end());
    }
    inputs.mask.key_lengths = key_lengths;
  }

  int64_t output_bytes = 0, weights_bytes = 0;
  for (const BatchedAttend& m : members) {
    output_bytes += OutputBytes(*m.decoded);
    weights_bytes += WeightsBytes(*m.decoded);
  }
  std::unique_ptr<char[]> output(
      new char[static_cast<size_t>(output_bytes > 0 ? output_bytes : 1)]);
  std::unique_ptr<char[]> weights;
  AttentionOutputs outputs;
  std::array<int64_t, 4> output_shape = first.plan.shape.output_shape;
  output_shape[0] = batch;
  outputs.output =
      MakeMutableTensorView(output.get(), first.output_dtype, output_shape);
  if (first.return_weights) {
    weights.reset(
        new char[static_cast<size_t>(weights_bytes > 0 ? weights_bytes : 1)]);
    std::array<int64_t, 4> weights_shape = first.plan.shape.weights_shape;
    weights_shape[0] = batch;
    outputs.weights =
        MakeMutableTensorView(weights.get(), DType::kFloat32, weights_shape);
  }
  const absl::Status status = engine.Run(inputs, outputs);
  if (!status.ok()) return status;

  int64_t output_offset = 0, weights_offset = 0;
  for (const BatchedAttend& m : members) {
    const AttentionOutputs mine = PrepareResponse(*m.decoded, m.response);
    const int64_t n = OutputBytes(*m.decoded);
    if (n > 0) {
      std::memcpy(mine.output.data, output.get() + output_offset,
                  static_cast<size_t>(n));
    }
    output_offset += n;
    if (mine.weights) {
      const int64_t w = WeightsBytes(*m.decoded);
      if (w > 0) {
        std::memcpy(mine.weights->data, weights.get() + weights_offset,
                    static_cast<size_t>(w));
      }
      weights_offset += w;
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
