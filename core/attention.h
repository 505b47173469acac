#ifndef ATTNSERVE_CORE_ATTENTION_H_
#define ATTNSERVE_CORE_ATTENTION_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/paged.h"
#include "core/relative_bias.h"
#include "core/tensor.h"

namespace attnserve {

// How the four axes of query/key/value/output are ordered.
//   kBHLD: query [B, Hq, Lq, D], key [B, Hkv, Lk, D], value [B, Hkv, Lk, Dv],
//          output [B, Hq, Lq, Dv].
//   kBLHD: query [B, Lq, Hq, D], key [B, Lk, Hkv, D], value [B, Lk, Hkv, Dv],
//          output [B, Lq, Hq, Dv] (a projected hidden state, no transpose
//          needed).
// Weights are always [B, Hq, Lq, Lk].
enum class Layout { kBHLD, kBLHD };

// Where the causal diagonal sits when Lq != Lk. The diagonal of query row i is
// d(i) = i + o with o = 0 (kTopLeft, PyTorch's is_causal) or o = Lk - Lq
// (kBottomRight, flash-attn and KV-cache decoding).
enum class CausalAlignment { kTopLeft, kBottomRight };

// The kernel that computes a call. A caller may request kAuto (the engine
// picks: ChooseKernel) or one of the softmax kernels (flash, materialized,
// decode); kLinear and kLsh are the kernels of those methods, which a plan
// names (AttentionPlan::kernel) and no caller requests.
enum class KernelPath { kAuto, kFlash, kMaterialized, kDecode, kLinear, kLsh };

// Instruction sets of our own vectorized code (softmax, exp, conversions).
// kAmx is AVX-512 plus our own AMX tile products for the bf16 flash kernel
// (Intel AMX-BF16; elsewhere oneDNN's primitives compute the products).
// kNeon and kSve are arm64's.
enum class Isa { kAuto, kAvx2, kAvx512, kAmx, kNeon, kSve };
// "auto", "avx2", "avx512", "amx", "neon", "sve"
absl::string_view IsaName(Isa isa);
// The Isa IsaName names; false for any other name.
bool ParseIsa(absl::string_view name, Isa* isa);

// How a block-sparse layout picks key blocks by stride (BlockSparseSpec):
// kStrided (Sparse Transformer "strided"): key block kb for query block qb when
//   (qb + o - kb) is a multiple of the stride (o: see BlockSparseSpec);
// kFixed (Sparse Transformer "fixed"): key blocks kb with kb % stride ==
//   stride - 1, the last block of every stride group, for every query block.
enum class StridePattern { kStrided, kFixed };

// A block-sparse layout over blocks of block_size query rows × block_size keys:
// query block qb = floor(i / block_size), key block kb = floor(j / block_size),
// nqb = ceil(Lq / block_size), nkb = ceil(Lk / block_size), and the diagonal
// block offset o = floor(d(0) / block_size) with d the causal diagonal
// (CausalAlignment; 0 for top-left). The layout keeps block (qb, kb) when any
// component present keeps it:
//   local:   qb + o - local_left <= kb <= qb + o + local_right (present when
//            either side is set; an unset side is 0);
//   stride:  see StridePattern (present when stride > 0);
//   random:  random_blocks distinct key blocks per query block, drawn from
//            `seed` (docs/api.md "Block-sparse attention" gives the procedure);
//   block_mask: kBool [nqb, nkb], nonzero = keep.
// Key j is then allowed for query row i when the layout keeps (qb, kb), or i
// or j is one of global_tokens (a global token attends to and is attended by
// every position), and every other mask part allows it.
struct BlockSparseSpec {
  int64_t block_size = 0;  // [1, 4096]
  std::optional<int64_t> local_left, local_right;
  int64_t stride = 0;
  StridePattern stride_pattern = StridePattern::kStrided;
  int64_t random_blocks = 0;
  uint64_t seed = 0;
  // Strictly increasing token indices, each < max(Lq, Lk).
  absl::Span<const int32_t> global_tokens;
  std::optional<TensorView> block_mask;
};

// The parts of a mask. A key j is attended by query row i only if every part
// allows it; a row that no key is allowed for yields zeros (output and
// weights).
struct MaskSpec {
  // Allows j <= d(i) (see CausalAlignment).
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::kTopLeft;
  // Sliding window: allows d(i) - window_left <= j <= d(i) + window_right.
  // Unset = unbounded on that side; negative = InvalidArgument.
  std::optional<int64_t> window_left;
  std::optional<int64_t> window_right;
  // With window_left: keys j < sink_tokens are exempt from the window's left
  // edge (StreamingLLM's kept first tokens), still subject to every other
  // part. >= 0; softmax only; not with a block-sparse layout (whose
  // global_tokens do this there).
  int64_t sink_tokens = 0;
  // Empty, or [B] with 0 <= key_lengths[b] <= Lk: keys j >= key_lengths[b]
  // masked.
  absl::Span<const int32_t> key_lengths;
  // Optional explicit mask broadcastable (numpy rules, aligned to the right) to
  // [B, Hq, Lq, Lk] whatever the layout. kBool: nonzero = attend. kFloat32:
  // added to the scaled scores (-inf masks).
  std::optional<TensorView> explicit_mask;
  // Empty, or [Hq]: adds -slope[h] * |d(i) - j| to the scaled scores (ALiBi).
  absl::Span<const float> alibi_slopes;
  // Optional T5 relative position bias (RelativeBiasSpec).
  std::optional<RelativeBiasSpec> relative_bias;
  // Optional relative position keys (RelativeKeysSpec): Transformer-XL's
  // relative encoding, Shaw et al.'s clipped relative positions.
  std::optional<RelativeKeysSpec> relative_keys;
  // Optional block-sparse layout (see BlockSparseSpec); softmax method only.
  std::optional<BlockSparseSpec> block_sparse;
};

// How scores become the output (AttentionInputs::method).
//   kSoftmax: exact softmax attention, every mask part.
//   kLinear:  linear attention (LinearSpec).
//   kLsh:     Reformer's LSH attention (LshSpec).
enum class AttentionMethod { kSoftmax, kLinear, kLsh };

// Feature maps of linear attention, applied to x = sqrt(scale) * q (and k):
//   kEluPlusOne: elu(x) + 1;  kRelu: max(x, 0);
//   kFavorPlus:  Performer's positive orthogonal random features,
//                exp(w_r . x - |x|^2 / 2) / sqrt(m), r < m = num_features.
enum class FeatureMap { kEluPlusOne, kRelu, kFavorPlus };

// Linear attention: out_i = phi(q_i) . S_i / phi(q_i) . z_i with
// S_i = sum_j phi(k_j) v_j^T and z_i = sum_j phi(k_j) over the keys j that
// causal (prefix sums) and key_lengths allow; a zero denominator gives zeros.
// Windows, explicit masks, ALiBi, T5's bias, block-sparse layouts, soft-caps
// and sinks cannot be linearised and are InvalidArgument.
struct LinearSpec {
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  int64_t num_features = 0;  // kFavorPlus only: m in [1, 4096]
  uint64_t seed = 0;         // kFavorPlus only: draws the random matrix
};

// LSH attention (Reformer), shared-QK: keys are the queries normalised to unit
// length (AttentionInputs::key must be empty; value has Hq heads and Lq rows).
// num_hashes rounds each hash every position with a seeded random rotation into
// num_buckets buckets, sort by (bucket, position), and attend within chunks of
// chunk_size sorted positions and one chunk back; a position attends to itself
// only when nothing else is allowed; rounds are combined by their
// log-sum-exp. Causal and key_lengths apply; other mask parts are
// InvalidArgument.
struct LshSpec {
  int64_t num_hashes = 0;   // [1, 64]
  int64_t num_buckets = 0;  // 1, or even in [2, 4096]
  int64_t chunk_size = 0;   // [1, 65536]
  uint64_t seed = 0;
};

// One attention call's inputs. All views are borrowed for the duration of Run.
// query/key/value share one dtype (kFloat32, kBFloat16 or kFloat16); their last
// dimension must be dense (stride 1); other strides are free, so slices work.
struct AttentionInputs {
  TensorView query;
  TensorView key;
  TensorView value;
  Layout layout = Layout::kBHLD;
  MaskSpec mask;
  // Multiplies q·k; default 1/sqrt(D). Must be finite.
  std::optional<float> scale;
  // Logit soft-capping (Gemma 2): each scaled score t = scale·q·k becomes
  // softcap·tanh(t / softcap) before the mask's float parts (an explicit
  // float mask, ALiBi, T5's bias, relative keys) are added. Finite and > 0;
  // softmax method only.
  std::optional<float> softcap;
  // Empty, or [Hq] attention-sink logits (gpt-oss): each softmax of head h
  // has one more term, exp(sinks[h]), in its denominator, and no value goes
  // with it, so a row's weights sum to less than 1. Each finite; softmax
  // method only.
  absl::Span<const float> sinks;
  KernelPath kernel = KernelPath::kAuto;
  AttentionMethod method = AttentionMethod::kSoftmax;
  LinearSpec linear;  // method kLinear only
  LshSpec lsh;        // method kLsh only
};

// Where results go. `output` has the output shape (see Layout) in any of the
// three float dtypes; its last dimension must be dense. `weights`, when
// present, is kFloat32 [B, Hq, Lq, Lk], dense.
//
// `entropy` and `max_weight` (softmax method only), each when present
// kFloat32 [B, Hq, Lq] (AttentionShape::row_stats_shape), dense: per query
// row, the entropy -sum_j w_j ln w_j (in nats) of its weights w and its
// largest weight, computed by every kernel without a weights tensor (0 and 0
// for a row with no allowed key). A head whose entropy collapses to 0 or
// stays at ln(allowed keys) is one to look at.
struct AttentionOutputs {
  MutableTensorView output;
  std::optional<MutableTensorView> weights;
  std::optional<MutableTensorView> entropy;
  std::optional<MutableTensorView> max_weight;
};

// The dimensions of a validated call.
struct AttentionShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, k_len = 0,
          head_dim = 0, value_dim = 0;
  // In the call's layout.
  std::array<int64_t, 4> output_shape{};
  std::array<int64_t, 4> weights_shape{};
  // Of AttentionOutputs::entropy and ::max_weight: [B, Hq, Lq].
  std::array<int64_t, 3> row_stats_shape{};
  // Dense-attention FLOPs, 2·B·Hq·Lq·Lk·(D + Dv).
  double dense_flops() const;
  // What relative position keys add: a second D-long product per score,
  // 2·B·Hq·Lq·Lk·D.
  double relative_keys_flops() const;
  // The FLOPs this call's method and layout compute (set by Validate): dense
  // for softmax, the kept blocks' share of it for block-sparse layouts, the
  // method's own count for linear and LSH attention.
  double flops = 0.0;
};

