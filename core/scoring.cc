#include "core/scoring.h"

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "core/vec_ops.h"

namespace attnserve {

absl::Status AdditiveScores(const float* qa, const float* ka, const float* v,
                            int64_t batch, int64_t heads, int64_t q_len,
                            int64_t k_len, int64_t dim, int num_threads,
                            Isa isa, float* scores) {
  if (batch < 0 || heads < 0 || q_len < 0 || k_len < 0 || dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdditiveScores: negative dimension in B=", batch,
                     " H=", heads, " Lq=", q_len, " Lk=", k_len, " A=", dim));
  }
  if (num_threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AdditiveScores: num_threads must be >= 1, got ", num_threads));
  }
  const absl::StatusOr<Isa> runs = ResolveIsa(isa);
  if (!runs.ok()) {
    return absl::Status(
        runs.status().code(),
        absl::StrCat("AdditiveScores: ", runs.status().message()));
  }
  const VecOps& ops = VecOpsFor(*runs);
  const int64_t rows = batch * heads * q_len;
  const int threads = static_cast<int>(
      rows < num_threads ? (rows > 0 ? rows : 1) : num_threads);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = row % q_len;
    const int64_t h = (row / q_len) % heads;
    const int64_t b = row / (q_len * heads);
    const float* q_row = qa + ((b * q_len + i) * heads + h) * dim;
    const float* v_row = v + h * dim;
    float* out = scores + row * k_len;
    for (int64_t j = 0; j < k_len; ++j) {
      out[j] = ops.tanh_dot(q_row, ka + ((b * k_len + j) * heads + h) * dim,
                            v_row, dim);
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
