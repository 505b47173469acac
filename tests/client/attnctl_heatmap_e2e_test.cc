// attnctl heatmap, the real binary against a real attnserve process: the PNG
// it writes decodes with libpng to the size the layout gives and its cells
// carry the reference weights' colours; --ascii prints the tokens and one
// block per head; wrong inputs give the documented exit codes and messages.

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/heatmap/colormap.h"
#include "client/heatmap/heatmap.h"
#include "client/heatmap/heatmap_render.h"
#include "client/request_builder.h"
#include "client/tensors/npy.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/attnctl_runner.h"
#include "tests/util/png_reader.h"
#include "tests/util/server_process.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::CommandResult;
using ::attnserve::testing::DecodedPng;
using ::attnserve::testing::Describe;
using ::attnserve::testing::ReadPng;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kSentence[] = "Life is short, eat dessert first";

// The heatmap attnctl draws for these sizes and labels: the layout depends
// on nothing else (with a fixed --vmax).
Heatmap Expected(int heads, int q, int k, std::vector<std::string> query_labels,
                 std::vector<std::string> key_labels, float vmax) {
  Heatmap heatmap;
  heatmap.q_len = q;
  heatmap.k_len = k;
  for (int h = 0; h < heads; ++h) {
    // Titled as attnctl titles them: "head h, entropy d.dd" (its font is
    // fixed-width, so any entropy under 10 lays out the same).
    heatmap.panels.push_back({absl::StrCat("head ", h, ", entropy 0.00"), {}});
  }
  heatmap.query_labels = std::move(query_labels);
  heatmap.key_labels = std::move(key_labels);
  heatmap.vmax = vmax;
  heatmap.caption =
      absl::StrCat("attention weights, batch 0: Lq ", q, " x Lk ", k);
  return heatmap;
}

class AttnctlHeatmapTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server =
        ServerProcess::Start({"--workers=1", "--threads_per_worker=1"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(dir_.ok());
  }

  static CommandResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), "heatmap");
    args.push_back("--target=" + server_->target());
    return RunAttnctl(args);
  }

  static ServerProcess* server_;
  TempDir dir_;
};

ServerProcess* AttnctlHeatmapTest::server_ = nullptr;

TEST_F(AttnctlHeatmapTest, PngWithTokensDecodesWithTheExpectedSize) {
  const std::string path = dir_.Path("heads.png");
  const CommandResult r = Run({"--heads=2", "--causal", "--tokens", kSentence,
                               "--vmax=1", "--png=" + path});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  absl::StatusOr<DecodedPng> png = ReadPng(path);
  ASSERT_TRUE(png.ok()) << png.status();

  const std::vector<std::string> tokens = SplitTokens(kSentence);
  const HeatmapLayout layout =
      ComputeHeatmapLayout(Expected(2, 6, 6, tokens, tokens, 1));
  EXPECT_EQ(png->width, static_cast<uint32_t>(layout.width));
  EXPECT_EQ(png->height, static_cast<uint32_t>(layout.height));
  EXPECT_EQ(png->bit_depth, 8);
  EXPECT_EQ(png->color_type, PNG_COLOR_TYPE_RGB);
  EXPECT_EQ(r.out, absl::StrCat("wrote ", path, " (", layout.width, "x",
                                layout.height, ", 2 panels)\n"));
  // Two 6x6 panels of 32-pixel cells side by side, labels around them.
  EXPECT_EQ(layout.cell, 32);
  EXPECT_EQ(layout.columns, 2);
  EXPECT_GT(png->width, 2u * 6 * 32 + 2 * 100);
  EXPECT_GT(png->height, 6u * 32 + 100);
  // Causal: row 0 attends key 0 only, with weight 1 (the top of the scale);
  // the keys after it are masked.
  for (int h = 0; h < 2; ++h) {
    const int x = layout.panels[h].x;
    const int y = layout.panels[h].y;
    const Rgb top = ColormapColor(1);
    EXPECT_EQ(png->At(x + 16, y + 16).r, top.r) << "head " << h;
    EXPECT_EQ(png->At(x + 16, y + 16).g, top.g) << "head " << h;
    EXPECT_EQ(png->At(x + 32 + 16, y + 16).r, kMaskedColor.r) << "head " << h;
    EXPECT_EQ(png->At(x + 5 * 32 + 16, y + 4 * 32 + 16).g, kMaskedColor.g);
    EXPECT_NE(png->At(x + 16, y + 5 * 32 + 16).g, kMaskedColor.g);
  }
}