// The checks Validate makes of AttentionInputs::softcap and ::sinks (for
// callers that must refuse them before other work): InvalidArgument naming
// the field.
absl::Status CheckSoftcap(std::optional<float> softcap);
absl::Status CheckSinks(absl::Span<const float> sinks, int64_t q_heads);
// ... and of MaskSpec::relative_bias, its fields named under `field`
// ("mask.relative_bias" in a call's mask).
absl::Status CheckRelativeBias(const RelativeBiasSpec& spec, int64_t q_heads,
                               absl::string_view field);
// ... and of MaskSpec::relative_keys for a call of q_heads heads of
// head_dim, its fields named under `field` ("mask.relative_keys" in a call's
// mask).
absl::Status CheckRelativeKeys(const RelativeKeysSpec& spec, int64_t q_heads,
                               int64_t head_dim, absl::string_view field);

// Internal: a call's inputs resolved into the kernels' form (core/problem.h).
struct Problem;

// A validated call (AttentionEngine::Validate): what it computes and how. It
// borrows the views of the inputs it was made from, which must outlive it.
struct AttentionPlan {
  AttentionShape shape;
  // The kernel Run will use: never kAuto.
  KernelPath kernel = KernelPath::kAuto;
  // Whether it was planned with a weights output.
  bool weights = false;
  std::shared_ptr<const Problem> problem;
};

