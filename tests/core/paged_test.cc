// AttentionEngine::RunPaged against the reference over the equivalent
// stateless call (built here from a contiguous copy of the same keys and
// values): dtypes, GQA/MQA, block sizes, lengths around block edges, new
// queries from 1 to many, causal or not, windows, ALiBi, scales, batches of
// sequences of different lengths in one call, weights, validation, ISA paths.

#include "core/paged.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "core/vec_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

// A sequence's cache in both forms: contiguous [T, Hkv, D] / [T, Hkv, Dv]
// tensors, and blocks in core/paged.h's layout holding the same values. An
// int8 cache quantizes random f32 rows, and its tensors hold what the blocks
// read back as (each row's int8 elements times its scale).
struct Cache {
  TestTensor keys, values;
  std::vector<std::vector<char>> blocks;
  std::vector<const void*> pointers;

  Cache(DType dtype, int64_t tokens, int64_t hkv, int64_t d, int64_t dv,
        int64_t bt, uint64_t seed)
      : keys(TestTensor::Random(PagedOperandDType(dtype), {tokens, hkv, d},
                                seed)),
        values(TestTensor::Random(PagedOperandDType(dtype), {tokens, hkv, dv},
                                  seed + 1)) {
    const PagedBlockLayout layout(hkv, d, dv, bt, dtype);
    const int64_t n = (tokens + bt - 1) / bt;
    // Every byte the tokens do not fill, and one spare block past the end,
    // holds 0x7f (about 3e38 in f32/bf16, NaN in f16, 127 in int8 with a
    // scale of 3e38): reading any shows.
    blocks.assign(static_cast<size_t>(n + 1),
                  std::vector<char>(static_cast<size_t>(layout.bytes()),
                                    static_cast<char>(0x7f)));
    for (int64_t t = 0; t < tokens; ++t) {
      char* block = blocks[static_cast<size_t>(t / bt)].data();
      for (int64_t h = 0; h < hkv; ++h) {
        Store(dtype, &keys, (t * hkv + h) * d, d, block + layout.key(h, t % bt),
              block + layout.key_scale(h, t % bt));
        Store(dtype, &values, (t * hkv + h) * dv, dv,
              block + layout.value(h, t % bt),
              block + layout.value_scale(h, t % bt));
      }
    }
    for (auto& b : blocks) pointers.push_back(b.data());
  }

  // Row [at, at + n) of `from` into the block (quantized for int8, `from`
  // then rewritten with what the block holds).
  static void Store(DType dtype, TestTensor* from, int64_t at, int64_t n,
                    char* row, char* scale) {
    if (dtype != DType::kInt8) {
      const size_t es = DTypeSize(dtype);
      std::memcpy(row, static_cast<const char*>(from->data()) + at * es,
                  n * es);
      return;
    }
    float* x = static_cast<float*>(from->data()) + at;
    const float s = QuantizeInt8(x, n, reinterpret_cast<int8_t*>(row));
    std::memcpy(scale, &s, sizeof s);
    DequantizeInt8(reinterpret_cast<const int8_t*>(row), n, s, x);
  }
};

struct PagedCase {
  DType dtype = DType::kFloat32;
  int64_t hq = 4, hkv = 2, d = 16, dv = 16, bt = 16;
  std::vector<int64_t> tokens = {40};
  std::vector<int64_t> lnew = {1};
  bool causal = true;
  std::optional<int64_t> window_left;
  bool alibi = false;
  std::optional<float> scale;
  std::optional<float> softcap;
  bool sinks = false;
  bool relative_bias = false;  // T5's decoder bias: 8 buckets, distance 40
  std::vector<bool> weights;   // per sequence; empty = none
  bool row_stats = false;      // every sequence's entropy and max weight
  // Each sequence's own window and kept first keys (a sink + window
  // session), and with `drop` the blocks no query reaches left out of its
  // block list.
  std::optional<int64_t> seq_window_left;
  int64_t sink_tokens = 0;
  bool drop = false;
  Isa isa = Isa::kAuto;

