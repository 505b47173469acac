#include "client/cli/request_flags.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/tensors/wire_names.h"

ABSL_FLAG(std::string, protocol, "native",
          "native (attnserve.v1 Attend/AttendModel) or v2: the same calls as "
          "Open Inference Protocol ModelInfer calls (bench --stream: "
          "ModelStreamInfer messages)");
ABSL_FLAG(int64_t, batch, 1, "batch size B (random inputs)");
ABSL_FLAG(int64_t, heads, 8, "query heads Hq (random inputs)");
ABSL_FLAG(int64_t, kv_heads, 0,
          "key/value heads Hkv, dividing Hq; 0 = Hq (random inputs)");
ABSL_FLAG(int64_t, lq, 128, "query length Lq (random inputs)");
ABSL_FLAG(int64_t, lk, 0, "key length Lk; 0 = Lq (random inputs)");
ABSL_FLAG(int64_t, dim, 64, "query/key head dimension D (random inputs)");
ABSL_FLAG(int64_t, dv, 0, "value head dimension Dv; 0 = D (random inputs)");
ABSL_FLAG(std::string, dtype, "",
          "f32, bf16 or f16; empty = f32 for random inputs, the files' dtype "
          "for --q/--k/--v (bf16 files are read only with --dtype=bf16)");
ABSL_FLAG(uint64_t, seed, 0,
          "seed of the random inputs (uniform in [-1, 1); the same on every "
          "machine)");
ABSL_FLAG(std::string, q, "",
          "query .npy file ('<f4', '<f2', or '<u2' bf16 bits with "
          "--dtype=bf16); with --k (and --v) replaces the random inputs");
ABSL_FLAG(std::string, k, "", "key .npy file (see --q)");
ABSL_FLAG(std::string, v, "", "value .npy file (see --q)");
ABSL_FLAG(std::string, mask, "",
          ".npy explicit mask broadcastable to [B, Hq, Lq, Lk]: '|b1' (true = "
          "attend) or '<f4' (added to the scores)");
ABSL_FLAG(std::string, layout, "bhld",
          "bhld ([B, H, L, D]) or blhd ([B, L, H, D]) for query/key/value "
          "and output");
ABSL_FLAG(bool, causal, false, "causal mask: query i attends keys j <= d(i)");
ABSL_FLAG(std::string, alignment, "top_left",
          "where the causal diagonal d(i) sits: top_left (d(i) = i) or "
          "bottom_right (d(i) = i + Lk - Lq)");
ABSL_FLAG(int32_t, window_left, -1,
          "sliding window: attend keys j >= d(i) - window_left; -1 = "
          "unbounded");
ABSL_FLAG(int32_t, window_right, -1,
          "sliding window: attend keys j <= d(i) + window_right; -1 = "
          "unbounded");
ABSL_FLAG(int32_t, sink_tokens, 0,
          "with --window_left: the first keys stay attended outside the "
          "window (StreamingLLM); session create: the first tokens a sink + "
          "window session keeps");
ABSL_FLAG(std::string, key_lengths, "",
          "padding: comma list of valid key counts, one per batch element, "
          "e.g. 3,5");
ABSL_FLAG(std::string, scale, "", "multiplies q.k; empty = 1/sqrt(D)");
ABSL_FLAG(bool, return_weights, false,
          "also return the attention weights (f32 [B, Hq, Lq, Lk])");
ABSL_FLAG(bool, return_weight_stats, false,
          "also return each query row's weight entropy and largest weight "
          "(f32 [B, Hq, Lq] each; softmax attention only) without the "
          "weights");
ABSL_FLAG(std::string, output_dtype, "",
          "f32, bf16 or f16; empty = the inputs' dtype");
ABSL_FLAG(std::string, method, "softmax",
          "softmax (exact), linear (linear attention) or lsh (Reformer's LSH "
          "attention: no key is sent, keys are the queries; --kv_heads and "
          "--lk must be 0 or match); docs/long_sequences.md");
ABSL_FLAG(std::string, feature_map, "elu",
          "with --method=linear: elu (elu + 1), relu or favor (Performer's "
          "FAVOR+)");
ABSL_FLAG(int32_t, num_features, 256,
          "with --feature_map=favor: random features, in [1, 4096]");
ABSL_FLAG(int32_t, num_hashes, 4, "with --method=lsh: hash rounds");
ABSL_FLAG(int32_t, num_buckets, 64,
          "with --method=lsh: buckets per round (1, or even)");
