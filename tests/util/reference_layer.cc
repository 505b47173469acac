#include "tests/util/reference_layer.h"

#include <cmath>

#include "core/convert.h"
#include "core/reference.h"

namespace attnserve::model::testing {
namespace {

using Rows = std::vector<double>;

double Round(double v, bool bf16) {
  return bf16 ? BFloat16ToFloat(FloatToBFloat16(static_cast<float>(v))) : v;
}

// y[r, o] = sum_i x[r, i] * w[o, i] (+ b[o]), w [out, in] (Linear).
Rows Linear(const Rows& x, int64_t rows, int64_t in, int64_t out,
            const std::vector<float>& w, const std::vector<float>* b,
            bool bf16) {
  Rows y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b != nullptr ? (*b)[static_cast<size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        s += Round(x[static_cast<size_t>(r * in + i)], bf16) *
             Round(w[static_cast<size_t>(o * in + i)], bf16);
      }
      y[static_cast<size_t>(r * out + o)] = s;
    }
  }
  return y;
}

void Norm(Rows* x, int64_t rows, int64_t dim, const LayerWeights& w,
          double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double* v = x->data() + r * dim;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < dim; ++c) mean += v[c];
    mean /= dim;
    for (int64_t c = 0; c < dim; ++c) var += (v[c] - mean) * (v[c] - mean);
    var /= dim;
    for (int64_t c = 0; c < dim; ++c) {
      v[c] = (v[c] - mean) / std::sqrt(var + eps) * w.norm_weight[c] +
             w.norm_bias[c];
    }
  }
}

int64_t PositionOf(const LayerInputs& in, bool use_positions, int64_t row,
                   int64_t len) {
  return use_positions && !in.positions.empty() ? in.positions[row] : row % len;
}

