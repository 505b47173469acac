#ifndef ATTNSERVE_CORE_VARIANTS_LSH_H_
#define ATTNSERVE_CORE_VARIANTS_LSH_H_

// Internal: LSH attention (LshSpec in core/attention.h) for the engine and
// the reference. ResolveProblem resolves the call with method kLsh, the key
// being the query (shared-QK, Hkv = Hq), and calls CheckLsh; once checked, the
// mask holds only causal and key_lengths.

#include "absl/status/status.h"
#include "core/attention.h"
#include "core/problem.h"
#include "core/vec_ops.h"

namespace attnserve {

// Checks p.lsh's fields and the mask parts it supports:
// InvalidArgument naming the field ("lsh.num_buckets", "mask.alibi_slopes")
// and saying why.
absl::Status CheckLsh(const Problem& p);

// The FLOPs of the call (AttentionShape::flops).
double LshFlops(const Problem& p);

// Computes the call into `outputs` (output strides `out_strides` as
// ResolveOutput gives them; weights, when present, dense f32 [B, Hq, Lq, Lk]).
absl::Status RunLsh(const Problem& p, const AttentionOutputs& outputs,
                    const Strides4& out_strides, const VecOps& ops,
                    int num_threads);

// The float64 oracle of the same semantics, plainly.
absl::Status ReferenceLsh(const Problem& p, const AttentionOutputs& outputs,
                          const Strides4& out_strides);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VARIANTS_LSH_H_