ABSL_FLAG(int32_t, chunk_size, 64,
          "with --method=lsh: sorted positions per chunk");
ABSL_FLAG(uint64_t, method_seed, 0,
          "with --method=lsh or --feature_map=favor: the seed of the random "
          "rotations / features");
ABSL_FLAG(int32_t, block_size, 0,
          "block-sparse layout over blocks of this many queries x keys; 0 = "
          "none (dense); needs one of the components below");
ABSL_FLAG(int32_t, local_left, -1,
          "block-sparse: local band, key blocks back from the diagonal "
          "block; -1 = unset");
ABSL_FLAG(int32_t, local_right, -1,
          "block-sparse: local band, key blocks ahead of the diagonal block; "
          "-1 = unset");
ABSL_FLAG(int32_t, stride, 0,
          "block-sparse: Sparse Transformer stride in blocks; 0 = none");
ABSL_FLAG(std::string, stride_pattern, "strided",
          "block-sparse: strided (every stride-th block back) or fixed (the "
          "last block of every stride group)");
ABSL_FLAG(int32_t, random_blocks, 0,
          "block-sparse: random key blocks per query block (BigBird)");
ABSL_FLAG(uint64_t, layout_seed, 0, "block-sparse: seed of --random_blocks");
ABSL_FLAG(std::string, global_tokens, "",
          "block-sparse: comma list of global tokens (attend to and are "
          "attended by every position), increasing, e.g. 0,5");
ABSL_FLAG(std::string, model, "",
          "call this hosted model (AttendModel; attnctl info lists them) with "
          "random hidden states [B, Lq, d_model] instead of Attend");
ABSL_FLAG(int64_t, memory_len, 0,
          "with --model: cross-attention over random memory [B, memory_len, "
          "d_model] (Lk = memory_len); 0 = self-attention (Lk = Lq)");
ABSL_FLAG(int64_t, position_offset, -1,
          "with --model: send positions K..K+Lq-1 (in every batch row) for "
          "sinusoidal and rope models, e.g. a decoding step at K; -1 = none "
          "(the server's 0..Lq-1)");

namespace attnserve::client {
namespace {

absl::StatusOr<std::optional<int32_t>> Window(absl::string_view flag,
                                              int32_t value) {
  if (value == -1) return std::nullopt;
  if (value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " must be >= 0, or -1 for unbounded; got ", value));
  }
  return value;
}

absl::StatusOr<std::vector<int32_t>> NonNegativeList(absl::string_view flag,
                                                     absl::string_view text) {
  std::vector<int32_t> values;
  if (absl::StripAsciiWhitespace(text).empty()) return values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t value;
    if (!absl::SimpleAtoi(part, &value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part,
                       "\" is not a non-negative integer (expected e.g. 3,5)"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<std::optional<float>> Scale(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) return std::nullopt;
  float value;
  if (!absl::SimpleAtof(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--scale: \"", text, "\" is not a finite number"));
  }
  return value;
}

// --method and its parameters, and the block-sparse layout flags.
absl::Status ApplyVariantFlags(RequestSpec* spec) {
  CallOptions& call = spec->call;
  const std::string method = absl::AsciiStrToLower(absl::GetFlag(FLAGS_method));
  if (method == "linear") {
    v1::LinearAttention linear;
    absl::StatusOr<v1::FeatureMap> map =
        ParseFeatureMap("feature_map", absl::GetFlag(FLAGS_feature_map));
    if (!map.ok()) return map.status();
    linear.set_feature_map(*map);
    if (*map == v1::FAVOR_PLUS) {
      linear.set_num_features(absl::GetFlag(FLAGS_num_features));
      linear.set_seed(absl::GetFlag(FLAGS_method_seed));
    }
    call.linear = linear;
  } else if (method == "lsh") {
    RandomInputs& random = spec->random;
    if ((random.kv_heads != 0 && random.kv_heads != random.heads) ||
        (random.k_len != 0 && random.k_len != random.q_len)) {
      return absl::InvalidArgumentError(
          "--method=lsh takes its keys from the queries: --kv_heads and --lk "
          "must be 0 (or equal --heads and --lq)");
    }
    v1::LshAttention lsh;
    lsh.set_num_hashes(absl::GetFlag(FLAGS_num_hashes));
    lsh.set_num_buckets(absl::GetFlag(FLAGS_num_buckets));
    lsh.set_chunk_size(absl::GetFlag(FLAGS_chunk_size));
    lsh.set_seed(absl::GetFlag(FLAGS_method_seed));
    call.lsh = lsh;
  } else if (method != "softmax") {
    return absl::InvalidArgumentError(
        absl::StrCat("--method: unknown value \"", absl::GetFlag(FLAGS_method),
                     "\" (expected softmax, linear or lsh)"));
  }
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  if (block_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--block_size must be >= 0 (0 = no layout), got ", block_size));
  }
  if (block_size == 0) return absl::OkStatus();
  v1::BlockSparse layout;
  layout.set_block_size(block_size);
  for (auto [flag, value, set] :
       {std::make_tuple("local_left", absl::GetFlag(FLAGS_local_left),
                        &v1::BlockSparse::set_local_left),
        std::make_tuple("local_right", absl::GetFlag(FLAGS_local_right),
                        &v1::BlockSparse::set_local_right)}) {
    if (value == -1) continue;
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " must be >= 0, or -1 for unset; got ", value));
    }
    (layout.*set)(value);
  }
  layout.set_stride(absl::GetFlag(FLAGS_stride));
  absl::StatusOr<v1::StridePattern> pattern =
      ParseStridePattern("stride_pattern", absl::GetFlag(FLAGS_stride_pattern));
  if (!pattern.ok()) return pattern.status();
  layout.set_stride_pattern(*pattern);
  layout.set_random_blocks(absl::GetFlag(FLAGS_random_blocks));
  layout.set_seed(absl::GetFlag(FLAGS_layout_seed));
  absl::StatusOr<std::vector<int32_t>> globals =
      NonNegativeList("global_tokens", absl::GetFlag(FLAGS_global_tokens));
  if (!globals.ok()) return globals.status();
  layout.mutable_global_tokens()->Assign(globals->begin(), globals->end());
  call.block_sparse = layout;
  return absl::OkStatus();
}

}  // namespace