void Rope(Rows* x, int64_t rows, int64_t heads, int64_t hd, double theta,
          const LayerInputs& in, bool use_positions, int64_t len) {
  for (int64_t r = 0; r < rows; ++r) {
    const double p = static_cast<double>(PositionOf(in, use_positions, r, len));
    for (int64_t h = 0; h < heads; ++h) {
      double* v = x->data() + (r * heads + h) * hd;
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle = p * std::pow(theta, -2.0 * i / hd);
        const double a = v[i], b = v[i + hd / 2];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + hd / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

std::vector<float> Floats(const Rows& x) {
  return std::vector<float>(x.begin(), x.end());
}

// Luong's local attention from the global weights `weights` [B, Hq, Lq, Lk]
// (softmax over what the call's mask allows): per query row, p_t (its
// position, or S·sigmoid(v_pᵀ tanh(W_p·src_t))), the weights renormalized
// over the keys within local_window of p_t (a softmax over the window), times
// local-p's Gaussian; then out [B, Lq, Hq, hd] = weights · v.
void LocalReference(const ModelConfig& c, const LayerWeights& w,
                    const LayerInputs& in, const Rows& src,
                    const std::vector<float>& v, int64_t b, int64_t lq,
                    int64_t lk, std::vector<float>* weights,
                    std::vector<float>* out) {
  const int64_t hq = c.num_heads, hd = c.head_dim, d = c.d_model;
  const int64_t group = hq / c.num_kv_heads;
  const double window = static_cast<double>(c.local_window);
  for (int64_t bb = 0; bb < b; ++bb) {
    for (int64_t i = 0; i < lq; ++i) {
      const int64_t r = bb * lq + i;
      double p = static_cast<double>(PositionOf(in, true, r, lq));
      if (c.local == LocalAttention::kPredictive) {
        double logit = 0;
        for (int64_t e = 0; e < c.local_dim; ++e) {
          double t = 0;
          for (int64_t f = 0; f < d; ++f) {
            t += w.local_w_p[e * d + f] * src[r * d + f];
          }
          logit += w.local_v_p[e] * std::tanh(t);
        }
        const double keys = in.mask.key_lengths.empty()
                                ? static_cast<double>(lk)
                                : in.mask.key_lengths[bb];
        p = keys / (1 + std::exp(-logit));
      }
      for (int64_t h = 0; h < hq; ++h) {
        float* row = weights->data() + ((bb * hq + h) * lq + i) * lk;
        Rows a(static_cast<size_t>(lk), 0.0);
        double total = 0;
        for (int64_t j = 0; j < lk; ++j) {
          const double key_position = static_cast<double>(
              in.memory ? j : PositionOf(in, true, bb * lq + j, lq));
          if (std::abs(key_position - p) <= window) {
            a[j] = row[j];
            total += row[j];
          }
          if (c.local == LocalAttention::kPredictive) {
            const double sigma = window / 2;
            a[j] *= std::exp(-(key_position - p) * (key_position - p) /
                             (2 * sigma * sigma));
          }
        }
        for (int64_t e = 0; e < hd; ++e) {
          double sum = 0;
          for (int64_t j = 0; j < lk; ++j) {
            const double weight = total > 0 ? a[j] / total : 0.0;
            sum += weight *
                   v[((bb * lk + j) * c.num_kv_heads + h / group) * hd + e];
          }
          (*out)[((bb * lq + i) * hq + h) * hd + e] = static_cast<float>(sum);
        }
        for (int64_t j = 0; j < lk; ++j) {
          row[j] = static_cast<float>(total > 0 ? a[j] / total : 0.0);
        }
      }
    }
  }
}

}  // namespace

absl::Status ReferenceLayer(const ModelConfig& c, const LayerWeights& w,
                            const LayerInputs& in, std::vector<float>* output,
                            std::vector<float>* attention_weights) {
  const bool bf16 = c.dtype == ModelDType::kBFloat16;
  const int64_t b = in.hidden.shape[0], lq = in.hidden.shape[1];
  const int64_t lk = in.memory ? in.memory->shape[1] : lq;
  const int64_t d = c.d_model, hd = c.head_dim, hq = c.num_heads,
                hkv = c.num_kv_heads;
  auto load = [](const TensorView& t) {
    Rows v(static_cast<size_t>(t.num_elements()));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = LoadAsFloat(t.data, t.dtype, static_cast<int64_t>(i));
    }
    return v;
  };
  Rows x = load(in.hidden);
  Rows mem = in.memory ? load(*in.memory) : Rows();
  if (c.positional == Positional::kSinusoidal) {
    auto add_pe = [d](Rows* v, int64_t rows, const LayerInputs& in,
                      bool use_positions, int64_t len) {
      for (int64_t r = 0; r < rows; ++r) {
        const double p = PositionOf(in, use_positions, r, len);
        for (int64_t i = 0; i < d; ++i) {
          const double angle = p / std::pow(10000.0, 2.0 * (i / 2) / d);
          (*v)[r * d + i] += i % 2 == 0 ? std::sin(angle) : std::cos(angle);
        }
      }
    };
    add_pe(&x, b * lq, in, true, lq);
    if (in.memory) add_pe(&mem, b * lk, in, false, lk);
  }
  Rows src = x;
  if (c.norm == NormPlacement::kPre) Norm(&src, b * lq, d, w, c.norm_eps);
  const Rows& kv_src = in.memory ? mem : src;
  const bool bias = c.bias;
  Rows q = Linear(src, b * lq, d, hq * hd, w.q_proj_weight,
                  bias ? &w.q_proj_bias : nullptr, bf16);
  const bool lsh = c.attention == AttentionKind::kLsh;
  // LSH attention has no key projection: its keys are its queries.
  Rows k = lsh ? Rows()
               : Linear(kv_src, b * lk, d, hkv * hd, w.k_proj_weight,
                        bias ? &w.k_proj_bias : nullptr, bf16);
  Rows v = Linear(kv_src, b * lk, d, hkv * hd, w.v_proj_weight,
                  bias ? &w.v_proj_bias : nullptr, bf16);
  if (c.positional == Positional::kRope) {
    Rope(&q, b * lq, hq, hd, c.rope_theta, in, true, lq);
    if (!lsh) {
      Rope(&k, b * lk, hkv, hd, c.rope_theta, in, !in.memory,
           in.memory ? lk : lq);
    }
  }
  // Linformer: k learned mixtures of the (unpadded) keys and values.
  int64_t kv_len = lk;
  if (c.attention == AttentionKind::kLinformer) {
    kv_len = c.linformer_k;
    const int64_t width = hkv * hd;
    auto project = [&](const Rows& t, const std::vector<float>& e) {
      Rows out(static_cast<size_t>(b * kv_len * width), 0.0);
      for (int64_t bb = 0; bb < b; ++bb) {
        const int64_t len =
            in.mask.key_lengths.empty() ? lk : in.mask.key_lengths[bb];
        for (int64_t r = 0; r < kv_len; ++r) {
          for (int64_t j = 0; j < len; ++j) {
            const double wj = e[r * c.linformer_max_len + j];
            for (int64_t col = 0; col < width; ++col) {
              out[(bb * kv_len + r) * width + col] +=
                  wj * t[(bb * lk + j) * width + col];
            }
          }
        }
      }
      return out;
    };
    k = project(k, w.linformer_e);
    v = project(v, w.linformer_f);
  }
  // Transformer-XL: the content bias u joins the queries.
  const bool relative = c.positional == Positional::kRelative;
  if (relative) {
    for (int64_t r = 0; r < b * lq; ++r) {
      for (int64_t e = 0; e < hq * hd; ++e)
        q[r * hq * hd + e] += w.relative_u[e];
    }
  }
  for (Rows* t : {&q, &k, &v}) {
    for (double& e : *t) e = Round(e, bf16);
  }

  AttentionInputs attention;
  attention.layout = Layout::kBLHD;
  if (c.attention != AttentionKind::kLinformer) attention.mask = in.mask;
  if (c.attention == AttentionKind::kLinear) {
    attention.method = AttentionMethod::kLinear;
    attention.linear = {c.feature_map, c.num_features, c.seed};
  } else if (lsh) {
    attention.method = AttentionMethod::kLsh;
    attention.lsh = {c.num_hashes, c.num_buckets, c.chunk_size, c.seed};
  }
  std::vector<float> scores;
  if (c.scoring == Scoring::kGeneral) {
    Rows g(q.size());
    for (int64_t r = 0; r < b * lq; ++r) {
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t j = 0; j < hd; ++j) {
          double s = 0;
          for (int64_t i = 0; i < hd; ++i) {
            s += q[(r * hq + h) * hd + i] *
                 Round(w.general_weight[(h * hd + i) * hd + j], bf16);
          }
          g[(r * hq + h) * hd + j] = Round(s, bf16);
        }
      }
    }
    q = g;
    attention.scale = 1.0f;
  } else if (c.scoring == Scoring::kDot) {
    attention.scale = 1.0f;
  } else if (c.scoring == Scoring::kAdditive) {
    const int64_t a = w.additive_dim, group = hq / hkv;
    scores.assign(static_cast<size_t>(b * hq * lq * lk), 0.0f);
    for (int64_t bb = 0; bb < b; ++bb) {
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t i = 0; i < lq; ++i) {
          for (int64_t j = 0; j < lk; ++j) {
            double s = 0;
            for (int64_t e = 0; e < a; ++e) {
              double t = 0;
              for (int64_t f = 0; f < hd; ++f) {
                t += q[((bb * lq + i) * hq + h) * hd + f] *
                         Round(w.additive_w_query[(h * a + e) * hd + f], bf16) +
                     k[((bb * lk + j) * hkv + h / group) * hd + f] *
                         Round(w.additive_w_key[(h * a + e) * hd + f], bf16);
              }
              s += w.additive_v[h * a + e] * std::tanh(t);
            }
            float& out = scores[((bb * hq + h) * lq + i) * lk + j];
            out = static_cast<float>(s);
            if (in.mask.explicit_mask) {
              // The explicit mask broadcast from the right.
              const TensorView& m = *in.mask.explicit_mask;
              const int64_t index[4] = {bb, h, i, j};
              int64_t offset = 0;
              for (int axis = 0; axis < m.rank; ++axis) {
                const int64_t full_axis = 4 - m.rank + axis;
                if (m.shape[axis] != 1) {
                  offset += index[full_axis] * m.strides[axis];
                }
              }
              const float mv = LoadAsFloat(m.data, m.dtype, offset);
              if (m.dtype == DType::kBool) {
                if (mv == 0) out = -INFINITY;
              } else {
                out += mv;
              }
            }
          }
        }
      }
    }
    attention.mask.explicit_mask =
        MakeTensorView(scores.data(), DType::kFloat32, {b, hq, lq, lk});
    attention.scale = 0.0f;
  }
  std::vector<float> relative_scores;
  if (relative) {
    // Transformer-XL's position term by its formula, as a float mask:
    // scale · (q_i + v) · W_R·R(d(i) − j), R(p) = [sin(p·f), cos(p·f)] with
    // f_i = 10000^(−2i/d_model); q here holds q + u.
    if (in.mask.explicit_mask) {
      return absl::UnimplementedError(
          "the reference's relative layer takes no explicit mask");
    }
    const double scale = c.scoring == Scoring::kDot ? 1.0 : 1.0 / std::sqrt(hd);
    const int64_t o =
        in.mask.alignment == CausalAlignment::kBottomRight ? lk - lq : 0;
    // r_h(p) for every distance p = d(i) − j, [distance][h][e], once each.
    const int64_t first = o - (lk - 1), distances = lq + lk - 1;
    Rows r(static_cast<size_t>(distances * hq * hd), 0.0);
    std::vector<double> enc(static_cast<size_t>(d));
    for (int64_t t = 0; t < distances; ++t) {
      const double p = static_cast<double>(first + t);
      for (int64_t f = 0; f < d / 2; ++f) {
        const double angle = p * std::pow(10000.0, -2.0 * f / d);
        enc[f] = std::sin(angle);
        enc[d / 2 + f] = std::cos(angle);
      }
      for (int64_t he = 0; he < hq * hd; ++he) {
        for (int64_t f = 0; f < d; ++f) {
          r[t * hq * hd + he] += w.relative_w_r[he * d + f] * enc[f];
        }
      }
    }
    relative_scores.resize(static_cast<size_t>(b * hq * lq * lk));
    for (int64_t bb = 0; bb < b; ++bb) {
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t i = 0; i < lq; ++i) {
          const double* qi = &q[((bb * lq + i) * hq + h) * hd];
          for (int64_t j = 0; j < lk; ++j) {
            const double* rp = &r[((i + o - j - first) * hq + h) * hd];
            double term = 0;
            for (int64_t e = 0; e < hd; ++e) {
              // (q + u) + (v − u) = q + v.
              term += (qi[e] + w.relative_v[h * hd + e] -
                       w.relative_u[h * hd + e]) *
                      rp[e];
            }
            relative_scores[((bb * hq + h) * lq + i) * lk + j] =
                static_cast<float>(scale * term);
          }
        }
      }
    }
    attention.mask.explicit_mask = MakeTensorView(
        relative_scores.data(), DType::kFloat32, {b, hq, lq, lk});
  }
  const std::vector<float> qf = Floats(q), kf = Floats(k), vf = Floats(v);
  attention.query = MakeTensorView(qf.data(), DType::kFloat32, {b, lq, hq, hd});
  if (!lsh) {
    attention.key =
        MakeTensorView(kf.data(), DType::kFloat32, {b, kv_len, hkv, hd});
  }
  attention.value =
      MakeTensorView(vf.data(), DType::kFloat32, {b, kv_len, hkv, hd});
  std::vector<float> attended(static_cast<size_t>(b * lq * hq * hd));
  AttentionOutputs outputs;
  outputs.output =
      MakeMutableTensorView(attended.data(), DType::kFloat32, {b, lq, hq, hd});
  // Local attention starts from the global weights.
  const bool local = c.local != LocalAttention::kNone;
  std::vector<float> global_weights;
  std::vector<float>* weights_out = attention_weights != nullptr
                                        ? attention_weights
                                        : (local ? &global_weights : nullptr);
  if (weights_out != nullptr) {
    weights_out->assign(static_cast<size_t>(b * hq * lq * lk), 0.0f);
    outputs.weights = MakeMutableTensorView(weights_out->data(),
                                            DType::kFloat32, {b, hq, lq, lk});
  }
  const absl::Status status = ReferenceAttention(attention, outputs);
  if (!status.ok()) return status;
  if (local) {
    LocalReference(c, w, in, src, vf, b, lq, lk, weights_out, &attended);
  }

  Rows y = Linear(Rows(attended.begin(), attended.end()), b * lq, hq * hd, d,
                  w.o_proj_weight, bias ? &w.o_proj_bias : nullptr, bf16);
  if (c.norm != NormPlacement::kNone) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += x[i];
  }
  if (c.norm == NormPlacement::kPost) Norm(&y, b * lq, d, w, c.norm_eps);
  *output = Floats(y);
  return absl::OkStatus();
}

}  // namespace attnserve::model::testing