// A block-sparse layout is drawn as a first panel: the pairs it allows in the
// top colour, the others masked, and the weights are masked where it is.
TEST_F(AttnctlHeatmapTest, BlockSparseLayoutIsTheFirstPanel) {
  const std::string path = dir_.Path("layout.png");
  const CommandResult r =
      Run({"--heads=1", "--lq=8", "--block_size=2", "--stride=3",
           "--global_tokens=5", "--vmax=1", "--png=" + path});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("2 panels"));
  absl::StatusOr<DecodedPng> png = ReadPng(path);
  ASSERT_TRUE(png.ok()) << png.status();
  Heatmap expected = Expected(2, 8, 8, {}, {}, 1);
  expected.panels[0].title = "block layout (6 of 16 blocks)";
  const HeatmapLayout layout = ComputeHeatmapLayout(expected);
  ASSERT_EQ(png->width, static_cast<uint32_t>(layout.width));
  const int cell = layout.cell;
  const Rgb top = ColormapColor(1);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      // Kept blocks: (qb - kb) % 3 == 0; token 5 is global.
      const bool allowed = (i / 2 - j / 2) % 3 == 0 || i == 5 || j == 5;
      const auto got = png->At(layout.panels[0].x + j * cell + cell / 2,
                               layout.panels[0].y + i * cell + cell / 2);
      const Rgb want = allowed ? top : kMaskedColor;
      EXPECT_EQ(got.r, want.r) << i << "," << j;
      EXPECT_EQ(got.g, want.g) << i << "," << j;
      const auto weight = png->At(layout.panels[1].x + j * cell + cell / 2,
                                  layout.panels[1].y + i * cell + cell / 2);
      EXPECT_EQ(weight.g == kMaskedColor.g && weight.r == kMaskedColor.r,
                !allowed)
          << "weights " << i << "," << j;
    }
  }
}

TEST_F(AttnctlHeatmapTest, NpyQueryAndKeyGiveTheReferenceColours) {
  // GQA: 2 query heads over 1 key head; 5 queries, 7 keys; no --v.
  NpyArray q{NpyDType::kFloat32, {1, 2, 5, 8}, ""};
  q.data = UniformBytes(v1::FLOAT32, q.num_elements(), 5, 0);
  NpyArray k{NpyDType::kFloat32, {1, 1, 7, 8}, ""};
  k.data = UniformBytes(v1::FLOAT32, k.num_elements(), 5, 1);
  // Scale the keys up so that the weights spread over the scale.
  for (int64_t i = 0; i < k.num_elements(); ++i) {
    float v = LoadAsFloat(k.data.data(), DType::kFloat32, i) * 4;
    std::memcpy(&k.data[i * 4], &v, 4);
  }
  ASSERT_TRUE(WriteNpyFile(dir_.Path("q.npy"), q).ok());
  ASSERT_TRUE(WriteNpyFile(dir_.Path("k.npy"), k).ok());
  const std::string path = dir_.Path("files.png");
  const CommandResult r =
      Run({"--q=" + dir_.Path("q.npy"), "--k=" + dir_.Path("k.npy"),
           "--tokens=a b c d e f g", "--query_tokens=v w x y z",
           "--window_left=3", "--vmax=1", "--png=" + path, "--ascii"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nhead 0, entropy "));
  EXPECT_THAT(r.out, HasSubstr("\nhead 1, entropy "));
  EXPECT_THAT(r.out, HasSubstr("\nz |"));

  // The reference weights, with a value of the same shape attnctl makes up.
  std::vector<float> value(7, 0.0f);
  std::vector<float> output(2 * 5);
  std::vector<float> weights(2 * 5 * 7);
  AttentionInputs in;
  in.query = MakeTensorView(q.data.data(), DType::kFloat32, q.shape);
  in.key = MakeTensorView(k.data.data(), DType::kFloat32, k.shape);
  in.value = MakeTensorView(value.data(), DType::kFloat32, {1, 1, 7, 1});
  in.mask.window_left = 3;
  AttentionOutputs out{
      MakeMutableTensorView(output.data(), DType::kFloat32, {1, 2, 5, 1}),
      MakeMutableTensorView(weights.data(), DType::kFloat32, {1, 2, 5, 7})};
  ASSERT_TRUE(ReferenceAttention(in, out).ok());

  absl::StatusOr<DecodedPng> png = ReadPng(path);
  ASSERT_TRUE(png.ok()) << png.status();
  const HeatmapLayout layout = ComputeHeatmapLayout(Expected(
      2, 5, 7, SplitTokens("v w x y z"), SplitTokens("a b c d e f g"), 1));
  ASSERT_EQ(png->width, static_cast<uint32_t>(layout.width));
  ASSERT_EQ(png->height, static_cast<uint32_t>(layout.height));
  int masked = 0;
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 7; ++j) {
        const float w = weights[(h * 5 + i) * 7 + j];
        const Rgb want = w == 0 ? kMaskedColor : ColormapColor(w);
        masked += w == 0;
        const auto got =
            png->At(layout.panels[h].x + j * layout.cell + layout.cell / 2,
                    layout.panels[h].y + i * layout.cell + layout.cell / 2);
        // The server's weights differ from the reference's in the last bits:
        // at most one step of a channel.
        EXPECT_LE(std::abs(got.r - want.r), 1) << h << " " << i << " " << j;
        EXPECT_LE(std::abs(got.g - want.g), 1) << h << " " << i << " " << j;
        EXPECT_LE(std::abs(got.b - want.b), 1) << h << " " << i << " " << j;
      }
    }
  }
  EXPECT_GT(masked, 0);  // the window masks keys: the test sees both kinds
  EXPECT_LT(masked, 2 * 5 * 7);
}

