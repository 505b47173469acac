#include "core/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/problem.h"
#include "core/status_macros.h"
#include "core/variants/linear.h"
#include "core/variants/lsh.h"

namespace attnserve {

absl::Status ReferenceAttention(const AttentionInputs& inputs,
                                const AttentionOutputs& outputs) {
  ASSIGN_OR_RETURN(const Problem p, ResolveProblem(inputs));
  ASSIGN_OR_RETURN(const Strides4 out_strides, ResolveOutput(p, outputs));
  switch (p.method) {
    case AttentionMethod::kLinear:
      return ReferenceLinear(p, outputs, out_strides);
    case AttentionMethod::kLsh:
      return ReferenceLsh(p, outputs, out_strides);
    case AttentionMethod::kSoftmax:
      break;
  }
  const AttentionShape& s = p.shape;
  const MutableTensorView& out = outputs.output;
  const MutableTensorView* weights =
      outputs.weights ? &*outputs.weights : nullptr;
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  // T5's bias by its formula per element (the kernels read a table of it).
  const RelativeBiasSpec* relative_bias =
      inputs.mask.relative_bias ? &*inputs.mask.relative_bias : nullptr;

  std::vector<double> scores(s.k_len);
  std::vector<bool> allowed(s.k_len);
  std::vector<double> acc(s.value_dim);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.q_heads; ++h) {
      const int64_t kv_head = h / p.group;
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t diag = i + p.diag_offset;
        int64_t lo, hi;
        p.KeyRange(b, i, &lo, &hi);
        const int64_t sink_end = p.SinkEnd(lo, hi);
        const int64_t q_row = p.q_strides.offset(b, h, i);
        double max_score = kMinusInf;
        bool any_allowed = false;
        for (int64_t j = 0; j < s.k_len; ++j) {
          allowed[j] =
              ((lo <= j && j < hi) || j < sink_end) &&
              (p.block_layout == nullptr || p.block_layout->Allowed(i, j));
          double bias = 0.0;
          if (allowed[j] && p.mask != nullptr) {
            const float m = LoadAsFloat(
                p.mask, p.mask_dtype,
                p.mask_strides.offset(b, h, i) + j * p.mask_strides.col);
            if (p.mask_dtype == DType::kBool) {
              allowed[j] = m != 0.0f;
            } else {
              bias = m;
            }
          }
          if (!allowed[j]) continue;
          const int64_t k_row = p.k_strides.offset(b, kv_head, j);
          double dot = 0.0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            dot += static_cast<double>(
                       LoadAsFloat(p.q, p.dtype, q_row + d * p.q_strides.col)) *
                   LoadAsFloat(p.k, p.dtype, k_row + d * p.k_strides.col);
          }
          double score = static_cast<double>(p.scale) * dot;
          if (p.softcap > 0) {
            const double cap = p.softcap;
            score = cap * std::tanh(score / cap);
          }
          score += bias;
          if (p.relk_table != nullptr) {
            // scale · (q_i + query_bias[h]) · table[h][t], t of j - d(i).
            const void* r = p.RelativeKey(h, p.RelativeKeyRow(diag - j));
            double pos = 0.0;
            for (int64_t d = 0; d < s.head_dim; ++d) {
              double qd =
                  LoadAsFloat(p.q, p.dtype, q_row + d * p.q_strides.col);
              if (p.relk_query_bias != nullptr) {
                qd += p.relk_query_bias[h * s.head_dim + d];
              }
              pos += qd * LoadAsFloat(r, DType::kFloat32, d);
            }
            score += static_cast<double>(p.scale) * pos;
          }
          if (relative_bias != nullptr) {
            score += relative_bias->table[static_cast<size_t>(
                h * relative_bias->num_buckets +
                RelativeBucket(*relative_bias, j - diag))];
          }
          if (p.alibi != nullptr) {
            score -= static_cast<double>(p.alibi[h]) *
                     static_cast<double>(std::llabs(diag - j));
          }
          scores[j] = score;
          any_allowed = true;
          // A NaN score (from a NaN input) makes the whole row NaN, as in
          // PyTorch; std::max alone would drop it when it comes first.
          max_score = std::isnan(score) ? score : std::max(max_score, score);
        }

        std::fill(acc.begin(), acc.end(), 0.0);
        const bool zero_row = !any_allowed || max_score == kMinusInf;
        // The sink's term is in the sum (and the shift: the largest logit,
        // the sink's included), with no value.
        double sum = 0.0;
        if (!zero_row) {
          if (p.sinks != nullptr) {
            const double sink = p.sinks[h];
            max_score =
                std::isnan(max_score) ? max_score : std::max(max_score, sink);
            sum += std::exp(sink - max_score);
          }
          for (int64_t j = 0; j < s.k_len; ++j) {
            if (allowed[j]) sum += std::exp(scores[j] - max_score);
          }
        }
        double entropy = 0.0, max_weight = 0.0;
        for (int64_t j = 0; j < s.k_len; ++j) {
          double prob = 0.0;
          if (!zero_row && allowed[j]) {
            prob = std::exp(scores[j] - max_score) / sum;
            if (prob > 0.0) entropy -= prob * std::log(prob);
            max_weight = std::isnan(prob) ? prob : std::max(max_weight, prob);
            const int64_t v_row = p.v_strides.offset(b, kv_head, j);
            for (int64_t c = 0; c < s.value_dim; ++c) {
              acc[c] +=
                  prob * LoadAsFloat(p.v, p.dtype, v_row + c * p.v_strides.col);
            }
          }
          if (weights != nullptr) {
            const int64_t w = b * weights->strides[0] +
                              h * weights->strides[1] +
                              i * weights->strides[2] + j * weights->strides[3];
            StoreFromFloat(weights->data, DType::kFloat32, w,
                           static_cast<float>(prob));
          }
        }
        const int64_t stats_at = (b * s.q_heads + h) * s.q_len + i;
        if (std::isnan(max_weight)) entropy = max_weight;
        if (outputs.entropy) {
          static_cast<float*>(outputs.entropy->data)[stats_at] =
              static_cast<float>(entropy);
        }
        if (outputs.max_weight) {
          static_cast<float*>(outputs.max_weight->data)[stats_at] =
              static_cast<float>(max_weight);
        }
        const int64_t out_row = out_strides.offset(b, h, i);
        for (int64_t c = 0; c < s.value_dim; ++c) {
          StoreFromFloat(out.data, out.dtype, out_row + c * out_strides.col,
                         static_cast<float>(acc[c]));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve
