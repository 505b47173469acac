#ifndef ATTNSERVE_CORE_SCORING_H_
#define ATTNSERVE_CORE_SCORING_H_

// Score functions other than the scaled dot product, for hosted layers whose
// scores the engine then masks and normalizes (passed as an additive explicit
// mask with scale 0).

#include <cstdint>

#include "absl/status/status.h"
#include "core/attention.h"

namespace attnserve {

// Bahdanau (additive) scores of projected queries and keys:
//   scores[b, h, i, j] = sum_a v[h, a] * tanh(qa[b, i, h, a] + ka[b, j, h, a])
// qa is [B, Lq, H, A], ka [B, Lk, H, A], v [H, A], all dense f32; scores is
// dense f32 [B, H, Lq, Lk]. Runs on `num_threads` OpenMP threads (>= 1) with
// the vectorized tanh of `isa` (one the CPU runs, or kAuto for its best;
// AttentionEngine::isa() gives the one in use). InvalidArgument for negative
// dimensions, num_threads < 1 or an ISA the CPU does not run.
absl::Status AdditiveScores(const float* qa, const float* ka, const float* v,
                            int64_t batch, int64_t heads, int64_t q_len,
                            int64_t k_len, int64_t dim, int num_threads,
                            Isa isa, float* scores);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_SCORING_H_
