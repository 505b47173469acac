#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/attention.h"
#include "core/dnnl_context.h"
#include "core/kernel_common.h"
#include "core/matmul.h"
#include "core/problem.h"
#include "core/status_macros.h"
#include "core/variants/linear.h"
#include "core/variants/lsh.h"
#include "core/vec_ops.h"
#include "dnnl.hpp"

namespace attnserve {
namespace {

// Query rows per tile. A tile pays fixed costs whatever its height (a oneDNN
// execute per product, the row group's set-up), so taller tiles are faster
// (B1 H8 D64 f32, one thread: L128 1.2x with 128 rows than with 32, L512 1.2x
// with 256 than with 64; docs/benchmarks.md) as long as the call has tiles
// enough to spread over its threads: the height Lq fills, halved while there
// are fewer than kTilesPerThread tiles per thread (not below 32). The heights
// are the powers of two from kMinAutoQueryBlock to kMaxAutoQueryBlock
// (Prepare creates their products).
constexpr int64_t kTilesPerThread = 4;
constexpr int64_t kMinAutoQueryBlock = 32, kMaxAutoQueryBlock = 256;
int64_t AutoQueryBlock(int64_t q_len, int64_t row_sets, int threads) {
  int64_t rows = q_len >= 384 ? kMaxAutoQueryBlock : q_len >= 96 ? 128 : 64;
  while (rows > kMinAutoQueryBlock && row_sets * ((q_len + rows - 1) / rows) <
                                          kTilesPerThread * int64_t{threads}) {
    rows /= 2;
  }
  return rows;
}

// The materialized kernel makes three passes over its rows of weights; keep a
// block's rows (rows × Lk floats) within about half of a 1 MiB L2.
int64_t MaterializedQueryBlock(int64_t q_len, int64_t k_len, int64_t row_sets,
                               int threads) {
  int64_t rows = AutoQueryBlock(q_len, row_sets, threads);
  while (rows > 32 && rows * k_len * int64_t{sizeof(float)} > (512 << 10))
    rows /= 2;
  return rows;
}

// The kernel that computes `problem` with or without a weights output: the
// method's own for linear and LSH attention; else ChooseKernel's, but flash
// for a block-sparse layout (the decode kernel's row sets span query
// blocks; flash tiles are the layout's blocks). InvalidArgument when a
// requested kernel cannot serve the call.
absl::StatusOr<KernelPath> PlanKernel(const Problem& problem, bool weights) {
  if (problem.method == AttentionMethod::kLinear) return KernelPath::kLinear;
  if (problem.method == AttentionMethod::kLsh) return KernelPath::kLsh;
  KernelPath path = ChooseKernel(problem.shape, problem.kernel, weights);
  if (problem.block_layout != nullptr && path == KernelPath::kDecode) {
    if (problem.kernel == KernelPath::kDecode) {
      return absl::InvalidArgumentError(
          "kernel: the decode kernel does not take block-sparse layouts");
    }
    path = KernelPath::kFlash;
  }
  if (weights != (path == KernelPath::kMaterialized)) {
    return absl::InvalidArgumentError(
        weights ? "kernel: only the materialized kernel returns weights"
                : "kernel: the materialized kernel needs a weights output");
  }
  return path;
}

class Engine final : public AttentionEngine {
 public:
  Engine(const EngineOptions& options, Isa isa, int threads, const VecOps* ops,
         MatmulCache* matmuls)
      : options_(options),
        isa_(isa),
        threads_(threads),
        ops_(ops),
        matmuls_(matmuls) {}

  using AttentionEngine::Run;

  absl::StatusOr<AttentionPlan> Validate(const AttentionInputs& inputs,
                                         bool weights) const override {
    ASSIGN_OR_RETURN(Problem problem, ResolveProblem(inputs));
    AttentionPlan plan;
    ASSIGN_OR_RETURN(plan.kernel, PlanKernel(problem, weights));
    plan.shape = problem.shape;
    plan.weights = weights;
    plan.problem = std::make_shared<const Problem>(std::move(problem));
    return plan;
  }