struct EngineOptions {
  // OpenMP threads per Run call. 0 (default) = omp_get_max_threads().
  int num_threads = 0;
  // Caps the ISA of our vectorized code; kAuto (default) uses the best the CPU
  // has. kAvx2 forces the AVX2 path, kAvx512 leaves the bf16 products to
  // oneDNN on an AMX CPU (tests run every path the machine has).
  Isa max_isa = Isa::kAuto;
  // Query rows per tile; 0 (default) picks 32 to 256 from Lq, the call's
  // heads and threads (docs/core.md, "flash").
  int q_block = 0;
  // Keys per tile (default 512).
  int k_block = 512;
  // Softmax calls of fewer FLOPs (AttentionShape::flops) than this run on the
  // calling thread alone, with no OpenMP parallel region, whatever
  // num_threads is: for a tiny call, waking the team costs more than the
  // second thread gains. 0 (default) = every call uses num_threads. Linear
  // and LSH attention always use num_threads.
  double serial_below_flops = 0;
};

// Computes scaled dot-product attention on the CPU with oneDNN matmul
// primitives (cached by shape) and our own vectorized softmax.
//
// Thread safety: Run and Validate may be called concurrently from several
// threads; each Run uses up to EngineOptions::num_threads OpenMP threads, so
// callers that run N calls at once should give each engine cores / N threads.
class AttentionEngine {
 public:
  // InvalidArgument for bad options (negative threads or blocks, an ISA the CPU
  // lacks).
  static absl::StatusOr<std::unique_ptr<AttentionEngine>> Create(
      const EngineOptions& options);