  std::string Name() const {
    return absl::StrCat(DTypeName(dtype), " hq", hq, " hkv", hkv, " d", d,
                        " dv", dv, " bt", bt, " causal", causal, " window",
                        window_left.value_or(-1), " alibi", alibi, " softcap",
                        softcap.value_or(0), " sinks", sinks);
  }
};

void ExpectPagedMatchesReference(const PagedCase& c) {
  SCOPED_TRACE(c.Name());
  EngineOptions options;
  options.max_isa = CapIsa(c.isa);
  options.num_threads = 2;
  auto engine = AttentionEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  const size_t n = c.tokens.size();
  std::vector<std::unique_ptr<Cache>> caches;
  std::vector<TestTensor> queries, outputs, weights, entropies, max_weights;
  std::vector<float> slopes;
  for (int64_t h = 0; h < c.hq; ++h) slopes.push_back(0.1f * (h + 1));
  std::vector<float> sinks;
  for (int64_t h = 0; h < c.hq; ++h) sinks.push_back(2.0f - 1.5f * h);
  std::vector<float> rel_table;
  for (int64_t e = 0; e < c.hq * 8; ++e) {
    rel_table.push_back(0.25f * static_cast<float>((e * 5) % 9) - 1.0f);
  }
  std::optional<RelativeBiasSpec> relative_bias;
  if (c.relative_bias) {
    RelativeBiasSpec r;
    r.table = rel_table;
    r.num_buckets = 8;
    r.max_distance = 40;
    relative_bias = r;
  }
  std::vector<PagedSequence> seqs(n);
  for (size_t i = 0; i < n; ++i) {
    caches.push_back(std::make_unique<Cache>(c.dtype, c.tokens[i], c.hkv, c.d,
                                             c.dv, c.bt, 10 + 3 * i));
    queries.push_back(TestTensor::Random(PagedOperandDType(c.dtype),
                                         {c.lnew[i], c.hq, c.d}, 100 + i));
    outputs.emplace_back(DType::kFloat32,
                         std::vector<int64_t>{c.lnew[i], c.hq, c.dv});
    outputs.back().Fill(NAN);
    const bool w = !c.weights.empty() && c.weights[i];
    weights.emplace_back(DType::kFloat32,
                         std::vector<int64_t>{c.hq, c.lnew[i], c.tokens[i]});
    entropies.emplace_back(DType::kFloat32,
                           std::vector<int64_t>{c.hq, c.lnew[i]});
    entropies.back().Fill(NAN);
    max_weights.emplace_back(DType::kFloat32,
                             std::vector<int64_t>{c.hq, c.lnew[i]});
    max_weights.back().Fill(NAN);
  }
  std::vector<std::vector<const void*>> held(n);
  for (size_t i = 0; i < n; ++i) {
    seqs[i].query = queries[i].view();
    held[i] = caches[i]->pointers;
    seqs[i].window_left = c.seq_window_left;
    seqs[i].sink_tokens = c.sink_tokens;
    if (c.drop) {
      // Blocks past the kept keys' and before the first query's window.
      const int64_t kept = (c.sink_tokens + c.bt - 1) / c.bt;
      const int64_t reach = c.tokens[i] - c.lnew[i] - *c.seq_window_left;
      const int64_t dropped = std::max<int64_t>(0, reach / c.bt - kept);
      held[i].erase(held[i].begin() + kept, held[i].begin() + kept + dropped);
      seqs[i].kv.kept_blocks = kept;
      seqs[i].kv.evicted_blocks = dropped;
    }
    seqs[i].kv.blocks = held[i];
    seqs[i].kv.tokens = c.tokens[i];
    seqs[i].output = outputs[i].mutable_view();
    if (!c.weights.empty() && c.weights[i]) {
      seqs[i].weights = weights[i].mutable_view();
    }
    if (c.row_stats) {
      seqs[i].entropy = entropies[i].mutable_view();
      seqs[i].max_weight = max_weights[i].mutable_view();
    }
  }
  PagedAttentionInputs in;
  in.q_heads = c.hq;
  in.kv_heads = c.hkv;
  in.head_dim = c.d;
  in.value_dim = c.dv;
  in.block_tokens = c.bt;
  in.kv_dtype = c.dtype;
  in.causal = c.causal;
  in.window_left = c.window_left;
  if (c.alibi) in.alibi_slopes = slopes;
  in.scale = c.scale;
  in.softcap = c.softcap;
  if (c.sinks) in.sinks = sinks;
  in.relative_bias = relative_bias;
  in.sequences = seqs;
  const absl::Status st = (*engine)->RunPaged(in);
  ASSERT_TRUE(st.ok()) << st;

  // An int8 cache computes in f32 over the values its blocks hold; with
  // AVX512-VNNI its products round the queries and the weights to 16-bit
  // integers (core/vec_ops.h: below 2^-16 of each row's largest element).
  const DType operands = PagedOperandDType(c.dtype);
  const bool vnni =
      c.dtype == DType::kInt8 && c.isa != Isa::kAvx2 && HasAvx512Vnni();
  const float tol = vnni ? 2e-4f : operands == DType::kFloat32 ? 1e-5f : 2e-2f;
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(absl::StrCat("sequence ", i, " tokens ", c.tokens[i], " lnew ",
                              c.lnew[i]));
    // The stateless call: BLHD, batch 1, bottom-right causal.
    AttentionInputs ref_in;
    ref_in.layout = Layout::kBLHD;
    const TensorView q = queries[i].view();
    ref_in.query = MakeTensorView(q.data, operands, {1, c.lnew[i], c.hq, c.d});
    ref_in.key = MakeTensorView(caches[i]->keys.data(), operands,
                                {1, c.tokens[i], c.hkv, c.d});
    ref_in.value = MakeTensorView(caches[i]->values.data(), operands,
                                  {1, c.tokens[i], c.hkv, c.dv});
    ref_in.mask.causal = c.causal;
    ref_in.mask.alignment = CausalAlignment::kBottomRight;
    ref_in.mask.window_left = c.window_left;
    if (c.seq_window_left &&
        (!c.window_left || *c.seq_window_left < *c.window_left)) {
      ref_in.mask.window_left = c.seq_window_left;
    }
    ref_in.mask.sink_tokens = c.sink_tokens;
    if (c.alibi) ref_in.mask.alibi_slopes = slopes;
    ref_in.scale = c.scale;
    ref_in.softcap = c.softcap;
    if (c.sinks) ref_in.sinks = sinks;
    ref_in.mask.relative_bias = relative_bias;
    TestTensor ref_out(DType::kFloat32, {1, c.lnew[i], c.hq, c.dv});
    TestTensor ref_w(DType::kFloat32, {1, c.hq, c.lnew[i], c.tokens[i]});
    TestTensor ref_entropy(DType::kFloat32, {1, c.hq, c.lnew[i]});
    TestTensor ref_max_weight(DType::kFloat32, {1, c.hq, c.lnew[i]});
    AttentionOutputs ref_outputs;
    ref_outputs.output = ref_out.mutable_view();
    ref_outputs.weights = ref_w.mutable_view();
    ref_outputs.entropy = ref_entropy.mutable_view();
    ref_outputs.max_weight = ref_max_weight.mutable_view();
    ASSERT_TRUE(ReferenceAttention(ref_in, ref_outputs).ok());
    for (int64_t e = 0; e < ref_out.size(); ++e) {
      const float ref = ref_out.at(e);
      ASSERT_NEAR(outputs[i].at(e), ref, tol * (1 + std::fabs(ref)))
          << "output element " << e;
    }
    if (!c.weights.empty() && c.weights[i]) {
      for (int64_t e = 0; e < ref_w.size(); ++e) {
        ASSERT_NEAR(weights[i].at(e), ref_w.at(e), tol)
            << "weights element " << e;
      }
    }
    if (c.row_stats) {
      // Entropy (up to ln(tokens) nats) from f32 scores.
      const float stol = std::max(tol, 2e-5f);
      for (int64_t e = 0; e < ref_entropy.size(); ++e) {
        ASSERT_NEAR(entropies[i].at(e), ref_entropy.at(e),
                    stol * (1 + ref_entropy.at(e)))
            << "entropy element " << e;
        ASSERT_NEAR(max_weights[i].at(e), ref_max_weight.at(e), stol)
            << "max_weight element " << e;
      }
    }
  }
}

