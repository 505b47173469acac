#ifndef ATTNSERVE_CORE_VARIANTS_LINEAR_H_
#define ATTNSERVE_CORE_VARIANTS_LINEAR_H_

// Internal: linear attention (LinearSpec in core/attention.h) for the engine
// and the reference. ResolveProblem resolves the call with method kLinear and
// calls CheckLinear; once checked, the mask holds only causal and key_lengths.

#include "absl/status/status.h"
#include "core/attention.h"
#include "core/kernel_common.h"
#include "core/problem.h"

namespace attnserve {

// Checks p.linear's fields and that the mask can be linearised:
// InvalidArgument naming the field ("linear.num_features", "mask.alibi_slopes")
// and saying why.
absl::Status CheckLinear(const Problem& p);

// The FLOPs of the call (AttentionShape::flops).
double LinearFlops(const Problem& p);

// Computes the call into `outputs` (output strides `out_strides` as
// ResolveOutput gives them; weights, when present, dense f32 [B, Hq, Lq, Lk])
// with the engine's resources.
absl::Status RunLinear(const Problem& p, const AttentionOutputs& outputs,
                       const Strides4& out_strides,
                       const VariantContext& context);

// The float64 oracle of the same semantics, plainly.
absl::Status ReferenceLinear(const Problem& p, const AttentionOutputs& outputs,
                             const Strides4& out_strides);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VARIANTS_LINEAR_H_