  absl::Status Run(const AttentionPlan& plan,
                   const AttentionOutputs& outputs) override {
    RETURN_IF_ERROR(CheckPlan(plan, outputs));
    const Problem& problem = *plan.problem;
    ASSIGN_OR_RETURN(Strides4 out_strides, ResolveOutput(problem, outputs));
    if (plan.kernel == KernelPath::kLinear || plan.kernel == KernelPath::kLsh) {
      return RunVariant(problem, outputs, out_strides);
    }
    const AttentionShape& s = problem.shape;
    if (s.batch == 0 || s.q_len == 0 || s.q_heads == 0) return absl::OkStatus();

    const int threads = s.flops < options_.serial_below_flops ? 1 : threads_;
    const KernelArgs args =
        ArgsFor(problem, outputs, out_strides, plan.kernel, threads);

    return WithWorkspaces([&](absl::Span<Workspace* const> ws) {
      switch (plan.kernel) {
        case KernelPath::kMaterialized:
          return RunMaterialized(args, ws);
        case KernelPath::kDecode:
          return RunDecode(args, ws);
        default:
          return RunFlash(args, ws);
      }
    });
  }

  absl::Status RunBatch(absl::Span<const AttentionPlan* const> plans,
                        absl::Span<const AttentionOutputs> outputs) override {
    if (plans.size() != outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("outputs: ", outputs.size(), " for ", plans.size(),
                       " plans (expected one per plan)"));
    }
    double flops = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (plans[i] == nullptr) {
        return PrefixedCall(i, absl::InvalidArgumentError("plan: null"));
      }
      RETURN_IF_ERROR(PrefixedCall(i, CheckPlan(*plans[i], outputs[i])));
      flops += plans[i]->shape.flops;
    }
    const int threads = flops < options_.serial_below_flops ? 1 : threads_;
    std::vector<KernelArgs> flash, materialized;
    std::vector<size_t> others;
    for (size_t i = 0; i < plans.size(); ++i) {
      const AttentionPlan& plan = *plans[i];
      const absl::StatusOr<Strides4> out_strides =
          ResolveOutput(*plan.problem, outputs[i]);
      if (!out_strides.ok()) return PrefixedCall(i, out_strides.status());
      const KernelPath kernel = plan.kernel;
      if (kernel != KernelPath::kFlash && kernel != KernelPath::kMaterialized) {
        others.push_back(i);
        continue;
      }
      const AttentionShape& s = plan.shape;
      if (s.batch == 0 || s.q_len == 0 || s.q_heads == 0) continue;
      (kernel == KernelPath::kFlash ? flash : materialized)
          .push_back(ArgsFor(*plan.problem, outputs[i], *out_strides, kernel,
                             threads));
    }
    if (!flash.empty() || !materialized.empty()) {
      RETURN_IF_ERROR(WithWorkspaces([&](absl::Span<Workspace* const> ws) {
        RETURN_IF_ERROR(RunFlashBatch(flash, ws));
        return RunMaterializedBatch(materialized, ws);
      }));
    }
    for (size_t i : others) {
      RETURN_IF_ERROR(PrefixedCall(i, Run(*plans[i], outputs[i])));
    }
    return absl::OkStatus();
  }

  absl::Status WarmUpThread() override {
    // An empty region of the engine's width: the team's threads are created
    // now and stay with this thread (libgomp keeps one pool per master).
#pragma omp parallel num_threads(threads_)
    {}
    return ThreadDnnlStream().status();
  }