class PagedTest : public ::testing::TestWithParam<Isa> {};

TEST_P(PagedTest, DecodeStepsOverEveryDTypeAndHeadGrouping) {
  for (DType dtype :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {4, 1}}) {
      PagedCase c;
      c.isa = GetParam();
      c.dtype = dtype;
      c.hq = hq;
      c.hkv = hkv;
      c.tokens = {1, 15, 16, 17, 300};
      c.lnew = {1, 1, 1, 1, 1};
      ExpectPagedMatchesReference(c);
    }
  }
}

TEST_P(PagedTest, ManyNewQueriesBlockSizesAndDims) {
  for (int64_t bt : {1, 16, 64, 100}) {
    PagedCase c;
    c.isa = GetParam();
    c.bt = bt;
    c.d = 32;
    c.dv = 8;
    c.hq = 6;
    c.hkv = 3;
    // Chunked prefill and speculative verification: Lnew > 1, up to the
    // whole cache, and more new queries than cached tokens (early rows see
    // no key: zeros).
    c.tokens = {130, 64, 5, 3};
    c.lnew = {17, 64, 5, 7};
    ExpectPagedMatchesReference(c);
  }
}

TEST_P(PagedTest, MaskPartsAndScale) {
  PagedCase c;
  c.isa = GetParam();
  c.tokens = {200, 33};
  c.lnew = {3, 2};
  c.window_left = 20;
  ExpectPagedMatchesReference(c);
  c.window_left.reset();
  c.alibi = true;
  ExpectPagedMatchesReference(c);
  c.alibi = false;
  c.scale = 0.5f;
  c.causal = false;
  ExpectPagedMatchesReference(c);
  c.scale = 0.0f;
  ExpectPagedMatchesReference(c);
}

