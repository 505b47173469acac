#ifndef ATTNSERVE_CORE_ONLINE_SOFTMAX_H_
#define ATTNSERVE_CORE_ONLINE_SOFTMAX_H_

// What the flash kernel (flash_kernel.cc) and the decode kernel
// (decode_kernel.cc) share: the online softmax of a "row set" (query rows that
// share one kv head) over a range of keys, block by block: S = Q·Kᵀ for the
// block, scale + mask + row max, rescale the running accumulator when the max
// grew, P = exp(S - max), acc += P·V. Internal to core.

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "core/kernel_common.h"

namespace attnserve {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

// Runs the online softmax of `rows` over keys [k_begin, k_end) (block aligned
// at k_begin). On return the workspace holds, per row, the running max
// (row_max), the sum of exp(s - max) (row_sum) and the unnormalized output
// (acc, ld = Dv), and with row statistics (KernelArgs::row_stats) the sum of
// exp(s - max)·(s - max) (row_u). With `pad_rows` (flash), a set shorter than a
// query block multiplies its last row group as padded rows ("Tile shapes").
absl::Status Accumulate(const KernelArgs& args, const RowSet& rows,
                        int64_t k_begin, int64_t k_end, bool pad_rows,
                        Workspace* ws);

// Writes acc row / sum (or zeros when nothing was allowed) to output row
// (b, h, i), and the row's statistics from `u` (its row_u) where the call
// wants them; `max` is the row's running max (-inf when nothing was
// allowed), against which head h's attention sink, when the call has one,
// adds exp(sink - max) to the sum.
void StoreRow(const KernelArgs& args, const float* acc, float max, float sum,
              float u, int64_t b, int64_t h, int64_t i);

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_ONLINE_SOFTMAX_H_
