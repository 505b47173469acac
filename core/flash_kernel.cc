// The flash and decode kernels: online softmax over key blocks, O(tile) memory.
//
// Both process a "row set" (query rows that share one kv head) against a range
// of keys, block by block: S = Q·Kᵀ for the block, scale + mask + row max,
// rescale the running accumulator when the max grew, P = exp(S - max), acc +=
// P·V. Flash takes consecutive rows of one query head over all keys; decode
// takes the rows of all query heads of a GQA group together (so K and V are
// read once per group) and splits the keys across threads, merging the partial
// (max, sum, acc) at the end.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/kernel_common.h"

namespace attnserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows [0, count) of a row set: row r is query row row_index[r] of query head
// row_head[r]; the operand Q is `q` (gemm dtype, row stride ldq).
struct RowSet {
  int64_t batch = 0;
  int64_t kv_head = 0;
  int64_t count = 0;
  const void* q = nullptr;
  int64_t ldq = 0;
  // Flash with a block-sparse layout: the rows' query block (the tile is one
  // block), else -1.
  int64_t layout_row = -1;
};

// Sets each row's allowed key interval from causal/window/key_lengths, clipped
// to [k_begin, k_end), and returns the union's block-aligned bounds.
void RowRanges(const Problem& p, const RowSet& rows, Workspace* ws,
               int64_t k_begin, int64_t k_end, int64_t* lo_all,
               int64_t* hi_all) {
  *lo_all = k_end;
  *hi_all = k_begin;
  for (int64_t r = 0; r < rows.count; ++r) {
    int64_t lo, hi;
    p.KeyRange(rows.batch, ws->row_index[r], &lo, &hi);
    lo = std::max(lo, k_begin);
    hi = std::min(hi, k_end);
    ws->row_lo[r] = lo;
    ws->row_hi[r] = hi;
    if (lo < hi) {
      *lo_all = std::min(*lo_all, lo);
      *hi_all = std::max(*hi_all, hi);
    }
  }
}

// Rows of a ragged key block (causal diagonal, padding edges) are multiplied in
// groups of this many, each only as far as its own last allowed key.
constexpr int64_t kRowGranule = 64;

// The online-softmax state of a row set and the operands of one key block.
struct BlockContext {
  const KernelArgs& args;
  const RowSet& rows;
  Workspace* ws;
  float* row_max;
  float* row_sum;
  float* acc;
  float* scores;
  uint16_t* probs16;  // bf16 products only
  float* bias;        // elementwise masks only
};

// Rows [r0, r1) of the set against keys [k0, k0 + n) whose operands are kp /
// vp; with `use_bias`, the elementwise mask parts (FillBias) apply.
absl::Status ProcessBlock(const BlockContext& c, int64_t r0, int64_t r1,
                          int64_t k0, int64_t n, const void* kp, int64_t ldk,
                          const void* vp, int64_t ldv, bool use_bias) {
  const KernelArgs& args = c.args;
  const Problem& p = *args.p;
  const VecOps& ops = *args.ops;
  Workspace* ws = c.ws;
  const int64_t kb = args.k_block;
  const int64_t dv = p.shape.value_dim;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;
  const int64_t m = r1 - r0;
  const char* q =
      static_cast<const char*>(c.rows.q) +
      r0 * c.rows.ldq * static_cast<int64_t>(DTypeSize(args.gemm_dtype));
  float* scores = c.scores + r0 * kb;
  MatmulShape qk{m,  n,    p.shape.head_dim, c.rows.ldq, ldk,
                 kb, true, args.gemm_dtype,  false};
  absl::Status st = ws->matmul->Run(qk, q, kp, scores);
  if (!st.ok()) return st;

  for (int64_t r = r0; r < r1; ++r) {
    float* s = c.scores + r * kb;
    float* bias = use_bias ? c.bias : nullptr;
    if (bias != nullptr) {
      FillBias(p, c.rows.batch, ws->row_head[r], ws->row_index[r], k0, n, bias);
    }
    const float tile_max = ops.scale_mask_max(s, n, p.scale, ws->row_lo[r] - k0,
                                              ws->row_hi[r] - k0, bias);
    const float new_max = std::max(c.row_max[r], tile_max);
    if (new_max == kNegInf) {
      // Nothing allowed so far: this row contributes zeros to acc.
      if (bf16) {
        std::memset(c.probs16 + r * kb, 0, n * sizeof(uint16_t));
      } else {
        std::memset(s, 0, n * sizeof(float));
      }
      continue;
    }
    const float sum = bf16 ? ops.exp_sum_bf16(s, n, new_max, c.probs16 + r * kb)
                           : ops.exp_sum_f32(s, n, new_max, s);
    if (new_max != c.row_max[r]) {
      if (c.row_max[r] != kNegInf) {
        const float alpha = std::exp(c.row_max[r] - new_max);
        ops.scale(c.acc + r * dv, dv, alpha);
        c.row_sum[r] *= alpha;
      }
      c.row_max[r] = new_max;
    }
    c.row_sum[r] += sum;
  }

  MatmulShape pv{m, dv, n, kb, ldv, dv, false, args.gemm_dtype, true};
  const void* probs =
      bf16 ? static_cast<const void*>(c.probs16 + r0 * kb) : scores;
  return ws->matmul->Run(pv, probs, vp, c.acc + r0 * dv);
}