// Gemma 2's soft-cap, gpt-oss's sinks and T5's bias in every stored dtype,
// in decode steps (the products over stored rows), chunked prefill (GEMMs)
// and with weights (the materialized kernel).
TEST_P(PagedTest, SoftcapSinksAndRelativeBiasInEveryPath) {
  for (DType dtype :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    PagedCase c;
    c.isa = GetParam();
    c.dtype = dtype;
    c.d = 32;
    c.dv = 32;
    c.hq = 8;
    c.hkv = 2;
    c.tokens = {300, 64, 5, 0};
    c.lnew = {1, 40, 2, 1};
    c.weights = {false, false, true, false};
    c.row_stats = true;
    c.softcap = 0.75f;
    c.sinks = true;
    ExpectPagedMatchesReference(c);
    c.alibi = true;
    c.window_left = 30;
    c.softcap.reset();
    ExpectPagedMatchesReference(c);
    // T5's decoder bias at each sequence's own positions (tokens - Lnew on).
    c.relative_bias = true;
    c.window_left.reset();
    ExpectPagedMatchesReference(c);
  }
}

// StreamingLLM's sink + window sessions: each sequence's own window with its
// first keys kept, the blocks between them dropped from its block list, in
// every stored dtype, decode steps, chunks (GEMMs) and weights (the dropped
// keys' weights are zeros).
TEST_P(PagedTest, SinkAndWindowWithTheMiddleDropped) {
  for (DType dtype :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    PagedCase c;
    c.isa = GetParam();
    c.dtype = dtype;
    c.hq = 8;
    c.hkv = 2;
    c.tokens = {300, 181, 40, 9};
    c.lnew = {1, 20, 3, 2};
    c.weights = {false, false, true, false};
    c.row_stats = true;
    c.seq_window_left = 47;
    c.sink_tokens = 4;
    c.drop = true;
    ExpectPagedMatchesReference(c);
    // The call's own window narrower still, with ALiBi and sinks.
    c.window_left = 30;
    c.alibi = true;
    c.sinks = true;
    ExpectPagedMatchesReference(c);
  }
}