  absl::Status RunPaged(const PagedAttentionInputs& inputs) override {
    RETURN_IF_ERROR(CheckPagedInputs(inputs));
    const size_t n = inputs.sequences.size();
    std::vector<Problem> problems(n);
    std::vector<KernelArgs> calls;
    std::vector<size_t> with_weights;
    calls.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const PagedSequence& seq = inputs.sequences[i];
      if (seq.weights) {
        with_weights.push_back(i);
        continue;
      }
      absl::StatusOr<Problem> problem =
          ResolveProblem(PagedAsStateless(inputs, seq, nullptr, nullptr));
      if (!problem.ok()) return Prefixed(i, problem.status());
      problems[i] = *std::move(problem);
      problems[i].kv_blocks = seq.kv.blocks.data();
      problems[i].block_tokens = inputs.block_tokens;
      problems[i].kv_kept_blocks = seq.kv.kept_blocks;
      problems[i].kv_evicted_blocks = seq.kv.evicted_blocks;
      problems[i].kv_layout =
          PagedBlockLayout(inputs.kv_heads, inputs.head_dim, inputs.value_dim,
                           inputs.block_tokens, inputs.kv_dtype);
      const AttentionOutputs outputs = PagedOutputs(seq);
      absl::StatusOr<Strides4> out_strides =
          ResolveOutput(problems[i], outputs);
      if (!out_strides.ok()) return Prefixed(i, out_strides.status());
      KernelArgs args = ArgsFor(problems[i], outputs, *out_strides,
                                KernelPath::kDecode, threads_);
      // Key tiles are whole blocks, so that no tile crosses one.
      args.k_block = inputs.block_tokens;
      if (seq.query.shape[0] * problems[i].group <= kMaxKvRowsRows) {
        args.kv_rows = true;
        args.gemm_dtype = DType::kFloat32;
        args.amx = false;
      }
      calls.push_back(args);
    }
    if (!calls.empty()) {
      RETURN_IF_ERROR(WithWorkspaces([&](absl::Span<Workspace* const> ws) {
        return RunDecodeBatch(calls, ws);
      }));
    }
    // Weights need the materialized kernel, which reads a contiguous cache.
    for (size_t i : with_weights) {
      const PagedSequence& seq = inputs.sequences[i];
      const size_t es = DTypeSize(PagedOperandDType(inputs.kv_dtype));
      std::vector<char> keys(
          static_cast<size_t>(seq.kv.tokens * inputs.kv_heads *
                              inputs.head_dim) *
          es);
      std::vector<char> values(
          static_cast<size_t>(seq.kv.tokens * inputs.kv_heads *
                              inputs.value_dim) *
          es);
      GatherPagedKv(inputs, seq.kv, keys.data(), values.data());
      const absl::Status st =
          Run(PagedAsStateless(inputs, seq, keys.data(), values.data()),
              PagedOutputs(seq));
      if (!st.ok()) return Prefixed(i, st);
    }
    return absl::OkStatus();
  }

  absl::Status Prepare(const AttentionInputs& like) override {
    ASSIGN_OR_RETURN(Problem p, ResolveProblem(like));
    if (p.method != AttentionMethod::kSoftmax) return absl::OkStatus();
    // The flash tiles of kernel_common.h's "Tile shapes" (which the
    // materialized kernel uses too), for every Lq and Lk:
    // full query blocks and row groups read the queries in place, padded row
    // groups and the decode kernel's gathered rows a dense copy (ld = D); key
    // spans of whole granules read K and V in place, a padded tail a dense
    // copy of kKeyGranule rows, a small span copied whole a dense copy of
    // PaddedKeys rows.
    const DType gemm = GemmDType(p);
    const int64_t d = p.shape.head_dim, dv = p.shape.value_dim;
    const int64_t kb = options_.k_block;
    const bool widened = p.dtype != gemm;
    const int64_t ldq = widened ? d : p.q_strides.row;
    const int64_t ldk = widened ? d : p.k_strides.row;
    const int64_t ldv = widened ? dv : p.v_strides.row;
    struct Rows {
      int64_t m, lda;
    };
    std::vector<Rows> rows = {{kRowGranule, ldq}};
    if (options_.q_block > 0) {
      rows.push_back({options_.q_block, ldq});
    } else {
      for (int64_t qb = kMinAutoQueryBlock; qb <= kMaxAutoQueryBlock; qb *= 2)
        rows.push_back({qb, ldq});
    }
    for (int64_t r = kRowPad; r <= kRowGranule; r += kRowPad) {
      rows.push_back({r, d});
    }
    struct Keys {
      int64_t n, ldk, ldv;
    };
    std::vector<Keys> keys = {{kb, ldk, ldv}};
    for (int64_t n = kKeyGranule; n < kb; n += kKeyGranule) {
      keys.push_back({n, ldk, ldv});
    }
    // Padded keys: a tail of one granule, or a small span copied whole
    // (PaddedKeys: under one granule, multiples of kKeyPad).
    for (int64_t n = kKeyGranule; n <= kb; n += kKeyGranule) {
      if (ldk != d || ldv != dv) keys.push_back({n, d, dv});
    }
    for (int64_t n = kKeyPad; n < kKeyGranule && n < kb; n += kKeyPad) {
      keys.push_back({n, d, dv});
    }
    for (const Rows& r : rows) {
      for (const Keys& k : keys) {
        RETURN_IF_ERROR(matmuls_->Prepare(
            MatmulShape{r.m, k.n, d, r.lda, k.ldk, kb, true, gemm, false}));
        RETURN_IF_ERROR(matmuls_->Prepare(
            MatmulShape{r.m, dv, k.n, kb, k.ldv, dv, false, gemm, true}));
      }
    }
    return absl::OkStatus();
  }

  Isa isa() const override { return isa_; }
  int num_threads() const override { return threads_; }
  bool bf16_gemm() const override { return matmuls_->bf16_supported(); }

 private:
  static absl::Status Prefixed(size_t sequence, const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("sequences[", sequence,
                                                    "]: ", status.message()));
  }
  static absl::Status PrefixedCall(size_t call, const absl::Status& status) {
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrCat("calls[", call, "]: ", status.message()));
  }

  // A plan made by Validate, and outputs with weights as planned.
  static absl::Status CheckPlan(const AttentionPlan& plan,
                                const AttentionOutputs& outputs) {
    if (plan.problem == nullptr) {
      return absl::InvalidArgumentError("plan: not made by Validate");
    }
    if (outputs.weights.has_value() != plan.weights) {
      return absl::InvalidArgumentError(
          plan.weights ? "weights: the call was planned with a weights output"
                       : "weights: the call was planned without a weights "
                         "output");
    }
    return absl::OkStatus();
  }

  // Linear and LSH attention (core/variants/) on this engine's workspaces.
  absl::Status RunVariant(const Problem& problem,
                          const AttentionOutputs& outputs,
                          const Strides4& out_strides) {
    return WithWorkspaces([&](absl::Span<Workspace* const> ws) {
      VariantContext context;
      context.ops = ops_;
      context.ws = ws;
      context.gemm_dtype = GemmDType(problem);
      return problem.method == AttentionMethod::kLinear
                 ? RunLinear(problem, outputs, out_strides, context)
                 : RunLsh(problem, outputs, out_strides, context);
    });
  }

  // bf16 products for bf16 inputs where oneDNN has them, else f32.
  DType GemmDType(const Problem& problem) const {
    return problem.dtype == DType::kBFloat16 && matmuls_->bf16_supported()
               ? DType::kBFloat16
               : DType::kFloat32;
  }

  // The kernel's arguments for a call on `threads` threads.
  KernelArgs ArgsFor(const Problem& problem, const AttentionOutputs& outputs,
                     const Strides4& out_strides, KernelPath path,
                     int threads) const {
    const AttentionShape& s = problem.shape;
    const bool weights = outputs.weights.has_value();
    KernelArgs args;
    args.p = &problem;
    static std::atomic<uint64_t> runs{0};
    args.run = runs.fetch_add(1, std::memory_order_relaxed) + 1;
    args.out = outputs.output.data;
    args.out_dtype = outputs.output.dtype;
    args.out_strides = out_strides;
    args.weights =
        weights ? static_cast<float*>(outputs.weights->data) : nullptr;
    if (outputs.entropy) {
      args.entropy = static_cast<float*>(outputs.entropy->data);
    }
    if (outputs.max_weight) {
      args.max_weight = static_cast<float*>(outputs.max_weight->data);
    }
    args.ops = ops_;
    args.gemm_dtype = GemmDType(problem);
    const int64_t row_sets = s.batch * s.q_heads;
    args.q_block =
        options_.q_block > 0 ? options_.q_block
        : path == KernelPath::kMaterialized
            ? MaterializedQueryBlock(s.q_len, s.k_len, row_sets, threads)
            : AutoQueryBlock(s.q_len, row_sets, threads);
    args.k_block = options_.k_block;
    if (problem.block_layout != nullptr && path == KernelPath::kFlash) {
      // Query tiles are the layout's blocks; key tiles are runs of its blocks
      // (each block kept, skipped or checked per element) up to k_block keys.
      const int64_t bs = problem.block_layout->block_size();
      args.q_block = bs;
      args.k_block = bs * std::max<int64_t>(1, options_.k_block / bs);
    }
    args.num_threads = threads;
    // The AMX path's interleaved softmax keeps no row statistics.
    args.amx = isa_ == Isa::kAmx && args.gemm_dtype == DType::kBFloat16 &&
               !args.row_stats();
    return args;
  }

  // Runs fn(workspaces) on one workspace per thread of this call, taken from
  // the pool and given back after: reused across calls, and concurrent calls
  // each take their own.
  template <typename Fn>
  absl::Status WithWorkspaces(const Fn& fn) {
    std::vector<std::unique_ptr<Workspace>> owned = AcquireWorkspaces();
    std::vector<Workspace*> ws(owned.size());
    for (size_t t = 0; t < owned.size(); ++t) ws[t] = owned[t].get();
    const absl::Status st = fn(absl::MakeConstSpan(ws));
    ReleaseWorkspaces(std::move(owned));
    return st;
  }

  std::vector<std::unique_ptr<Workspace>> AcquireWorkspaces() {
    std::vector<std::unique_ptr<Workspace>> ws;
    {
      absl::MutexLock lock(&mu_);
      while (!free_.empty() && static_cast<int>(ws.size()) < threads_) {
        ws.push_back(std::move(free_.back()));
        free_.pop_back();
      }
    }
    while (static_cast<int>(ws.size()) < threads_) {
      auto w = std::make_unique<Workspace>();
      w->matmul = matmuls_->NewRunner();
      ws.push_back(std::move(w));
    }
    return ws;
  }

  void ReleaseWorkspaces(std::vector<std::unique_ptr<Workspace>> ws) {
    absl::MutexLock lock(&mu_);
    for (auto& w : ws) free_.push_back(std::move(w));
  }

  const EngineOptions options_;
  const Isa isa_;
  const int threads_;
  const VecOps* const ops_;
  MatmulCache* const matmuls_;  // MatmulCache::Shared()
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Workspace>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

