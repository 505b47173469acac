#ifndef ATTNSERVE_CORE_REFERENCE_H_
#define ATTNSERVE_CORE_REFERENCE_H_

#include "absl/status/status.h"
#include "core/attention.h"

namespace attnserve {

// The oracle: computes exactly the semantics of AttentionEngine::Run (see
// MaskSpec and docs/core.md "Semantics") plainly, one query row at a time,
// accumulating in double. Inputs are read as the values their dtype holds;
// results are rounded once to the output dtype. No rounding of P to bf16 is
// modelled. Validates like the engine and returns the same InvalidArgument
// errors. Slow: O(B·Hq·Lq·Lk·(D + Dv)) scalar work, single-threaded.
// Thread-safe.
absl::Status ReferenceAttention(const AttentionInputs& inputs,
                                const AttentionOutputs& outputs);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_REFERENCE_H_