TEST_P(PagedTest, DroppedBlocksWithinReachAreRefused) {
  EngineOptions options;
  options.max_isa = CapIsa(GetParam());
  auto engine = AttentionEngine::Create(options);
  ASSERT_TRUE(engine.ok());
  Cache cache(DType::kFloat32, 100, 1, 8, 8, 16, 1);
  TestTensor q = TestTensor::Random(DType::kFloat32, {1, 1, 8}, 2);
  TestTensor out(DType::kFloat32, {1, 1, 8});
  std::vector<const void*> held = {cache.pointers[0], cache.pointers[5],
                                   cache.pointers[6]};
  PagedSequence seq;
  seq.query = q.view();
  seq.output = out.mutable_view();
  seq.kv.blocks = held;
  seq.kv.tokens = 100;
  seq.kv.kept_blocks = 1;
  seq.kv.evicted_blocks = 4;  // tokens [16, 80)
  seq.sink_tokens = 4;
  PagedAttentionInputs in;
  in.q_heads = 1;
  in.kv_heads = 1;
  in.head_dim = 8;
  in.value_dim = 8;
  in.block_tokens = 16;
  in.sequences = absl::MakeConstSpan(&seq, 1);
  // Query 99 sees keys from 99 - 19 = 80 on: allowed.
  seq.window_left = 19;
  EXPECT_TRUE((*engine)->RunPaged(in).ok());
  for (const int64_t window : {20, 1000}) {
    seq.window_left = window;
    EXPECT_THAT((*engine)->RunPaged(in),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("sequences[0].kv: its dropped tokens [16, "
                                   "80) are within reach of its queries")));
  }
  seq.window_left.reset();
  EXPECT_THAT((*engine)->RunPaged(in),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sequences[0].sink_tokens: needs")));
  seq.window_left = 19;
  seq.sink_tokens = 17;  // past the kept block
  EXPECT_THAT(
      (*engine)->RunPaged(in),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("within reach")));
}

TEST_P(PagedTest, EmptyCachesAndWeights) {
  PagedCase c;
  c.isa = GetParam();
  c.tokens = {0, 70, 9};
  c.lnew = {1, 4, 2};
  c.weights = {false, true, false};
  c.dtype = DType::kBFloat16;
  ExpectPagedMatchesReference(c);
  // An empty cache's rows: entropy and max weight 0.
  c.row_stats = true;
  ExpectPagedMatchesReference(c);
}

TEST_P(PagedTest, Int8CachesInEveryPath) {
  // Chunked prefill, masks and weights read int8 rows as the decode does.
  PagedCase c;
  c.isa = GetParam();
  c.dtype = DType::kInt8;
  c.d = 32;
  c.dv = 24;
  c.hq = 6;
  c.hkv = 3;
  c.tokens = {130, 64, 5, 0};
  c.lnew = {17, 64, 7, 1};
  ExpectPagedMatchesReference(c);
  c.tokens = {200, 33};
  c.lnew = {3, 2};
  c.window_left = 20;
  c.alibi = true;
  c.weights = {true, false};
  ExpectPagedMatchesReference(c);
}

TEST_P(PagedTest, HeadDimsOfModelsInEveryDType) {
  // The widths the decode's vectorized products take whole (multiples of 32)
  // and in parts, odd token counts, and a few new queries.
  for (DType dtype :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt8}) {
    for (const int64_t d : {96, 128, 80}) {
      PagedCase c;
      c.isa = GetParam();
      c.dtype = dtype;
      c.hq = 8;
      c.hkv = 2;
      c.d = d;
      c.dv = d;
      c.bt = 32;
      c.tokens = {1, 33, 301};
      c.lnew = {1, 1, 2};
      ExpectPagedMatchesReference(c);
    }
    // MLA with absorbed weights (DeepSeek-V2/V3): one latent kv head, keys
    // of 576 and values of 512; decode steps and a chunk of 20 (GEMMs).
    PagedCase mla;
    mla.isa = GetParam();
    mla.dtype = dtype;
    mla.hq = 16;
    mla.hkv = 1;
    mla.d = 576;
    mla.dv = 512;
    mla.bt = 64;
    mla.tokens = {1, 200, 130};
    mla.lnew = {1, 1, 20};
    ExpectPagedMatchesReference(mla);
  }
}

