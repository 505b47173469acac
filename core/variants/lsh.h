#ifndef ATTNSERVE_CORE_VARIANTS_LSH_H_
#define ATTNSERVE_CORE_VARIANTS_LSH_H_

// Internal: LSH attention (LshSpec in core/attention.h) for the engine and
// the reference. ResolveProblem resolves the call with method kLsh, the key
// being the query (shared-QK, Hkv = Hq), and calls CheckLsh; once checked, the
// mask holds only causal and key_lengths.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/attention.h"
#include "core/kernel_common.h"
#include "core/problem.h"

namespace attnserve {

// Checks p.lsh's fields and the mask parts it supports:
// InvalidArgument naming the field ("lsh.num_buckets", "mask.alibi_slopes")
// and saying why.
absl::Status CheckLsh(const Problem& p);

// The random rotations of a call, in double: num_hashes matrices of
// head_dim x num_buckets/2 standard normals, laid out [round][d][column]
// (empty when num_buckets is 1). One SplitMix64 stream seeded with
// spec.seed; each pair of draws (a, b) gives, by Box-Muller,
// u1 = ((a >> 11) + 1) * 2^-53 in (0, 1], u2 = (b >> 11) * 2^-53 in [0, 1),
// r = sqrt(-2 ln u1), the normals r cos(2 pi u2) then r sin(2 pi u2); the
// normals fill the layout in order (round, then row d, then column), an
// unused last sine is dropped. Round r's matrix therefore does not depend on
// num_hashes. docs/long_sequences.md ("LSH attention") repeats this for
// clients.
std::vector<double> LshRotations(const LshSpec& spec, int64_t head_dim);

// The FLOPs of the call (AttentionShape::flops).
double LshFlops(const Problem& p);

// Computes the call into `outputs` (output strides `out_strides` as
// ResolveOutput gives them; weights, when present, dense f32 [B, Hq, Lq, Lk])
// with the engine's resources.
absl::Status RunLsh(const Problem& p, const AttentionOutputs& outputs,
                    const Strides4& out_strides, const VariantContext& context);

// The float64 oracle of the same semantics, plainly.
absl::Status ReferenceLsh(const Problem& p, const AttentionOutputs& outputs,
                          const Strides4& out_strides);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_VARIANTS_LSH_H_
