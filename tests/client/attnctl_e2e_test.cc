// The real attnctl binary against a real attnserve process: every subcommand,
// the .npy path through the server, and the exit codes and messages of what
// goes wrong.
// One suite because its tests share one server fixture; each case is a few
// lines of command and expected output, read one after another.

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/request_builder.h"
#include "client/tensors/npy.h"
#include "core/attention.h"
#include "core/convert.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/attnctl_runner.h"
#include "tests/util/server_process.h"

#ifndef ATTNSERVE_VERSION
#error "ATTNSERVE_VERSION must be the project version"
#endif

namespace attnserve::client {
namespace {

using ::attnserve::testing::CommandResult;
using ::attnserve::testing::Describe;
using ::attnserve::testing::RunAttnctl;
using ::attnserve::testing::ServerProcess;
using ::attnserve::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

NpyArray RandomArray(NpyDType dtype, std::vector<int64_t> shape,
                     uint64_t stream) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.data =
      UniformBytes(dtype == NpyDType::kBFloat16 ? v1::BFLOAT16 : v1::FLOAT32,
                   array.num_elements(), 11, stream);
  return array;
}

class AttnctlTest : public ::testing::Test {
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

  // `attnctl args... --target=<the server>`.
  static CommandResult Run(std::vector<std::string> args) {
    args.push_back("--target=" + server_->target());
    return RunAttnctl(args);
  }