FlagGroup RandomInputFlagGroup() {
  return {
      "random input",
      {"batch", "heads", "kv_heads", "lq", "lk", "dim", "dv", "dtype", "seed"}};
}

FlagGroup CallFlagGroup() {
  return {"call",
          {"layout", "causal", "alignment", "window_left", "window_right",
           "sink_tokens", "key_lengths", "scale", "return_weights",
           "return_weight_stats", "output_dtype"}};
}

FlagGroup VariantFlagGroup() {
  return {"long-sequence variant",
          {"method", "feature_map", "num_features", "num_hashes", "num_buckets",
           "chunk_size", "method_seed", "block_size", "local_left",
           "local_right", "stride", "stride_pattern", "random_blocks",
           "layout_seed", "global_tokens"}};
}

FlagGroup InputFileFlagGroup() {
  return {"input file", {"q", "k", "v", "mask"}};
}

absl::StatusOr<InputFiles> InputFilesFromFlags(const ParsedFlags& parsed,
                                               absl::string_view file_flags,
                                               const RequestSpec& spec) {
  InputFiles files;
  files.query = absl::GetFlag(FLAGS_q);
  files.key = absl::GetFlag(FLAGS_k);
  files.value = absl::GetFlag(FLAGS_v);
  files.mask = absl::GetFlag(FLAGS_mask);
  if (!files.HasTensors()) return files;
  for (absl::string_view name : RandomInputFlagGroup().names) {
    if (name != "dtype" && parsed.Specified(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " applies to random inputs; with ",
                       file_flags, " the shapes come from the files"));
    }
  }
  if (DTypeFlagSet()) files.dtype = spec.random.dtype;
  return files;
}

