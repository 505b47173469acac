// The decode kernel: the rows of all query heads of a GQA group together (so
// K and V are read once per group), the keys split across threads, the
// partial (max, sum, entropy sum, acc) merged at the end; a batch of calls
// (sessions) runs as one item list.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/kernel_common.h"
#include "core/online_softmax.h"

namespace attnserve {
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
  // The first key block any row's window reaches (0 without a window): the
  // splits share the blocks from it on, and the first split starts at key 0
  // (where kept first keys, sink_tokens, lie).
  int64_t first_block = 0;
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
    // At most the group's rows: the partial results are sized by the chunk.
    plan.chunk = std::max<int64_t>(
        1, std::min<int64_t>(calls[c].q_block, plan.group_rows));
    plan.chunks = (plan.group_rows + plan.chunk - 1) / plan.chunk;
    plan.sets = s.batch * s.kv_heads * plan.chunks;
    all_sets += plan.sets;
  }
  int64_t items = 0, partial_floats = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const Problem& p = *calls[c].p;
    const int64_t kb = calls[c].k_block;
    DecodePlan& plan = plans[c];
    if (p.window_left) {
      // Row 0's window starts first (KeyRange).
      plan.first_block =
          std::max<int64_t>(0, p.diag_offset - *p.window_left) / kb;
    }
    const int64_t k_blocks =
        std::max<int64_t>(1, (p.shape.k_len + kb - 1) / kb - plan.first_block);
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
        plan.sets * plan.splits * plan.chunk * (p.shape.value_dim + 3);
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

  // Partial results per (set, split): max, sum and entropy sum (row_u, zero
  // without row statistics) per row, acc per row.
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
        const int64_t split_begin =
            (plan.first_block + split * plan.blocks_per_split) * kb;
        const int64_t k_begin = split == 0 ? 0 : split_begin;
        const int64_t k_end =
            std::min(s.k_len, split_begin + plan.blocks_per_split * kb);
        const int64_t stride = plan.chunk * (dv + 3);
        float* out = partial.data() + plan.first_partial + item * stride;
        if (k_begin >= k_end) {
          std::fill(out, out + rows.count, kNegInf);
          std::fill(out + plan.chunk, out + plan.chunk + rows.count, 0.0f);
          std::fill(out + 2 * plan.chunk, out + 2 * plan.chunk + rows.count,
                    0.0f);
          std::fill(out + 3 * plan.chunk,
                    out + 3 * plan.chunk + rows.count * dv, 0.0f);
          return absl::OkStatus();
        }
        absl::Status st =
            Accumulate(args, rows, k_begin, k_end, /*pad_rows=*/false, w);
        if (!st.ok()) return st;
        std::memcpy(out, w->row_max.Get<float>(0), rows.count * sizeof(float));
        std::memcpy(out + plan.chunk, w->row_sum.Get<float>(0),
                    rows.count * sizeof(float));
        if (args.row_stats()) {
          std::memcpy(out + 2 * plan.chunk, w->row_u.Get<float>(0),
                      rows.count * sizeof(float));
        } else {
          std::fill(out + 2 * plan.chunk, out + 2 * plan.chunk + rows.count,
                    0.0f);
        }
        std::memcpy(out + 3 * plan.chunk, w->acc.Get<float>(0),
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
        const int64_t stride = plan.chunk * (dv + 3);
        const float* base = partial.data() + plan.first_partial;
        float* merged = w->acc.Get<float>(dv);
        for (int64_t r = 0; r < count; ++r) {
          float max = kNegInf;
          for (int64_t sp = 0; sp < splits; ++sp) {
            max = std::max(max, base[(set * splits + sp) * stride + r]);
          }
          float sum = 0.0f, u = 0.0f;
          std::fill(merged, merged + dv, 0.0f);
          if (max != kNegInf) {
            for (int64_t sp = 0; sp < splits; ++sp) {
              const float* part = base + (set * splits + sp) * stride;
              if (part[r] == kNegInf) continue;
              const float shift = part[r] - max;
              const float alpha = std::exp(shift);
              const float part_sum = part[plan.chunk + r];
              sum += alpha * part_sum;
              // As AddToRow rescales it (online_softmax.cc).
              u += alpha * (part[2 * plan.chunk + r] + shift * part_sum);
              const float* a = part + 3 * plan.chunk + r * dv;
              for (int64_t d = 0; d < dv; ++d) merged[d] += alpha * a[d];
            }
          }
          const int64_t h = hkv * p.group + (r0 + r) % p.group;
          const int64_t i = (r0 + r) / p.group;
          StoreRow(args, merged, max, sum, u, b, h, i);
        }
        return absl::OkStatus();
      });
}

absl::Status RunDecode(const KernelArgs& args,
                       absl::Span<Workspace* const> ws) {
  return RunDecodeBatch(absl::MakeConstSpan(&args, 1), ws);
}

}  // namespace attnserve
