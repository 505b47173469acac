#ifndef ATTNSERVE_MODEL_ATTENTION_LAYER_H_
#define ATTNSERVE_MODEL_ATTENTION_LAYER_H_

// A hosted multi-head attention layer (docs/models.md): projections,
// positional encoding, attention through the core engine (or the general and
// additive score functions), output projection, residual and layer norm.

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/attention.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace attnserve::model {

struct LayerInputs {
  // [B, Lq, d_model], f32, bf16 or f16, dense last dimension.
  TensorView hidden;
  // Cross-attention: [B, Lk, d_model], the hidden's dtype. Unset =
  // self-attention (keys and values from the hidden states).
  std::optional<TensorView> memory;
  // The core's mask parts over [B, Hq, Lq, Lk] (an explicit mask of any
  // broadcastable shape, causal, window, key_lengths, ALiBi).
  MaskSpec mask;
  // Empty, or [B·Lq] int32 >= 0: the positions of the hidden tokens (queries,
  // and keys in self-attention); default 0..Lq-1. Memory tokens sit at
  // 0..Lk-1.
  absl::Span<const int32_t> positions;
  // Whether the caller will ask for weights (a Linformer layer has none per
  // key: Validate refuses them).
  bool return_weights = false;
};

struct LayerOutputs {
  // [B, Lq, d_model] in any float dtype, dense.
  MutableTensorView output;
  // f32 [B, Hq, Lq, Lk], dense, when requested.
  std::optional<MutableTensorView> weights;
};

struct LayerShape {
  int64_t batch = 0, q_len = 0, k_len = 0;
  // The attention's own FLOPs (AttentionShape::flops of the engine call the
  // layer makes: dense, or the variant's count), set by Validate.
  double attention_flops = 0;
};

class AttentionLayer {
 public:
  // Packs the weights (the config must be the one they were loaded for) and
  // warms the layer up: creates the attention's product primitives for every
  // Lq and Lk (shared by every engine of the process, AttentionEngine::Prepare)
  // and makes one call of 100 rows on zeros (full and padded tiles), so that a
  // server's first call is not the one that pays for oneDNN's first executions.
  // Internal when oneDNN fails.
  static absl::StatusOr<std::unique_ptr<AttentionLayer>> Create(
      const ModelConfig& config, const LayerWeights& weights);
  ~AttentionLayer();
  AttentionLayer(const AttentionLayer&) = delete;
  AttentionLayer& operator=(const AttentionLayer&) = delete;

  // InvalidArgument naming the field (hidden, memory, positions, mask) with
  // the expected and actual values. `engine` checks the mask against the
  // attention the layer would run (it reads no tensor data).
  absl::StatusOr<LayerShape> Validate(const LayerInputs& inputs,
                                      const AttentionEngine& engine) const;

  // Validates and computes with `engine` (and its thread count and ISA for
  // the projections and score functions; the count is the calling thread's
  // OpenMP thread count during the call, restored after it). Thread-safe:
  // concurrent Runs need their own engines.
  absl::Status Run(const LayerInputs& inputs, const LayerOutputs& outputs,
                   AttentionEngine& engine) const;

  // One call of 100 rows on zeros with `engine` on the calling thread, so
  // that the thread's and the engine's first-use set-up (the OpenMP team of
  // the engine's threads, the thread's oneDNN stream and scratch, the
  // engine's workspaces, the first touch of the thread's malloc arena) is
  // paid here and not by a request: a server's worker runs it for every
  // hosted layer before it takes tasks. Before the call it touches and frees
  // twice the heap a call of 1024 rows works in (base::TouchHeap of
  // 2 × WorkingBytes, at most 32 MiB: the call's buffers, its input and
  // output and the gaps between them): where freed memory stays in the
  // process, as in the server (base/malloc_policy.h), a later call with more
  // rows than any before it then finds its buffers' pages resident instead
  // of page-faulting them in. Loading (Create) makes the call only. Same
  // errors as Run.
  absl::Status WarmUp(AttentionEngine& engine) const;

  // FLOPs of a call of `shape` (as Validate returns it): projections,
  // Linformer's projections along the sequence, the attention and the score
  // functions.
  double Flops(const LayerShape& shape) const;

  // An upper bound of the f32 buffers a call of `shape` works in (hidden
  // states and memory, q, k, v, attention and output rows), for the server's
  // memory budget.
  int64_t WorkingBytes(const LayerShape& shape) const;

  // The config the layer was created with, additive_dim filled in from the
  // weights for additive scoring.
  const ModelConfig& config() const;

 private:
  struct Impl;
  explicit AttentionLayer(std::unique_ptr<Impl> impl);
  // Prepare's primitives and WarmUpCall on a one-thread engine of its own.
  absl::Status WarmUpAtLoad() const;
  // WarmUp's call of 100 rows on zeros.
  absl::Status WarmUpCall(AttentionEngine& engine) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_ATTENTION_LAYER_H_