TEST_P(PagedTest, ABatchOfManySequencesInOneCall) {
  PagedCase c;
  c.isa = GetParam();
  c.hq = 8;
  c.hkv = 2;
  c.d = 64;
  c.dv = 64;
  c.bt = 32;
  c.tokens.clear();
  c.lnew.clear();
  for (int i = 0; i < 24; ++i) {
    c.tokens.push_back(1 + (i * 37) % 400);
    c.lnew.push_back(1 + i % 3);
  }
  ExpectPagedMatchesReference(c);
}

INSTANTIATE_TEST_SUITE_P(
    Isas, PagedTest, ::testing::ValuesIn(::attnserve::testing::MachineIsas()),
    [](const ::testing::TestParamInfo<Isa>& p) {
      return ::attnserve::testing::IsaLabel(p.param);
    });

TEST(PagedValidationTest, NamesTheSequenceAndTheField) {
  auto engine = AttentionEngine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok());
  Cache cache(DType::kFloat32, 20, 2, 8, 8, 16, 1);
  TestTensor q = TestTensor::Random(DType::kFloat32, {1, 4, 8}, 2);
  TestTensor out(DType::kFloat32, {1, 4, 8});
  std::vector<PagedSequence> seqs(2);
  for (PagedSequence& s : seqs) {
    s.query = q.view();
    s.kv.blocks = cache.pointers;
    s.kv.tokens = 20;
    s.output = out.mutable_view();
  }
  PagedAttentionInputs in;
  in.q_heads = 4;
  in.kv_heads = 2;
  in.head_dim = 8;
  in.value_dim = 8;
  in.block_tokens = 16;
  in.sequences = seqs;
  ASSERT_TRUE((*engine)->RunPaged(in).ok());

  const auto message = [&] {
    return std::string((*engine)->RunPaged(in).message());
  };
  seqs[1].kv.blocks = absl::MakeConstSpan(cache.pointers.data(), 1);
  EXPECT_THAT(message(), HasSubstr("sequences[1].kv.blocks: 1 blocks hold "
                                   "fewer than 20 tokens (2 blocks needed)"));
  seqs[1].kv.blocks = cache.pointers;
  TestTensor q16 = TestTensor::Random(DType::kFloat16, {1, 4, 8}, 2);
  seqs[1].query = q16.view();
  EXPECT_THAT(message(), HasSubstr("sequences[1].query: dtype f16 is not "
                                   "f32, which a cache of f32 takes"));
  in.kv_dtype = DType::kInt8;
  EXPECT_THAT(message(), HasSubstr("sequences[1].query: dtype f16 is not "
                                   "f32, which a cache of int8 takes"));
  in.kv_dtype = DType::kBool;
  EXPECT_THAT(message(), HasSubstr("kv_dtype: bool is not supported "
                                   "(expected f32, bf16, f16 or int8)"));
  in.kv_dtype = DType::kFloat32;
  TestTensor q3 = TestTensor::Random(DType::kFloat32, {1, 3, 8}, 2);
  seqs[1].query = q3.view();
  EXPECT_THAT(message(), HasSubstr("sequences[1].query: expected [Lnew >= 1, "
                                   "Hq = 4, D = 8], got [1, 3, 8]"));
  seqs[1].query = q.view();
  TestTensor w(DType::kFloat32, {4, 1, 19});
  seqs[0].weights = w.mutable_view();
  EXPECT_THAT(message(), HasSubstr("sequences[0].weights: expected dense f32 "
                                   "[4, 1, 20], got f32 [4, 1, 19]"));
  seqs[0].weights.reset();
  in.kv_heads = 3;
  EXPECT_THAT(message(),
              HasSubstr("q_heads: 4 is not a multiple of kv_heads 3"));
  in.kv_heads = 2;
  in.block_tokens = 0;
  EXPECT_THAT(message(), HasSubstr("block_tokens: 0 is outside [1, 65536]"));
  in.block_tokens = 16;
  in.scale = NAN;
  EXPECT_THAT(message(), HasSubstr("sequences[0]: "));
}

}  // namespace
}  // namespace attnserve
