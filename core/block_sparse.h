#ifndef ATTNSERVE_CORE_BLOCK_SPARSE_H_
#define ATTNSERVE_CORE_BLOCK_SPARSE_H_

// Internal: a BlockSparseSpec (core/attention.h) resolved against a call's
// shape into the table of kept blocks, for the kernels and the reference.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/attention.h"

namespace attnserve {

class BlockLayout {
 public:
  // Checks every field of `spec` (InvalidArgument naming
  // "mask.block_sparse.<field>") and builds the table for a call of
  // q_len × k_len with causal diagonal offset `diag_offset`.
  static absl::StatusOr<std::shared_ptr<const BlockLayout>> Build(
      const BlockSparseSpec& spec, int64_t q_len, int64_t k_len,
      int64_t diag_offset);

  // What a tile of query block qb × key block kb needs.
  enum class Tile {
    kSkipped,  // no key of the tile is allowed for any row
    kKept,     // the layout keeps the whole tile
    kPartial,  // only global rows or keys: check each element (Allowed)
  };

  int64_t block_size() const { return block_size_; }
  int64_t q_blocks() const { return q_blocks_; }
  int64_t k_blocks() const { return k_blocks_; }
  bool Kept(int64_t qb, int64_t kb) const {
    return kept_[qb * k_blocks_ + kb] != 0;
  }
  Tile TileKind(int64_t qb, int64_t kb) const {
    if (Kept(qb, kb)) return Tile::kKept;
    return q_block_global_[qb] || k_block_global_[kb] ? Tile::kPartial
                                                      : Tile::kSkipped;
  }
  // Whether the layout (with global tokens) allows key j for query row i.
  bool Allowed(int64_t i, int64_t j) const {
    return Kept(i / block_size_, j / block_size_) || global_row_[i] ||
           global_key_[j];
  }
  // Sets bias[c] = -inf for the keys k0 + c, c < n, that Allowed forbids for
  // row i.
  void Restrict(int64_t i, int64_t k0, int64_t n, float* bias) const;
  // The share of the q_len × k_len score elements that the layout allows
  // (other mask parts aside), in [0, 1].
  double density() const { return density_; }

 private:
  BlockLayout() = default;
  int64_t block_size_ = 1, q_blocks_ = 0, k_blocks_ = 0;
  std::vector<uint8_t> kept_;                     // [q_blocks][k_blocks]
  std::vector<uint8_t> global_row_, global_key_;  // [q_len], [k_len]
  std::vector<uint8_t> q_block_global_, k_block_global_;
  double density_ = 1.0;
};

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_BLOCK_SPARSE_H_