KernelPath ChooseKernel(const AttentionShape& shape, KernelPath requested,
                        bool weights) {
  if (requested != KernelPath::kAuto) return requested;
  if (weights) return KernelPath::kMaterialized;
  // Few query rows against many keys: per-head parallelism starves, split the
  // keys.
  if (shape.q_len <= 8 && shape.k_len >= 1024) return KernelPath::kDecode;
  return KernelPath::kFlash;
}

absl::string_view KernelPathName(KernelPath path) {
  switch (path) {
    case KernelPath::kAuto:
      return "auto";
    case KernelPath::kFlash:
      return "flash";
    case KernelPath::kMaterialized:
      return "materialized";
    case KernelPath::kDecode:
      return "decode";
    case KernelPath::kLinear:
      return "linear";
    case KernelPath::kLsh:
      return "lsh";
  }
  return "?";
}

absl::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAuto:
      return "auto";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
    case Isa::kNeon:
      return "neon";
    case Isa::kSve:
      return "sve";
  }
  return "?";
}

bool ParseIsa(absl::string_view name, Isa* isa) {
  for (const Isa candidate : {Isa::kAuto, Isa::kAvx2, Isa::kAvx512, Isa::kAmx,
                              Isa::kNeon, Isa::kSve}) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<AttentionEngine>> AttentionEngine::Create(
    const EngineOptions& options) {
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads: must be >= 0, got ", options.num_threads));
  }
  if (options.q_block < 0 || options.q_block > kMaxQueryBlock) {
    return absl::InvalidArgumentError(absl::StrCat("q_block: must be in [0, ",
                                                   kMaxQueryBlock, "], got ",
                                                   options.q_block));
  }
  if (!(options.serial_below_flops >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serial_below_flops: must be >= 0, got ", options.serial_below_flops));
  }
  if (options.k_block < 1 || options.k_block > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("k_block: must be in [1, 65536], got ", options.k_block));
  }
  ASSIGN_OR_RETURN(const Isa isa, ResolveIsa(options.max_isa));
  const VecOps* ops = &VecOpsFor(isa);
  const int threads =
      options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  ASSIGN_OR_RETURN(MatmulCache * matmuls, MatmulCache::Shared());
  return std::unique_ptr<AttentionEngine>(
      new Engine(options, isa, threads, ops, matmuls));
}

absl::Status AttentionEngine::Run(const AttentionInputs& inputs,
                                  const AttentionOutputs& outputs) {
  ASSIGN_OR_RETURN(const AttentionPlan plan,
                   Validate(inputs, outputs.weights.has_value()));
  return Run(plan, outputs);
}

std::string OneDnnVersion() {
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat(v->major, ".", v->minor, ".", v->patch);
}

}  // namespace attnserve