TEST_F(AttnctlHeatmapTest, AsciiHasTheTokensAndOneBlockPerHead) {
  const CommandResult r =
      Run({"--heads=3", "--kv_heads=1", "--tokens", kSentence, "--ascii"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, StartsWith("attention weights, batch 0: Lq 6 x Lk 6\n"));
  std::vector<std::string> titles;
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(line, "head ")) {
      titles.emplace_back(line.substr(0, line.find(',')));
      // The rows' mean entropy: between 0 (one key) and ln 6 (all six).
      float mean = -1;
      ASSERT_TRUE(absl::SimpleAtof(line.substr(line.rfind(' ') + 1), &mean))
          << line;
      EXPECT_GT(mean, 0.0f);
      EXPECT_LE(mean, std::log(6.0f) + 1e-3f);
    }
    if (absl::StrContains(line, " |")) {
      ++rows;
      // Each row ends with its entropy, as the server computed it.
      float entropy = -1;
      ASSERT_TRUE(absl::SimpleAtof(line.substr(line.rfind('|') + 1), &entropy))
          << line;
      EXPECT_GE(entropy, 0.0f);
      EXPECT_LE(entropy, std::log(6.0f) + 1e-3f);
    }
  }
  EXPECT_EQ(titles, (std::vector<std::string>{"head 0", "head 1", "head 2"}));
  EXPECT_EQ(rows, 3 * 6);
  EXPECT_THAT(r.out, HasSubstr("\nright of each row: the entropy of its "
                               "weights in nats (0 = one key takes all; "
                               "ln(6) = 1.79 = spread evenly"));
  for (const std::string& token : SplitTokens(kSentence)) {
    // Right-aligned row labels ("dessert" is the longest), 6 cells of 2.
    EXPECT_THAT(r.out,
                HasSubstr(absl::StrCat("\n", std::string(7 - token.size(), ' '),
                                       token, " |")));
  }
  // The keys' labels written downwards: "dessert"'s last letter is on the
  // line above the frame, below the fifth column.
  EXPECT_THAT(r.out,
              HasSubstr("\n         e s , t t t\n        +------------+\n"));
  EXPECT_THAT(r.out, HasSubstr("\nlegend: . : - = + * # % @ = weights 0 to "));
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b[")));  // stdout is not a terminal
  EXPECT_THAT(r.out, Not(HasSubstr("wrote")));

  const CommandResult colour =
      Run({"--heads=1", "--lq=3", "--ascii", "--color=always", "--head=0"});
  ASSERT_EQ(colour.exit_code, 0) << Describe(colour);
  EXPECT_THAT(colour.out, HasSubstr("\x1b[48;5;"));
  EXPECT_THAT(colour.out, HasSubstr("\x1b[0m| "));
}

