// The flash kernel: consecutive query rows of one query head (a tile of
// q_block rows) over all keys, by the online softmax of online_softmax.h, in
// O(tile) memory.

#include <algorithm>

#include "core/kernel_common.h"
#include "core/online_softmax.h"

namespace attnserve {

namespace {

int64_t QueryBlocks(const KernelArgs& args) {
  return (args.p->shape.q_len + args.q_block - 1) / args.q_block;
}

int64_t Tiles(const KernelArgs& args) {
  return args.p->shape.batch * args.p->shape.q_heads * QueryBlocks(args);
}

// Tile `item` of a call: query block, head and batch row, most significant
// last.
absl::Status RunTile(const KernelArgs& args, Workspace* w, int64_t item) {
  const Problem& p = *args.p;
  const AttentionShape& s = p.shape;
  const int64_t qb = args.q_block;
  const int64_t q_blocks = QueryBlocks(args);
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
  rows.q =
      OperandRows(args, ElementPtr(p.q, p.q_strides.offset(b, h, i0), p.dtype),
                  p.q_strides.row, rows.count, s.head_dim, &w->q, &rows.ldq);
  absl::Status st = Accumulate(args, rows, 0, s.k_len, /*pad_rows=*/true, w);
  if (!st.ok()) return st;
  const float* acc = w->acc.Get<float>(0);
  const float* max = w->row_max.Get<float>(0);
  const float* sum = w->row_sum.Get<float>(0);
  const float* u = args.row_stats() ? w->row_u.Get<float>(0) : nullptr;
  for (int64_t r = 0; r < rows.count; ++r) {
    StoreRow(args, acc + r * s.value_dim, max[r], sum[r],
             u != nullptr ? u[r] : 0.0f, b, h, i0 + r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunFlashBatch(absl::Span<const KernelArgs> calls,
                           absl::Span<Workspace* const> ws) {
  // Packed K and V are this run's (the inputs of the next may differ).
  for (Workspace* w : ws) w->packed_problem = nullptr;
  return ParallelForCalls(calls, ws, Tiles, RunTile);
}

absl::Status RunFlash(const KernelArgs& args, absl::Span<Workspace* const> ws) {
  return RunFlashBatch(absl::MakeConstSpan(&args, 1), ws);
}

}  // namespace attnserve