absl::StatusOr<RequestSpec> RequestSpecFromFlags() {
  RequestSpec spec;
  RandomInputs& random = spec.random;
  random.batch = absl::GetFlag(FLAGS_batch);
  random.heads = absl::GetFlag(FLAGS_heads);
  random.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  random.q_len = absl::GetFlag(FLAGS_lq);
  random.k_len = absl::GetFlag(FLAGS_lk);
  random.head_dim = absl::GetFlag(FLAGS_dim);
  random.value_dim = absl::GetFlag(FLAGS_dv);
  random.seed = absl::GetFlag(FLAGS_seed);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (!dtype.empty()) {
    absl::StatusOr<v1::DataType> parsed = ParseFloatDataType("dtype", dtype);
    if (!parsed.ok()) return parsed.status();
    random.dtype = *parsed;
  }

  CallOptions& call = spec.call;
  absl::StatusOr<v1::Layout> layout =
      ParseLayout("layout", absl::GetFlag(FLAGS_layout));
  if (!layout.ok()) return layout.status();
  call.layout = *layout;
  call.causal = absl::GetFlag(FLAGS_causal);
  absl::StatusOr<v1::Alignment> alignment =
      ParseAlignment("alignment", absl::GetFlag(FLAGS_alignment));
  if (!alignment.ok()) return alignment.status();
  call.alignment = *alignment;
  absl::StatusOr<std::optional<int32_t>> left =
      Window("window_left", absl::GetFlag(FLAGS_window_left));
  if (!left.ok()) return left.status();
  call.window_left = *left;
  absl::StatusOr<std::optional<int32_t>> right =
      Window("window_right", absl::GetFlag(FLAGS_window_right));
  if (!right.ok()) return right.status();
  call.window_right = *right;
  call.sink_tokens = absl::GetFlag(FLAGS_sink_tokens);
  absl::StatusOr<std::vector<int32_t>> lengths =
      NonNegativeList("key_lengths", absl::GetFlag(FLAGS_key_lengths));
  if (!lengths.ok()) return lengths.status();
  call.key_lengths = *std::move(lengths);
  absl::StatusOr<std::optional<float>> scale =
      Scale(absl::GetFlag(FLAGS_scale));
  if (!scale.ok()) return scale.status();
  call.scale = *scale;
  call.return_weights = absl::GetFlag(FLAGS_return_weights);
  call.return_weight_stats = absl::GetFlag(FLAGS_return_weight_stats);
  const std::string output_dtype = absl::GetFlag(FLAGS_output_dtype);
  if (!output_dtype.empty()) {
    absl::StatusOr<v1::DataType> parsed =
        ParseFloatDataType("output_dtype", output_dtype);
    if (!parsed.ok()) return parsed.status();
    call.output_dtype = *parsed;
  }
  const absl::Status variants = ApplyVariantFlags(&spec);
  if (!variants.ok()) return variants;
  return spec;
}

bool DTypeFlagSet() { return !absl::GetFlag(FLAGS_dtype).empty(); }

FlagGroup ModelFlagGroup() {
  return {"hosted model", {"model", "memory_len", "position_offset"}};
}

absl::StatusOr<Protocol> ProtocolFromFlag() {
  const std::string protocol =
      absl::AsciiStrToLower(absl::GetFlag(FLAGS_protocol));
  if (protocol == "v2") return Protocol::kV2;
  if (protocol == "native") return Protocol::kNative;
  return absl::InvalidArgumentError(absl::StrCat("--protocol \"",
                                                 absl::GetFlag(FLAGS_protocol),
                                                 "\" is not native or v2"));
}

absl::StatusOr<ModelSpec> ModelSpecFromFlags(const ParsedFlags& parsed) {
  ModelSpec spec;
  spec.name = absl::GetFlag(FLAGS_model);
  if (parsed.Specified("model") && spec.name.empty()) {
    return absl::InvalidArgumentError(
        "--model is empty (attnctl info lists the hosted models)");
  }
  spec.memory_len = absl::GetFlag(FLAGS_memory_len);
  const int64_t offset = absl::GetFlag(FLAGS_position_offset);
  if (offset < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--position_offset must be >= 0, or -1 for none; got ", offset));
  }
  if (offset >= 0) spec.position_offset = offset;
  return spec;
}

absl::Status CheckModelFlagUse(const ParsedFlags& parsed) {
  if (absl::GetFlag(FLAGS_model).empty()) {
    for (absl::string_view name : {"memory_len", "position_offset"}) {
      if (parsed.Specified(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " applies to --model calls only"));
      }
    }
    return absl::OkStatus();
  }
  // Why each flag has no meaning for a model call.
  const std::pair<absl::string_view, absl::string_view> reasons[] = {
      {"heads", "the model's config gives the heads and their size"},
      {"kv_heads", "the model's config gives the heads and their size"},
      {"dim", "the model's config gives the heads and their size"},
      {"dv", "the model's config gives the heads and their size"},
      {"lk", "use --memory_len for cross-attention (Lk = Lq without it)"},
      {"layout", "hidden states are [B, Lq, d_model]"},
      {"scale", "the model's scoring sets the scale"},
      {"q", "its inputs are random hidden states"},
      {"k", "its inputs are random hidden states"},
      {"v", "its inputs are random hidden states"},
      {"method",
       "the model's config.json chooses its attention (docs/models.md)"},
  };
  for (const auto& [name, reason] : reasons) {
    if (!parsed.Specified(name)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " does not apply with --model: ", reason));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::client
