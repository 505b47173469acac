#ifndef ATTNSERVE_MODEL_LAYER_OPS_H_
#define ATTNSERVE_MODEL_LAYER_OPS_H_

// Internal: the elementwise steps of a hosted layer, on f32 rows: layer
// norm, sinusoidal positional encoding, rotary embedding.

#include <cstdint>

namespace attnserve::model {

// y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta for each of `rows`
// rows of `dim` (biased variance, as PyTorch's LayerNorm). y may be x.
void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* gamma,
               const float* beta, double eps, float* y);

// x[r] += PE(position(r)) with PE(p, 2i) = sin(p / 10000^(2i/dim)),
// PE(p, 2i+1) = cos(p / 10000^(2i/dim)) (Vaswani et al.). position(r) is
// positions[r] when given, else r % period (rows of sequences of `period`
// tokens).
void AddSinusoidal(float* x, int64_t rows, int64_t dim,
                   const int32_t* positions, int64_t period);

// Transformer-XL's encoding of relative distances first, first + 1, ...:
// row t of out [rows, dim] (dim even) is [sin(p·f), cos(p·f)] with p = first
// + t and f_i = 10000^(-2i/dim), i < dim / 2 (the sines, then the cosines).
void RelativeSinusoid(int64_t first, int64_t rows, int64_t dim, float* out);

// Rotates each head of each row in place, rotate-half convention: for i in
// [0, head_dim/2), with angle = position(r) * theta^(-2i/head_dim),
//   (x[i], x[i + head_dim/2]) <- (x[i] cos - x[i+h] sin, x[i+h] cos + x[i]
//   sin).
// A row holds `heads` heads of head_dim (even) at a stride of `row_stride`.
// position(r) as for AddSinusoidal.
void ApplyRope(float* x, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t row_stride, const int32_t* positions, int64_t period,
               double theta);

// Linformer's projection along the sequence: for each batch element b,
// out[b] = proj[:, :len_b] · x[b][:len_b] with x [B, Lk, width] and proj
// [k, max_len] (row-major), out [B, k, width]; len_b = lengths[b] when given
// (padding keys take no part), else Lk. Lk <= max_len.
void ProjectAlongSequence(const float* x, int64_t batch, int64_t k_len,
                          int64_t width, const float* proj, int64_t k,
                          int64_t max_len, const int32_t* lengths, float* out);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_LAYER_OPS_H_