TEST_F(AttnctlHeatmapTest, HeadAndBatchIndexSelectThePanel) {
  const std::string path = dir_.Path("one.png");
  const CommandResult r =
      Run({"--batch=2", "--heads=4", "--head=3", "--batch_index=1", "--lq=5",
           "--vmax=0.5", "--png", path, "--ascii"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\nhead 3, entropy "));
  EXPECT_THAT(r.out, Not(HasSubstr("head 0")));
  EXPECT_THAT(r.out, StartsWith("attention weights, batch 1: Lq 5 x Lk 5\n"));
  EXPECT_THAT(r.out, HasSubstr("weights 0 to 0.5 in 9"));
  EXPECT_THAT(r.out, HasSubstr(", 1 panel)\n"));
  absl::StatusOr<DecodedPng> png = ReadPng(path);
  ASSERT_TRUE(png.ok()) << png.status();
  Heatmap expected = Expected(1, 5, 5, {}, {}, 0.5);
  expected.panels[0].title = "head 3, entropy 0.00";
  expected.caption = "attention weights, batch 1: Lq 5 x Lk 5";
  const HeatmapLayout layout = ComputeHeatmapLayout(expected);
  EXPECT_EQ(png->width, static_cast<uint32_t>(layout.width));
  EXPECT_EQ(png->height, static_cast<uint32_t>(layout.height));
}

TEST_F(AttnctlHeatmapTest, RandomLengthsDefaultToTheTokens) {
  // --lq=1 keeps one query (decoding); Lk still comes from the tokens.
  const CommandResult r =
      Run({"--heads=1", "--lq=1", "--tokens", kSentence, "--ascii"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("attention weights, batch 0: Lq 1 x Lk 6\n"));
  EXPECT_THAT(r.out, HasSubstr("\n0 |"));  // Lq != Lk: queries by index

  // No tokens and no --lq: 16 queries.
  const CommandResult plain = Run({"--heads=1", "--ascii"});
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  EXPECT_THAT(plain.out,
              StartsWith("attention weights, batch 0: Lq 16 x Lk 16\n"));
}

struct ErrorCase {
  const char* name;
  std::vector<std::string> args;
  int exit_code;
  const char* message;
};

class AttnctlHeatmapErrorTest
    : public AttnctlHeatmapTest,
      public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(AttnctlHeatmapErrorTest, ExitsWithTheDocumentedCodeAndAClearMessage) {
  NpyArray q{NpyDType::kFloat32, {1, 1, 3, 4}, std::string(48, '\0')};
  ASSERT_TRUE(WriteNpyFile(dir_.Path("q.npy"), q).ok());
  NpyArray flat{NpyDType::kFloat32, {3, 4}, std::string(48, '\0')};
  ASSERT_TRUE(WriteNpyFile(dir_.Path("flat.npy"), flat).ok());
  std::vector<std::string> args;
  for (const std::string& a : GetParam().args) {
    // "@name" is a file in the test's directory.
    const size_t at = a.find('@');
    args.push_back(at == std::string::npos
                       ? a
                       : a.substr(0, at) + dir_.Path(a.substr(at + 1)));
  }
  const CommandResult r = Run(args);
  EXPECT_EQ(r.exit_code, GetParam().exit_code) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr(GetParam().message)) << Describe(r);
  EXPECT_EQ(r.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttnctlHeatmapErrorTest,
    ::testing::Values(
        ErrorCase{"TokenCountMismatch",
                  {"--tokens=a b c", "--lk=5", "--ascii"},
                  2,
                  "error: --tokens has 3 tokens but there are Lk = 5 keys: "
                  "give one token per key\n(attnctl heatmap --help"},
        ErrorCase{"QueryTokenCountMismatch",
                  {"--query_tokens=a b", "--lq=3", "--ascii"},
                  2,
                  "--query_tokens has 2 tokens but there are Lq = 3 queries"},
        ErrorCase{"TokensAgainstAFile",
                  {"--q=@q.npy", "--k=@q.npy", "--tokens=x y", "--ascii"},
                  2,
                  "--tokens has 2 tokens but there are Lk = 3 keys"},
        ErrorCase{"EmptyTokens",
                  {"--tokens= ", "--ascii"},
                  2,
                  "--tokens has no tokens"},
        ErrorCase{"NothingToDraw",
                  {"--lq=4"},
                  2,
                  "nothing to draw: give --png=FILE, --ascii, or both"},
        ErrorCase{"UnwritablePng",
                  {"--lq=4", "--heads=1", "--png=/nonexistent-dir/h.png"},
                  4,
                  "error: /nonexistent-dir/h.png: cannot open for writing: "
                  "No such file or directory"},
        ErrorCase{"TooManyQueries",
                  {"--lq=600", "--lk=8", "--png=@x.png"},
                  2,
                  "Lq = 600 queries is too many for a heatmap (at most 512)"},
        ErrorCase{"TooManyPanels",
                  {"--heads=72", "--lq=4", "--png=@x.png"},
                  2,
                  "Hq = 72 heads make more panels than a heatmap shows (at "
                  "most 64): pick one with --head=N"},
        ErrorCase{"TooWideForText",
                  {"--lq=80", "--ascii"},
                  2,
                  "--ascii draws at most 64 keys across a terminal; Lk = 80"},
        ErrorCase{"HeadOutOfRange",
                  {"--heads=2", "--head=2", "--ascii"},
                  2,
                  "--head=2 but there are Hq = 2 query heads (0 to 1)"},
        ErrorCase{"BatchIndexOutOfRange",
                  {"--batch_index=1", "--ascii"},
                  2,
                  "--batch_index=1 but the batch has B = 1 element (index 0)"},
        ErrorCase{"BadColor",
                  {"--ascii", "--color=sometimes"},
                  2,
                  "--color: unknown value \"sometimes\""},
        ErrorCase{"NoReturnWeightsFlag",
                  {"--ascii", "--return_weights"},
                  2,
                  "unknown flag \"--return_weights\""},
        ErrorCase{"KeyWithoutQuery",
                  {"--k=@q.npy", "--ascii"},
                  2,
                  "--q and --k go together (--v is optional)"},
        ErrorCase{"ShapeFlagWithFiles",
                  {"--q=@q.npy", "--k=@q.npy", "--heads=2", "--ascii"},
                  2,
                  "--heads applies to random inputs"},
        ErrorCase{"MissingFile",
                  {"--q=@missing.npy", "--k=@q.npy", "--ascii"},
                  4,
                  "missing.npy: cannot open: No such file or directory"},
        ErrorCase{"NotFourDimensional",
                  {"--q=@flat.npy", "--k=@q.npy", "--ascii"},
                  4,
                  "flat.npy: the query must be 4-D ([B, H, L, D] in layout "
                  "bhld); it is [3, 4]"},
        ErrorCase{"UnknownMethod",
                  {"--method=dense", "--ascii"},
                  2,
                  "--method: unknown value \"dense\" (expected softmax, "
                  "linear or lsh)"},
        ErrorCase{"LshWithItsOwnKeys",
                  {"--method=lsh", "--lk=5", "--ascii"},
                  2,
                  "--method=lsh takes its keys from the queries"},
        ErrorCase{"BadGlobalTokens",
                  {"--block_size=2", "--global_tokens=1,x", "--ascii"},
                  2,
                  "--global_tokens: \"x\" is not a non-negative integer"},
        ErrorCase{"EmptyLayout",
                  {"--block_size=2", "--lq=4", "--ascii"},
                  1,
                  "error: INVALID_ARGUMENT: mask.block_sparse: the layout has "
                  "no component"},
        ErrorCase{"ServerRejects",
                  {"--heads=3", "--kv_heads=2", "--lq=4", "--ascii"},
                  1,
                  "error: INVALID_ARGUMENT: query heads Hq = 3 is not a "
                  "multiple of key/value heads Hkv = 2"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AttnctlHeatmapStandaloneTest, ServerDownIsUnavailable) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  // Port 1 is privileged and unused: the connection is refused.
  const CommandResult r =
      RunAttnctl({"heatmap", "--target=127.0.0.1:1", "--timeout=10s", "--lq=4",
                  "--png=" + dir.Path("h.png")});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: UNAVAILABLE: "));
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(ReadPng(dir.Path("h.png")).ok());  // nothing written
}

TEST(AttnctlHeatmapStandaloneTest, HelpListsItsFlagsAndLimits) {
  const CommandResult r = RunAttnctl({"heatmap", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out,
              StartsWith("usage: attnctl heatmap (--png=FILE | --ascii)"));
  for (const char* flag :
       {"--png=\"\"\n", "--ascii=false\n", "--color=\"auto\"\n",
        "--tokens=\"\"\n", "--query_tokens=\"\"\n", "--batch_index=0\n",
        "--head=-1\n", "--vmax=0\n", "--q=\"\"\n", "--k=\"\"\n", "--v=\"\"\n",
        "--mask=\"\"\n", "--heads=8\n", "--causal=false\n",
        "--target=\"localhost:50051\"\n"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(r.out, Not(HasSubstr("--return_weights")));
  EXPECT_THAT(r.out, HasSubstr("Limits: Lq, Lk <= 512; <= 64 panels"));
  EXPECT_THAT(r.out, HasSubstr("exit codes:\n"));
  EXPECT_EQ(RunAttnctl({"help", "heatmap"}).out, r.out);
  EXPECT_THAT(RunAttnctl({"--help"}).out,
              HasSubstr("\n  heatmap  the weights"));
}

}  // namespace
}  // namespace attnserve::client