  virtual ~AttentionEngine() = default;
  AttentionEngine(const AttentionEngine&) = delete;
  AttentionEngine& operator=(const AttentionEngine&) = delete;

  // Checks every input (dtypes, ranks, shapes, Hq % Hkv, masks, scale) and
  // plans the call: its dimensions and the kernel that will compute it with
  // (`weights`) or without a weights output. Computes nothing.
  // InvalidArgument naming the tensor or field, with expected and actual
  // values, on the first problem found, or for a requested kernel that
  // cannot serve the call (kFlash with weights, kDecode with a block-sparse
  // layout, ...).
  virtual absl::StatusOr<AttentionPlan> Validate(
      const AttentionInputs& inputs, bool weights = false) const = 0;

  // Computes a plan (Validate's, of any engine) into `outputs`, which must
  // have the plan's shapes and a weights tensor exactly when it was planned
  // with one. On error nothing is guaranteed about the output memory.
  // InvalidArgument for outputs that do not match, Internal if oneDNN fails.
  virtual absl::Status Run(const AttentionPlan& plan,
                           const AttentionOutputs& outputs) = 0;

  // Validate, then Run.
  absl::Status Run(const AttentionInputs& inputs,
                   const AttentionOutputs& outputs);

  // Computes plans[i] into outputs[i] for every i, each exactly as its own
  // Run on this engine would: the flash and the materialized calls each in
  // one parallel region over all their tiles (one thread when the plans'
  // FLOPs together are below EngineOptions::serial_below_flops), the others
  // one after another. For a server's dynamic batching: many small calls
  // for the cost of one, with no copy of their inputs or outputs.
  // InvalidArgument "calls[i]: ..." for a null plan, a plan or outputs Run
  // would refuse (then nothing has run), or when the spans' sizes differ;
  // Internal if oneDNN fails.
  virtual absl::Status RunBatch(absl::Span<const AttentionPlan* const> plans,
                                absl::Span<const AttentionOutputs> outputs) = 0;

  // Creates now every product primitive that softmax calls like `like` can
  // use — the same dtypes, head counts, head dims, layout, row strides and
  // mask parts, any Lq and Lk — so that such calls create none (a hosted layer
  // calls it when it loads). Primitives are shared by every engine of the
  // process. Linear and LSH methods have nothing to prepare. InvalidArgument
  // as Validate; Internal if oneDNN fails.
  virtual absl::Status Prepare(const AttentionInputs& like) = 0;

  // Sets up what the calling thread's first call would otherwise pay for:
  // its OpenMP team of num_threads() threads (libgomp creates a master
  // thread's team in its first parallel region) and its oneDNN stream. A
  // server's worker calls it once on its own thread before it takes tasks.
  // Internal if oneDNN fails.
  virtual absl::Status WarmUpThread() = 0;

  // Attention over paged KV caches (core/paged.h): every sequence exactly as
  // the stateless Run of PagedAsStateless would compute it, all sequences
  // without weights in one run of the decode kernel reading the blocks in
  // place (parallel over sequences × kv heads × key splits). InvalidArgument
  // naming the field ("sequences[3].query", ...), Internal if oneDNN fails.
  virtual absl::Status RunPaged(const PagedAttentionInputs& inputs) = 0;

  // The ISA our vectorized code uses.
  virtual Isa isa() const = 0;
  // Threads per Run.
  virtual int num_threads() const = 0;
  // True when bf16 inputs run bf16 GEMMs (else they are widened to f32).
  virtual bool bf16_gemm() const = 0;

 protected:
  AttentionEngine() = default;
};

// The rule by which Validate picks a softmax call's kernel: `requested`
// unless kAuto, else materialized with weights, decode for Lq <= 8 against
// Lk >= 1024, flash otherwise (a plan then takes flash for a block-sparse
// layout: AttentionPlan::kernel is the one that runs).
KernelPath ChooseKernel(const AttentionShape& shape, KernelPath requested,
                        bool weights);
absl::string_view KernelPathName(KernelPath path);  // "flash", "lsh", ...

// "2.6.3" — the oneDNN library linked at run time.
std::string OneDnnVersion();

}  // namespace attnserve

#endif  // ATTNSERVE_CORE_ATTENTION_H_
