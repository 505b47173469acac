#ifndef ATTNSERVE_CLIENT_HEATMAP_HEATMAP_H_
#define ATTNSERVE_CLIENT_HEATMAP_HEATMAP_H_

// attnctl heatmap: the attention weights of one small Attend call, drawn as
// a PNG (one panel per head) and/or as text for a terminal.

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "client/connection.h"
#include "client/exit_codes.h"
#include "client/heatmap/heatmap_render.h"
#include "client/request_builder.h"
#include "client/tensors/input_files.h"

namespace attnserve::client {

// Heatmaps larger than these are refused (kExitUsage): they would be too big
// to read, or to lay out.
// Lq and Lk.
inline constexpr int64_t kMaxHeatmapLength = 512;
// Panels (heads) in one picture.
inline constexpr int64_t kMaxHeatmapPanels = 64;
// Labels given with --tokens or --query_tokens (one per 10+ pixel cell).
inline constexpr int64_t kMaxHeatmapTokens = 128;
// --ascii: two columns per key, one line per query.
inline constexpr int64_t kMaxTextKeys = 64;
inline constexpr int64_t kMaxTextQueries = 128;

struct HeatmapOptions {
  ConnectionOptions connection;
  // The random inputs' shape (ignored with input files) and the call
  // options; return_weights is always set.
  RequestSpec spec;
  // .npy query and key (both or neither; default neither). The value is
  // optional: without it a zero value [B, Hkv, Lk, 1] is sent, since the
  // weights do not depend on it. And the mask file, as for infer.
  InputFiles files;
  // Labels of the keys (Lk of them) and of the queries (Lq); empty (default)
  // = indices. Without query tokens, queries take the key tokens when
  // Lq == Lk (self-attention).
  std::vector<std::string> key_tokens;
  std::vector<std::string> query_tokens;
  // Which batch element to draw (default 0), and which query head (default
  // unset: every head, one panel each).
  int64_t batch_index = 0;
  std::optional<int64_t> head;
  // The top of the colour scale; unset (default) = the largest weight drawn.
  std::optional<float> vmax;
  // Where to write the PNG (empty = none), and whether to print the text
  // picture to `out` (default off; at least one of the two), in 256 ANSI
  // colours (default off).
  std::string png_file;
  bool text = false;
  bool text_color = false;
  std::string request_id = "attnctl-heatmap";
};

// --tokens' words: split on whitespace, punctuation kept with its word
// ("short," is one token).
std::vector<std::string> SplitTokens(absl::string_view text);

// The panels of `weights` (FLOAT32 [B, Hq, Lq, Lk]) for batch element
// `batch_index`, one per head, or only `head`, titled "head h". With
// `entropy` (FLOAT32 [B, Hq, Lq], AttendResponse.entropy), each panel takes
// its rows' entropy and its title their mean ("head h, entropy 1.23").
// Indices must be in range.
Heatmap HeatmapFromWeights(const v1::Tensor& weights, int64_t batch_index,
                           std::optional<int64_t> head,
                           const v1::Tensor* entropy = nullptr);

// The block-sparse layout of `request` (its Mask.block_sparse) over q_len x
// k_len as a panel titled "block layout": `on` where the layout allows key j
// for query row i (a computed block or a global token), 0 where it leaves the
// pair out. InvalidArgument for a layout the server would refuse.
absl::StatusOr<HeatmapPanel> LayoutPanel(const v1::AttendRequest& request,
                                         int64_t q_len, int64_t k_len,
                                         float on);

// Sends the call and draws its weights (and, with a block-sparse layout, the
// layout as a first panel). Returns kExitUsage for options that
// cannot make a heatmap (nothing to draw, shapes past the limits, a token
// count that does not match, a batch or head index out of range),
// kExitFileError when a file cannot be read or written or an input file
// cannot be used, kExitRpcFailed when the call fails, else kExitOk.
ExitCode RunHeatmap(const HeatmapOptions& options, std::ostream& out,
                    std::ostream& err);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_HEATMAP_HEATMAP_H_