  static ServerProcess* server_;
  TempDir dir_;
};

ServerProcess* AttnctlTest::server_ = nullptr;

TEST_F(AttnctlTest, HealthPrintsServing) {
  const CommandResult r = Run({"health"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "SERVING\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(AttnctlTest, HealthAsksEveryTarget) {
  const std::string t = server_->target();
  const CommandResult r = RunAttnctl({"health", "--target=" + t + "," + t});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, absl::StrCat(t, ": SERVING\n", t, ": SERVING\n"));
}

TEST_F(AttnctlTest, HealthOfAnUnknownServiceExitsWith1) {
  const CommandResult r = Run({"health", "--service=no.such.Service"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: NOT_FOUND: "));
}

TEST_F(AttnctlTest, InfoPrintsTheVersionAndLimits) {
  const CommandResult r = Run({"info"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("version: " ATTNSERVE_VERSION "\n"));
  EXPECT_THAT(r.out, HasSubstr("\nisa: "));
  EXPECT_THAT(r.out, HasSubstr("\nworkers: 1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nthreads_per_worker: 1\n"));
  EXPECT_THAT(r.out, HasSubstr("\nmax_request_bytes: "));
}

struct CheckCase {
  const char* name;
  std::vector<std::string> args;
  bool weights;
};

class AttnctlCheckTest : public AttnctlTest,
                         public ::testing::WithParamInterface<CheckCase> {};

TEST_P(AttnctlCheckTest, InferCheckPasses) {
  std::vector<std::string> args = {"infer", "--check", "--heads=2", "--dim=16"};
  args.insert(args.end(), GetParam().args.begin(), GetParam().args.end());
  const CommandResult r = Run(args);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("\ncheck    output: max abs error "));
  EXPECT_THAT(r.out, HasSubstr("\ntiming   server queue "));
  EXPECT_THAT(r.out, HasSubstr("; client round trip "));
  EXPECT_THAT(r.out, Not(HasSubstr("FAILED")));
  if (GetParam().weights) {
    EXPECT_THAT(r.out, HasSubstr("\ncheck    weights: max abs error "));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttnctlCheckTest,
    ::testing::Values(
        CheckCase{"F32CausalBottomRight",
                  {"--lq=5", "--lk=9", "--causal", "--alignment=bottom_right"},
                  false},
        CheckCase{"Bf16KeyLengths",
                  {"--dtype=bf16", "--batch=2", "--key_lengths=3,7", "--lq=4",
                   "--lk=8"},
                  false},
        CheckCase{
            "F16Window",
            {"--dtype=f16", "--window_left=2", "--window_right=1", "--lq=7"},
            false},
        CheckCase{"BlhdWeights",
                  {"--layout=blhd", "--return_weights", "--heads=4",
                   "--kv_heads=2", "--lq=6", "--lk=10", "--dv=8"},
                  true},
        CheckCase{"F32ToBf16Output",
                  {"--output_dtype=bf16", "--lq=3", "--scale=0.3"},
                  false}),
    [](const auto& info) { return std::string(info.param.name); });

// The reference for f32 BHLD inputs with an optional bool mask.
std::vector<float> Reference(const NpyArray& q, const NpyArray& k,
                             const NpyArray& v, const NpyArray* mask,
                             std::vector<float>* weights) {
  AttentionInputs in;
  in.query = MakeTensorView(q.data.data(), DType::kFloat32, q.shape);
  in.key = MakeTensorView(k.data.data(), DType::kFloat32, k.shape);
  in.value = MakeTensorView(v.data.data(), DType::kFloat32, v.shape);
  if (mask != nullptr) {
    in.mask.explicit_mask =
        MakeTensorView(mask->data.data(), DType::kBool, mask->shape);
  }
  const std::vector<int64_t> out_shape = {q.shape[0], q.shape[1], q.shape[2],
                                          v.shape[3]};
  const std::vector<int64_t> w_shape = {q.shape[0], q.shape[1], q.shape[2],
                                        k.shape[2]};
  std::vector<float> out(out_shape[0] * out_shape[1] * out_shape[2] *
                         out_shape[3]);
  weights->assign(w_shape[0] * w_shape[1] * w_shape[2] * w_shape[3], 0);
  AttentionOutputs outputs{
      MakeMutableTensorView(out.data(), DType::kFloat32, out_shape),
      MakeMutableTensorView(weights->data(), DType::kFloat32, w_shape)};
  EXPECT_TRUE(ReferenceAttention(in, outputs).ok());
  return out;
}

void ExpectNear(const NpyArray& got, const std::vector<float>& expected) {
  ASSERT_EQ(got.dtype, NpyDType::kFloat32);
  ASSERT_EQ(got.data.size(), expected.size() * 4);
  for (size_t i = 0; i < expected.size(); ++i) {
    const float g = LoadAsFloat(got.data.data(), DType::kFloat32, i);
    ASSERT_NEAR(g, expected[i], 1e-5 * (1 + std::fabs(expected[i])))
        << "element " << i;
  }
}

TEST_F(AttnctlTest, NpyFilesRoundTripThroughTheServer) {
  const NpyArray q = RandomArray(NpyDType::kFloat32, {1, 2, 5, 8}, 0);
  const NpyArray k = RandomArray(NpyDType::kFloat32, {1, 1, 6, 8}, 1);
  const NpyArray v = RandomArray(NpyDType::kFloat32, {1, 1, 6, 4}, 2);
  NpyArray mask{NpyDType::kBool, {5, 6}, std::string(30, '\1')};
  mask.data[3] = mask.data[17] = mask.data[29] = '\0';
  const std::vector<std::pair<const char*, const NpyArray*>> files = {
      {"q.npy", &q}, {"k.npy", &k}, {"v.npy", &v}, {"mask.npy", &mask}};
  for (const auto& [name, array] : files) {
    ASSERT_TRUE(WriteNpyFile(dir_.Path(name), *array).ok());
  }
  const CommandResult r =
      Run({"infer", "--q=" + dir_.Path("q.npy"), "--k=" + dir_.Path("k.npy"),
           "--v", dir_.Path("v.npy"), "--mask=" + dir_.Path("mask.npy"),
           "--out=" + dir_.Path("out.npy"),
           "--weights_out=" + dir_.Path("w.npy"), "--check"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("query    f32 [1, 2, 5, 8]\n"));
  EXPECT_THAT(r.out, HasSubstr("mask     explicit bool [5, 6]\n"));
  EXPECT_THAT(r.out, HasSubstr("output   f32 [1, 2, 5, 4]  mean "));
  EXPECT_THAT(r.out, HasSubstr("wrote    " + dir_.Path("out.npy")));

  std::vector<float> expected_weights;
  const std::vector<float> expected =
      Reference(q, k, v, &mask, &expected_weights);
  absl::StatusOr<NpyArray> out = ReadNpyFile(dir_.Path("out.npy"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, (std::vector<int64_t>{1, 2, 5, 4}));
  ExpectNear(*out, expected);
  absl::StatusOr<NpyArray> weights = ReadNpyFile(dir_.Path("w.npy"));
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ(weights->shape, (std::vector<int64_t>{1, 2, 5, 6}));
  ExpectNear(*weights, expected_weights);
}

TEST_F(AttnctlTest, Bf16FilesAreU2AndNeedTheDTypeFlag) {
  const std::vector<std::tuple<const char*, std::vector<int64_t>, int>> inputs =
      {{"q.npy", {1, 2, 3, 8}, 0},
       {"k.npy", {1, 2, 4, 8}, 1},
       {"v.npy", {1, 2, 4, 8}, 2}};
  for (const auto& [name, shape, stream] : inputs) {
    ASSERT_TRUE(WriteNpyFile(dir_.Path(name),
                             RandomArray(NpyDType::kBFloat16, shape, stream))
                    .ok());
  }
  const std::vector<std::string> files = {"--q=" + dir_.Path("q.npy"),
                                          "--k=" + dir_.Path("k.npy"),
                                          "--v=" + dir_.Path("v.npy")};
  std::vector<std::string> args = {"infer"};
  args.insert(args.end(), files.begin(), files.end());
  CommandResult r = Run(args);
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("q.npy: dtype '<u2' (uint16) is read as "
                               "bfloat16 bits only with --dtype=bf16"));

  args.push_back("--dtype=bf16");
  args.push_back("--check");
  args.push_back("--out=" + dir_.Path("out.npy"));
  r = Run(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(ReadNpyFile(dir_.Path("out.npy")).ok());
  NpyReadOptions options;
  options.u2_as_bfloat16 = true;
  absl::StatusOr<NpyArray> out = ReadNpyFile(dir_.Path("out.npy"), options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype, NpyDType::kBFloat16);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{1, 2, 3, 8}));

  // --dtype must match the files.
  args = {"infer", files[0], files[1], files[2], "--dtype=f16"};
  r = Run(args);
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("q.npy: dtype '<u2' (uint16) is read as "
                               "bfloat16 bits only with --dtype=bf16"));
}

struct ErrorCase {
  const char* name;
  std::vector<std::string> args;
  int exit_code;
  const char* message;
};

class AttnctlErrorTest : public AttnctlTest,
                         public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(AttnctlErrorTest, ExitsWithTheDocumentedCodeAndAClearMessage) {
  std::vector<std::string> args;
  for (const std::string& a : GetParam().args) {
    // "@name" is a file in the test's directory.
    args.push_back(a.find('@') == std::string::npos
                       ? a
                       : a.substr(0, a.find('@')) +
                             dir_.Path(a.substr(a.find('@') + 1)));
  }
  std::FILE* garbage = std::fopen(dir_.Path("garbage.npy").c_str(), "w");
  ASSERT_NE(garbage, nullptr);
  std::fputs("PK\x03\x04 not numpy", garbage);
  std::fclose(garbage);

  const CommandResult r = Run(args);
  EXPECT_EQ(r.exit_code, GetParam().exit_code) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr(GetParam().message)) << Describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttnctlErrorTest,
    ::testing::Values(
        ErrorCase{"UnknownFlag",
                  {"infer", "--nope"},
                  2,
                  "error: unknown flag \"--nope\"\n(attnctl infer --help "
                  "lists its flags)"},
        ErrorCase{"FlagOfAnotherSubcommand",
                  {"health", "--batch=2"},
                  2,
                  "unknown flag \"--batch=2\""},
        ErrorCase{"BadDType",
                  {"infer", "--dtype=f64"},
                  2,
                  "error: --dtype: unknown value \"f64\" (expected f32, bf16 "
                  "or f16)"},
        ErrorCase{"NotANumber",
                  {"infer", "--lq=abc"},
                  2,
                  "error: bad value \"abc\" for --lq"},
        ErrorCase{"ZeroTimeout",
                  {"info", "--timeout=0s"},
                  2,
                  "--timeout must be positive"},
        ErrorCase{"NegativeWindow",
                  {"infer", "--window_left=-2"},
                  2,
                  "--window_left must be >= 0, or -1 for unbounded; got -2"},
        ErrorCase{"BadKeyLengths",
                  {"infer", "--key_lengths=3,x"},
                  2,
                  "--key_lengths: \"x\" is not a non-negative integer"},
        ErrorCase{"OnlyAQueryFile",
                  {"infer", "--q=@q.npy"},
                  2,
                  "--q, --k and --v go together"},
        ErrorCase{"ShapeFlagWithFiles",
                  {"infer", "--q=@q.npy", "--k=@k.npy", "--v=@v.npy", "--lq=3"},
                  2,
                  "--lq applies to random inputs"},
        ErrorCase{"MissingNpyFile",
                  {"infer", "--q=@missing.npy", "--k=@missing.npy",
                   "--v=@missing.npy"},
                  4,
                  "missing.npy: cannot open: No such file or directory"},
        ErrorCase{"MalformedNpyFile",
                  {"infer", "--q=@garbage.npy", "--k=@garbage.npy",
                   "--v=@garbage.npy"},
                  4,
                  "garbage.npy: not a .npy file"},
        ErrorCase{"MissingMaskFile",
                  {"infer", "--lq=4", "--heads=1", "--mask=@missing.npy"},
                  4,
                  "missing.npy: cannot open"},
        ErrorCase{
            "UnwritableOutput",
            {"infer", "--lq=4", "--heads=1", "--out=/nonexistent-dir/out.npy"},
            4,
            "/nonexistent-dir/out.npy: cannot open for writing"},
        ErrorCase{"ServerRejects",
                  {"infer", "--heads=3", "--kv_heads=2", "--lq=4"},
                  1,
                  "error: INVALID_ARGUMENT: query heads Hq = 3 is not a "
                  "multiple of key/value heads Hkv = 2"},
        ErrorCase{"MissingCaFile",
                  {"info", "--tls", "--ca=@missing.pem"},
                  4,
                  "missing.pem: cannot open"},
        ErrorCase{"CaWithoutTls",
                  {"info", "--ca=@missing.pem"},
                  2,
                  "--ca needs --tls"},
        ErrorCase{"PositionalArgument",
                  {"info", "extra"},
                  2,
                  "unexpected argument \"extra\""},
        ErrorCase{"UnknownSubcommand",
                  {"bogus"},
                  2,
                  "error: unknown subcommand \"bogus\""}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AttnctlStandaloneTest, UnreachableTargetIsUnavailable) {
  // Port 1 is privileged and unused: the connection is refused.
  const CommandResult r = RunAttnctl({"infer", "--target=127.0.0.1:1",
                                      "--timeout=10s", "--heads=1", "--lq=4"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: UNAVAILABLE: "));
  const CommandResult health =
      RunAttnctl({"health", "--target=127.0.0.1:1", "--timeout=10s"});
  EXPECT_EQ(health.exit_code, 1) << Describe(health);
  EXPECT_THAT(health.err, StartsWith("error: UNAVAILABLE: "));
}

TEST(AttnctlStandaloneTest, HelpListsFlagsAndExitCodes) {
  CommandResult r = RunAttnctl({"--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("  infer    "));
  EXPECT_THAT(r.out, HasSubstr("  --target=\"localhost:50051\"\n"));
  EXPECT_THAT(r.out, HasSubstr("exit codes:\n  0  ok\n  1  an RPC failed"));
  EXPECT_THAT(r.out, HasSubstr("\n  4  file error"));

  r = RunAttnctl({"infer", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("usage: attnctl infer [flags]\n"));
  for (const char* flag : {"--batch=1\n",
                           "--heads=8\n",
                           "--kv_heads=0\n",
                           "--lq=128\n",
                           "--lk=0\n",
                           "--dim=64\n",
                           "--dv=0\n",
                           "--dtype=\"\"\n",
                           "--layout=\"bhld\"\n",
                           "--causal=false\n",
                           "--alignment=\"top_left\"\n",
                           "--window_left=-1\n",
                           "--window_right=-1\n",
                           "--key_lengths=\"\"\n",
                           "--scale=\"\"\n",
                           "--return_weights=false\n",
                           "--output_dtype=\"\"\n",
                           "--seed=0\n",
                           "--q=\"\"\n",
                           "--mask=\"\"\n",
                           "--out=\"\"\n",
                           "--weights_out=\"\"\n",
                           "--check=false\n",
                           "--timeout=30s\n",
                           "--tls=false\n",
                           "--token=\"\"\n",
                           "--max_message_bytes=536870912\n"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(r.out, HasSubstr("exit codes:\n"));
  EXPECT_EQ(RunAttnctl({"help", "infer"}).out, r.out);

  r = RunAttnctl({"health", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("--service=\"\"\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("--batch")));

  r = RunAttnctl({"info", "-h"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("usage: attnctl info [flags]\n"));

  r = RunAttnctl({});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("usage: attnctl <subcommand> [flags]"));
}

// A self-signed certificate for 127.0.0.1, made with the openssl CLI.
TEST(AttnctlTlsTest, TlsCaAndBearerToken) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  if (std::system("openssl version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl command-line tool is missing; "
                    "scripts/install-deps.sh installs it";
  }
  const std::string command = absl::StrCat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -days 2 -subj /CN=localhost -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout ",
      dir.Path("key.pem"), " -out ", dir.Path("cert.pem"), " >",
      dir.Path("openssl.log"), " 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::FILE* token = std::fopen(dir.Path("token").c_str(), "w");
  ASSERT_NE(token, nullptr);
  std::fputs("s3cret\n", token);
  std::fclose(token);

  auto server = ServerProcess::Start(
      {"--workers=1", "--threads_per_worker=1",
       "--tls_cert=" + dir.Path("cert.pem"), "--tls_key=" + dir.Path("key.pem"),
       "--auth_token_file=" + dir.Path("token")});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = "--target=" + (*server)->target();
  const std::string ca = "--ca=" + dir.Path("cert.pem");

  CommandResult r = RunAttnctl({"info", target, "--tls", ca, "--token=s3cret"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, StartsWith("version: "));

  r = RunAttnctl({"infer", target, "--tls", ca, "--token", "s3cret",
                  "--heads=1", "--lq=4", "--check"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);

  r = RunAttnctl({"info", target, "--tls", ca});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, StartsWith("error: UNAUTHENTICATED: "));

  r = RunAttnctl({"info", target, "--tls", ca, "--token=wrong"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: UNAUTHENTICATED: "));

  // Health needs no token.
  r = RunAttnctl({"health", target, "--tls", ca});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "SERVING\n");

  // Plaintext against a TLS server.
  r = RunAttnctl({"health", target, "--timeout=10s"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error: UNAVAILABLE: "));
}

}  // namespace
}  // namespace attnserve::client