// Runs the online softmax of `rows` over keys [k_begin, k_end) (block aligned
// at k_begin). On return the workspace holds, per row, the running max
// (row_max), the sum of exp(s - max) (row_sum) and the unnormalized output
// (acc, ld = Dv).
absl::Status Accumulate(const KernelArgs& args, const RowSet& rows,
                        int64_t k_begin, int64_t k_end, Workspace* ws) {
  const Problem& p = *args.p;
  const int64_t m = rows.count;
  const int64_t dim = p.shape.head_dim;
  const int64_t dv = p.shape.value_dim;
  const int64_t kb = args.k_block;
  const bool bf16 = args.gemm_dtype == DType::kBFloat16;

  const BlockContext c{
      args,
      rows,
      ws,
      ws->row_max.Get<float>(m),
      ws->row_sum.Get<float>(m),
      ws->acc.Get<float>(m * dv),
      ws->scores.Get<float>(m * kb),
      bf16 ? ws->probs.Get<uint16_t>(m * kb) : nullptr,
      p.has_elementwise_mask() ? ws->bias.Get<float>(kb) : nullptr};
  std::fill(c.row_max, c.row_max + m, kNegInf);
  std::fill(c.row_sum, c.row_sum + m, 0.0f);
  std::fill(c.acc, c.acc + m * dv, 0.0f);

  int64_t lo_all, hi_all;
  RowRanges(p, rows, ws, k_begin, k_end, &lo_all, &hi_all);
  if (lo_all >= hi_all) return absl::OkStatus();
  const int64_t first_block = k_begin + (lo_all - k_begin) / kb * kb;

  const Strides4& ks = p.k_strides;
  const Strides4& vs = p.v_strides;
  const BlockLayout* layout =
      rows.layout_row >= 0 ? p.block_layout.get() : nullptr;
  const bool value_mask = p.mask != nullptr || p.alibi != nullptr;
  for (int64_t k0 = first_block, span = kb; k0 < hi_all; k0 += span) {
    // With a layout, tiles are runs of its blocks up to kb keys: skipped
    // blocks cost nothing, runs of kept ones need no per-element check of the
    // layout.
    bool use_bias = c.bias != nullptr;
    if (layout != nullptr) {
      const int64_t bs = layout->block_size();
      int64_t block = k0 / bs;
      while (k0 < hi_all && layout->TileKind(rows.layout_row, block) ==
                                BlockLayout::Tile::kSkipped) {
        k0 += bs;
        ++block;
      }
      if (k0 >= hi_all) break;
      bool partial = false;
      span = 0;
      while (span + bs <= kb && k0 + span < hi_all) {
        const BlockLayout::Tile tile =
            layout->TileKind(rows.layout_row, block + span / bs);
        if (tile == BlockLayout::Tile::kSkipped) break;
        partial |= tile == BlockLayout::Tile::kPartial;
        span += bs;
      }
      use_bias = value_mask || partial;
    }
    const int64_t n = KeyBlockEnd(k0, span, hi_all, k_end) - k0;
    // Per row group: how far its rows need this block (0 = not at all).
    int64_t group_n[(kMaxQueryBlock + kRowGranule - 1) / kRowGranule];
    const int64_t groups = (m + kRowGranule - 1) / kRowGranule;
    bool any = false, ragged = false;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t hi = k0;
      for (int64_t r = g * kRowGranule; r < std::min(m, (g + 1) * kRowGranule);
           ++r) {
        if (ws->row_lo[r] < k0 + n && ws->row_hi[r] > k0) {
          hi = std::max(hi, ws->row_hi[r]);
        }
      }
      group_n[g] = hi > k0 ? KeyBlockEnd(k0, span, hi, k_end) - k0 : 0;
      any |= group_n[g] > 0;
      ragged |= group_n[g] != n;
    }
    if (!any) continue;

    int64_t ldk, ldv;
    const bool paged = p.kv_blocks != nullptr;
    const void* kp = OperandRows(
        args,
        paged
            ? p.PagedKeys(rows.kv_head, k0)
            : ElementPtr(p.k, ks.offset(rows.batch, rows.kv_head, k0), p.dtype),
        paged ? dim : ks.row, n, dim, &ws->k, &ldk);
    const void* vp = OperandRows(
        args,
        paged
            ? p.PagedValues(rows.kv_head, k0)
            : ElementPtr(p.v, vs.offset(rows.batch, rows.kv_head, k0), p.dtype),
        paged ? dv : vs.row, n, dv, &ws->v, &ldv);
    if (!ragged) {
      absl::Status st =
          ProcessBlock(c, 0, m, k0, n, kp, ldk, vp, ldv, use_bias);
      if (!st.ok()) return st;
      continue;
    }
    for (int64_t g = 0; g < groups; ++g) {
      if (group_n[g] == 0) continue;
      absl::Status st =
          ProcessBlock(c, g * kRowGranule, std::min(m, (g + 1) * kRowGranule),
                       k0, group_n[g], kp, ldk, vp, ldv, use_bias);
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

void* OutputRow(const KernelArgs& args, int64_t b, int64_t h, int64_t i) {
  return static_cast<char*>(args.out) +
         args.out_strides.offset(b, h, i) *
             static_cast<int64_t>(DTypeSize(args.out_dtype));
}

// Writes acc row / sum (or zeros when nothing was allowed) to the output.
void StoreRow(const KernelArgs& args, const float* acc, float sum, int64_t b,
              int64_t h, int64_t i) {
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  args.ops->store_scaled(acc, args.p->shape.value_dim, inv,
                         OutputRow(args, b, h, i), args.out_dtype);
}

}  // namespace

absl::Status RunFlash(const KernelArgs& args, absl::Span<Workspace* const> ws) {
  const Problem& p = *args.p;
  const AttentionShape& s = p.shape;
  const int64_t qb = args.q_block;
  const int64_t q_blocks = (s.q_len + qb - 1) / qb;
  const int64_t items = s.batch * s.q_heads * q_blocks;
  return ParallelFor(
      args.num_threads, ws, items, [&](Workspace* w, int64_t item) {
        const int64_t block = item % q_blocks;
        const int64_t h = (item / q_blocks) % s.q_heads;
        const int64_t b = item / (q_blocks * s.q_heads);
        const int64_t i0 = block * qb;
        RowSet rows;
        rows.batch = b;
        rows.kv_head = h / p.group;
        rows.count = std::min(qb, s.q_len - i0);
        if (p.block_layout != nullptr) rows.layout_row = block;
        w->row_head.assign(rows.count, h);
        w->row_index.resize(rows.count);
        w->row_lo.resize(rows.count);
        w->row_hi.resize(rows.count);
        for (int64_t r = 0; r < rows.count; ++r) w->row_index[r] = i0 + r;
        rows.q = OperandRows(
            args, ElementPtr(p.q, p.q_strides.offset(b, h, i0), p.dtype),
            p.q_strides.row, rows.count, s.head_dim, &w->q, &rows.ldq);
        absl::Status st = Accumulate(args, rows, 0, s.k_len, w);
        if (!st.ok()) return st;
        const float* acc = w->acc.Get<float>(0);
        const float* sum = w->row_sum.Get<float>(0);
        for (int64_t r = 0; r < rows.count; ++r) {
          StoreRow(args, acc + r * s.value_dim, sum[r], b, h, i0 + r);
        }
        return absl::OkStatus();
      });
}

namespace {

// One call of a decode batch: its rows of one kv head form `chunks` chunks of
// at most `chunk` rows, each split over `splits` key ranges.
struct DecodePlan {
  int64_t group_rows = 0;
  int64_t chunk = 0;
  int64_t chunks = 0;
  int64_t sets = 0;  // batch × kv heads × chunks
  int64_t splits = 1;
  int64_t blocks_per_split = 1;
  int64_t first_item = 0;     // of this call in the batch's item list
  int64_t first_partial = 0;  // floats
};

}  // namespace

absl::Status RunDecodeBatch(absl::Span<const KernelArgs> calls,
                            absl::Span<Workspace* const> ws) {
  if (calls.empty()) return absl::OkStatus();
  const int num_threads = calls[0].num_threads;
  std::vector<DecodePlan> plans(calls.size());
  int64_t all_sets = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const Problem& p = *calls[c].p;
    const AttentionShape& s = p.shape;
    DecodePlan& plan = plans[c];
    // Rows of one kv head: every (query row i, head g of the group), i-major.
    plan.group_rows = s.q_len * p.group;
    plan.chunk = calls[c].q_block;
    plan.chunks = (plan.group_rows + plan.chunk - 1) / plan.chunk;
    plan.sets = s.batch * s.kv_heads * plan.chunks;
    all_sets += plan.sets;
  }
  int64_t items = 0, partial_floats = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const Problem& p = *calls[c].p;
    const int64_t kb = calls[c].k_block;
    DecodePlan& plan = plans[c];
    const int64_t k_blocks =
        std::max<int64_t>(1, (p.shape.k_len + kb - 1) / kb);
    // Enough key splits to give every thread two items, never below one
    // block each.
    plan.splits = std::clamp<int64_t>(
        (2 * num_threads + all_sets - 1) / std::max<int64_t>(all_sets, 1), 1,
        k_blocks);
    plan.blocks_per_split = (k_blocks + plan.splits - 1) / plan.splits;
    plan.first_item = items;
    plan.first_partial = partial_floats;
    items += plan.sets * plan.splits;
    partial_floats +=
        plan.sets * plan.splits * plan.chunk * (p.shape.value_dim + 2);
  }
  // Items (and, below, merges) are grouped by call: the call of a global index
  // is found by binary search over the calls' first indices, not a scan (a
  // batch may hold thousands of sequences).
  std::vector<int64_t> first_items(plans.size()), first_sets(plans.size());
  int64_t all_merges = 0;
  for (size_t c = 0; c < plans.size(); ++c) {
    first_items[c] = plans[c].first_item;
    first_sets[c] = all_merges;
    all_merges += plans[c].sets;
  }
  const auto call_of = [](const std::vector<int64_t>& firsts, int64_t index) {
    return static_cast<size_t>(
        std::upper_bound(firsts.begin(), firsts.end(), index) - firsts.begin() -
        1);
  };

  // Partial results per (set, split): max and sum per row, acc per row.
  std::vector<float> partial(static_cast<size_t>(partial_floats));
  absl::Status st =
      ParallelFor(num_threads, ws, items, [&](Workspace* w, int64_t global) {
        const size_t ci = call_of(first_items, global);
        const KernelArgs& args = calls[ci];
        const DecodePlan& plan = plans[ci];
        const Problem& p = *args.p;
        const AttentionShape& s = p.shape;
        const int64_t dv = s.value_dim;
        const int64_t kb = args.k_block;
        const int64_t item = global - plan.first_item;
        const int64_t split = item % plan.splits;
        const int64_t set = item / plan.splits;
        const int64_t c = set % plan.chunks;
        const int64_t hkv = (set / plan.chunks) % s.kv_heads;
        const int64_t b = set / (plan.chunks * s.kv_heads);
        const int64_t r0 = c * plan.chunk;
        RowSet rows;
        rows.batch = b;
        rows.kv_head = hkv;
        rows.count = std::min(plan.chunk, plan.group_rows - r0);
        w->row_head.resize(rows.count);
        w->row_index.resize(rows.count);
        w->row_lo.resize(rows.count);
        w->row_hi.resize(rows.count);
        // Gather the rows' queries into one operand.
        const size_t esize = DTypeSize(args.gemm_dtype);
        char* q = w->q.Get<char>(rows.count * s.head_dim * esize);
        for (int64_t r = 0; r < rows.count; ++r) {
          const int64_t h = hkv * p.group + (r0 + r) % p.group;
          const int64_t i = (r0 + r) / p.group;
          w->row_head[r] = h;
          w->row_index[r] = i;
          const char* src =
              ElementPtr(p.q, p.q_strides.offset(b, h, i), p.dtype);
          char* dst = q + r * s.head_dim * esize;
          if (p.dtype == args.gemm_dtype) {
            std::memcpy(dst, src, s.head_dim * esize);
          } else {
            args.ops->load(src, p.dtype, s.head_dim,
                           reinterpret_cast<float*>(dst));
          }
        }
        rows.q = q;
        rows.ldq = s.head_dim;
        const int64_t k_begin = split * plan.blocks_per_split * kb;
        const int64_t k_end =
            std::min(s.k_len, k_begin + plan.blocks_per_split * kb);
        const int64_t stride = plan.chunk * (dv + 2);
        float* out = partial.data() + plan.first_partial + item * stride;
        if (k_begin >= k_end) {
          std::fill(out, out + rows.count, kNegInf);
          std::fill(out + plan.chunk, out + plan.chunk + rows.count, 0.0f);
          std::fill(out + 2 * plan.chunk,
                    out + 2 * plan.chunk + rows.count * dv, 0.0f);
          return absl::OkStatus();
        }
        absl::Status st = Accumulate(args, rows, k_begin, k_end, w);
        if (!st.ok()) return st;
        std::memcpy(out, w->row_max.Get<float>(0), rows.count * sizeof(float));
        std::memcpy(out + plan.chunk, w->row_sum.Get<float>(0),
                    rows.count * sizeof(float));
        std::memcpy(out + 2 * plan.chunk, w->acc.Get<float>(0),
                    rows.count * dv * sizeof(float));
        return absl::OkStatus();
      });
  if (!st.ok()) return st;

  // Merge the splits of each set: rescale each partial to the common max.
  return ParallelFor(
      num_threads, ws, all_merges, [&](Workspace* w, int64_t global) {
        const size_t ci = call_of(first_sets, global);
        const KernelArgs& args = calls[ci];
        const DecodePlan& plan = plans[ci];
        const Problem& p = *args.p;
        const int64_t dv = p.shape.value_dim;
        const int64_t set = global - first_sets[ci];
        const int64_t splits = plan.splits;
        const int64_t c = set % plan.chunks;
        const int64_t hkv = (set / plan.chunks) % p.shape.kv_heads;
        const int64_t b = set / (plan.chunks * p.shape.kv_heads);
        const int64_t r0 = c * plan.chunk;
        const int64_t count = std::min(plan.chunk, plan.group_rows - r0);
        const int64_t stride = plan.chunk * (dv + 2);
        const float* base = partial.data() + plan.first_partial;
        float* merged = w->acc.Get<float>(dv);
        for (int64_t r = 0; r < count; ++r) {
          float max = kNegInf;
          for (int64_t sp = 0; sp < splits; ++sp) {
            max = std::max(max, base[(set * splits + sp) * stride + r]);
          }
          float sum = 0.0f;
          std::fill(merged, merged + dv, 0.0f);
          if (max != kNegInf) {
            for (int64_t sp = 0; sp < splits; ++sp) {
              const float* part = base + (set * splits + sp) * stride;
              if (part[r] == kNegInf) continue;
              const float alpha = std::exp(part[r] - max);
              sum += alpha * part[plan.chunk + r];
              const float* a = part + 2 * plan.chunk + r * dv;
              for (int64_t d = 0; d < dv; ++d) merged[d] += alpha * a[d];
            }
          }
          const int64_t h = hkv * p.group + (r0 + r) % p.group;
          const int64_t i = (r0 + r) / p.group;
          StoreRow(args, merged, sum, b, h, i);
        }
        return absl::OkStatus();
      });
}

absl::Status RunDecode(const KernelArgs& args,
                       absl::Span<Workspace* const> ws) {
  return RunDecodeBatch(absl::MakeConstSpan(&args, 1), ws);
}

}  // namespace attnserve
