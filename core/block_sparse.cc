#include "core/block_sparse.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "core/convert.h"

namespace attnserve {
namespace {

// The table holds one byte per block pair.
constexpr int64_t kMaxBlockPairs = int64_t{1} << 24;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("mask.block_sparse.", field, ": ", what));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const BlockLayout>> BlockLayout::Build(
    const BlockSparseSpec& spec, int64_t q_len, int64_t k_len,
    int64_t diag_offset) {
  const int64_t bs = spec.block_size;
  if (bs < 1 || bs > 4096) {
    return Invalid("block_size",
                   absl::StrCat("must be in [1, 4096], got ", bs));
  }
  const int64_t nqb = (q_len + bs - 1) / bs;
  const int64_t nkb = (k_len + bs - 1) / bs;
  if (nqb * nkb > kMaxBlockPairs) {
    return Invalid(
        "block_size",
        absl::StrCat(bs, " cuts Lq = ", q_len, " and Lk = ", k_len, " into ",
                     nqb, " x ", nkb, " blocks, more than ", kMaxBlockPairs,
                     "; use larger blocks"));
  }
  if (spec.local_left && *spec.local_left < 0) {
    return Invalid("local_left",
                   absl::StrCat("must be >= 0, got ", *spec.local_left));
  }
  if (spec.local_right && *spec.local_right < 0) {
    return Invalid("local_right",
                   absl::StrCat("must be >= 0, got ", *spec.local_right));
  }
  if (spec.stride < 0) {
    return Invalid("stride", absl::StrCat("must be >= 0, got ", spec.stride));
  }
  if (spec.random_blocks < 0) {
    return Invalid("random_blocks",
                   absl::StrCat("must be >= 0, got ", spec.random_blocks));
  }
  const int64_t max_token = std::max(q_len, k_len);
  for (size_t t = 0; t < spec.global_tokens.size(); ++t) {
    const int64_t g = spec.global_tokens[t];
    if (g < 0 || g >= max_token) {
      return Invalid(absl::StrCat("global_tokens[", t, "]"),
                     absl::StrCat(g, " is out of range [0, max(Lq, Lk) = ",
                                  max_token, ")"));
    }
    if (t > 0 && g <= spec.global_tokens[t - 1]) {
      return Invalid(absl::StrCat("global_tokens[", t, "]"),
                     absl::StrCat(g, " does not exceed the previous entry ",
                                  spec.global_tokens[t - 1],
                                  " (entries must be strictly increasing)"));
    }
  }
  if (spec.block_mask) {
    const TensorView& m = *spec.block_mask;
    if (m.dtype != DType::kBool) {
      return Invalid("block_mask", absl::StrCat("dtype ", DTypeName(m.dtype),
                                                " is not supported (expected "
                                                "bool)"));
    }
    if (m.rank != 2 || m.shape[0] != nqb || m.shape[1] != nkb) {
      return Invalid(
          "block_mask",
          absl::StrCat("shape ", ShapeString(m.dims()), " does not match ",
                       ShapeString({nqb, nkb}),
                       " (ceil(Lq / block_size), ceil(Lk / block_size))"));
    }
    if (m.num_elements() > 0 && m.data == nullptr) {
      return Invalid("block_mask", "null data");
    }
  }
  const bool local = spec.local_left || spec.local_right;
  if (!local && spec.stride == 0 && spec.random_blocks == 0 &&
      spec.global_tokens.empty() && !spec.block_mask) {
    return absl::InvalidArgumentError(
        "mask.block_sparse: the layout has no component (give local_left / "
        "local_right, stride, random_blocks, global_tokens or block_mask)");
  }

  std::shared_ptr<BlockLayout> layout(new BlockLayout());
  BlockLayout& l = *layout;
  l.block_size_ = bs;
  l.q_blocks_ = nqb;
  l.k_blocks_ = nkb;
  l.kept_.assign(static_cast<size_t>(nqb * nkb), 0);
  // Floor division, also for a negative diagonal (bottom-right, Lq > Lk).
  const int64_t o =
      diag_offset >= 0 ? diag_offset / bs : -((-diag_offset + bs - 1) / bs);
  const int64_t left = std::min(spec.local_left.value_or(0), nkb + nqb);
  const int64_t right = std::min(spec.local_right.value_or(0), nkb + nqb);
  base::SplitMix64 random(spec.seed);
  std::vector<int64_t> perm(static_cast<size_t>(nkb));
  const int64_t draws = std::min(spec.random_blocks, nkb);
  for (int64_t qb = 0; qb < nqb; ++qb) {
    uint8_t* row = l.kept_.data() + qb * nkb;
    if (local) {
      const int64_t lo = std::max<int64_t>(0, qb + o - left);
      const int64_t hi = std::min<int64_t>(nkb - 1, qb + o + right);
      for (int64_t kb = lo; kb <= hi; ++kb) row[kb] = 1;
    }
    if (spec.stride > 0) {
      for (int64_t kb = 0; kb < nkb; ++kb) {
        if (spec.stride_pattern == StridePattern::kFixed) {
          if (kb % spec.stride == spec.stride - 1) row[kb] = 1;
        } else {
          const int64_t diff = qb + o - kb;
          if (diff % spec.stride == 0) row[kb] = 1;
        }
      }
    }
    if (draws > 0) {
      // A partial Fisher-Yates shuffle of a fresh 0..nkb-1 for every query
      // block, from one stream in query-block order.
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t t = 0; t < draws; ++t) {
        const int64_t u = t + static_cast<int64_t>(
                                  random.Below(static_cast<uint64_t>(nkb - t)));
        std::swap(perm[t], perm[u]);
        row[perm[t]] = 1;
      }
    }
    if (spec.block_mask) {
      const TensorView& m = *spec.block_mask;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        if (LoadAsFloat(m.data, DType::kBool,
                        qb * m.strides[0] + kb * m.strides[1]) != 0.0f) {
          row[kb] = 1;
        }
      }
    }
  }

  l.global_row_.assign(static_cast<size_t>(q_len), 0);
  l.global_key_.assign(static_cast<size_t>(k_len), 0);
  l.q_block_global_.assign(static_cast<size_t>(nqb), 0);
  l.k_block_global_.assign(static_cast<size_t>(nkb), 0);
  int64_t global_rows = 0, global_keys = 0;
  for (const int32_t g : spec.global_tokens) {
    if (g < q_len) {
      l.global_row_[g] = 1;
      l.q_block_global_[g / bs] = 1;
      ++global_rows;
    }
    if (g < k_len) {
      l.global_key_[g] = 1;
      l.k_block_global_[g / bs] = 1;
      ++global_keys;
    }
  }

  // Elements of the kept blocks (edge blocks are short), plus at most a full
  // row per global row and a full column per global key.
  double kept = 0.0;
  for (int64_t qb = 0; qb < nqb; ++qb) {
    const int64_t rows = std::min(bs, q_len - qb * bs);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      if (l.Kept(qb, kb)) kept += double(rows) * std::min(bs, k_len - kb * bs);
    }
  }
  const double all = double(q_len) * double(k_len);
  kept += double(global_rows) * double(k_len) + double(global_keys) * q_len;
  l.density_ = all > 0.0 ? std::min(1.0, kept / all) : 1.0;
  return std::shared_ptr<const BlockLayout>(std::move(layout));
}

void BlockLayout::Restrict(int64_t i, int64_t k0, int64_t n,
                           float* bias) const {
  if (global_row_[i]) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const uint8_t* row = kept_.data() + i / block_size_ * k_blocks_;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t j = k0 + c;
    if (!row[j / block_size_] && !global_key_[j]) bias[c] = kNegInf;
  }
}

}  // namespace attnserve
