// Attention through the wire against the core reference, over a real attnserve
// process: unary and streaming, shapes, dtypes, layouts and masks, and the
// validation errors a caller sees.

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "core/attention.h"
#include "core/reference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/e2e/server_fixture.h"
#include "tests/util/test_util.h"
#include "tests/util/wire_tensor.h"
#include "wire/attend_call.h"
#include "wire/dtype.h"

namespace attnserve {
namespace {

using ::attnserve::testing::ServerTest;
using ::attnserve::testing::TestTensor;
using ::attnserve::testing::ToWire;
using ::testing::HasSubstr;

// One call: inputs, the request that carries them, and the reference answer.
struct WireCase {
  int64_t b = 1, hq = 2, hkv = 1, lq = 5, lk = 7, d = 8, dv = 8;
  DType dtype = DType::kFloat32;
  DType out_dtype = DType::kFloat32;
  Layout layout = Layout::kBHLD;
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::kTopLeft;
  std::optional<int32_t> window_left, window_right;
  bool key_lengths = false;
  bool bool_mask = false;
  bool alibi = false;
  bool weights = false;
  std::optional<float> softcap;
  bool sinks = false;
  bool relative_bias = false;  // T5's, bidirectional: 8 buckets, distance 12

  TestTensor q, k, v, mask;
  std::vector<int32_t> lengths;
  std::vector<float> slopes, sink_logits, rel_table;

  std::vector<int64_t> Dims(int64_t h, int64_t l, int64_t x) const {
    if (layout == Layout::kBHLD) return {b, h, l, x};
    return {b, l, h, x};
  }

  v1::AttendRequest Build(uint64_t seed) {
    q = TestTensor::Random(dtype, Dims(hq, lq, d), seed);
    k = TestTensor::Random(dtype, Dims(hkv, lk, d), seed + 1);
    v = TestTensor::Random(dtype, Dims(hkv, lk, dv), seed + 2);
    v1::AttendRequest r;
    r.set_request_id(absl::StrCat("case-", seed));
    ToWire(q, r.mutable_query());
    ToWire(k, r.mutable_key());
    ToWire(v, r.mutable_value());
    r.set_layout(layout == Layout::kBHLD ? v1::BHLD : v1::BLHD);
    r.set_output_dtype(wire::DTypeToWire(out_dtype));
    r.set_return_weights(weights);
    v1::Mask* m = r.mutable_mask();
    m->set_causal(causal);
    m->set_alignment(alignment == CausalAlignment::kTopLeft ? v1::TOP_LEFT
                                                            : v1::BOTTOM_RIGHT);
    if (window_left) m->set_window_left(*window_left);
    if (window_right) m->set_window_right(*window_right);
    if (key_lengths) {
      for (int64_t i = 0; i < b; ++i)
        lengths.push_back(static_cast<int32_t>((i * 3 + 2) % (lk + 1)));
      for (int32_t x : lengths) m->add_key_lengths(x);
    }
    if (bool_mask) {
      mask = TestTensor(DType::kBool, {lq, lk});
      for (int64_t i = 0; i < mask.size(); ++i)
        mask.Set(i, (i * 7) % 5 != 0 ? 1.0f : 0.0f);
      ToWire(mask, m->mutable_explicit_mask());
    }
    if (alibi) {
      for (int64_t h = 0; h < hq; ++h) slopes.push_back(0.5f / (h + 1));
      for (float s : slopes) m->add_alibi_slopes(s);
    }
    if (relative_bias) {
      v1::RelativeBias* rb = m->mutable_relative_bias();
      for (int64_t e = 0; e < hq * 8; ++e) {
        rel_table.push_back(0.1f * static_cast<float>((e * 7) % 11) - 0.5f);
      }
      for (float x : rel_table) rb->add_table(x);
      rb->set_num_buckets(8);
      rb->set_max_distance(12);
      rb->set_bidirectional(true);
    }
    if (softcap) r.set_softcap(*softcap);
    if (sinks) {
      for (int64_t h = 0; h < hq; ++h) sink_logits.push_back(1.0f - h);
      for (float s : sink_logits) r.add_sinks(s);
    }
    return r;
  }

  // The reference output (f32) and weights for the built inputs.
  void Expected(TestTensor* out, TestTensor* w) const {
    AttentionInputs in;
    in.query = q.view();
    in.key = k.view();
    in.value = v.view();
    in.layout = layout;
    in.mask.causal = causal;
    in.mask.alignment = alignment;
    if (window_left) in.mask.window_left = *window_left;
    if (window_right) in.mask.window_right = *window_right;
    in.mask.key_lengths = lengths;
    if (bool_mask) in.mask.explicit_mask = mask.view();
    in.mask.alibi_slopes = slopes;
    in.softcap = softcap;
    in.sinks = sink_logits;
    if (relative_bias) {
      RelativeBiasSpec rb;
      rb.table = rel_table;
      rb.num_buckets = 8;
      rb.max_distance = 12;
      rb.bidirectional = true;
      in.mask.relative_bias = rb;
    }
    *out =
        TestTensor(DType::kFloat32, layout == Layout::kBHLD
                                        ? std::vector<int64_t>{b, hq, lq, dv}
                                        : std::vector<int64_t>{b, lq, hq, dv});
    *w = TestTensor(DType::kFloat32, {b, hq, lq, lk});
    AttentionOutputs outs{out->mutable_view(), std::nullopt};
    if (weights) outs.weights = w->mutable_view();
    ASSERT_TRUE(ReferenceAttention(in, outs).ok());
  }
};

// Compares a wire tensor with the reference values.
void ExpectTensorNear(const v1::Tensor& got, DType dtype,
                      const TestTensor& expected, float tol) {
  ASSERT_EQ(got.dtype(), wire::DTypeToWire(dtype));
  ASSERT_EQ(std::vector<int64_t>(got.shape().begin(), got.shape().end()),
            expected.shape());
  ASSERT_EQ(got.data().size(), expected.size() * DTypeSize(dtype));
  int reported = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const float g = LoadAsFloat(got.data().data(), dtype, i);
    const float e = expected.at(i);
    if (!(std::fabs(g - e) <= tol * (1 + std::fabs(e))) && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << g << ", expected " << e;
    }
  }
}

void ExpectMatches(const WireCase& c, const v1::AttendResponse& response) {
  TestTensor out, w;
  c.Expected(&out, &w);
  const float tol = c.dtype == DType::kFloat32 && c.out_dtype == DType::kFloat32
                        ? 1e-5f
                        : 2e-2f;
  ExpectTensorNear(response.output(), c.out_dtype, out, tol);
  if (c.weights) {
    ExpectTensorNear(response.weights(), DType::kFloat32, w,
                     c.dtype == DType::kFloat32 ? 1e-5f : 2e-2f);
  } else {
    EXPECT_FALSE(response.has_weights());
  }
}

class E2eAttendTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    StartSuiteServer({"--workers=1", "--threads_per_worker=2"});
  }
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ServerTest::SetUp());
    stub_ = v1::AttentionService::NewStub(channel());
  }

  grpc::Status Call(const v1::AttendRequest& request,
                    v1::AttendResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    return stub_->Attend(&context, request, response);
  }

  // An AttendPieces call of exactly `pieces`.
  grpc::Status SendPieces(const std::vector<v1::RequestPiece>& pieces,
                          v1::AttendResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    auto writer = stub_->AttendPieces(&context, response);
    for (const v1::RequestPiece& piece : pieces) {
      if (!writer->Write(piece)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<v1::AttentionService::Stub> stub_;
};

std::vector<WireCase> SweepCases() {
  std::vector<WireCase> cases;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (Layout layout : {Layout::kBHLD, Layout::kBLHD}) {
      WireCase c;
      c.dtype = dtype;
      c.out_dtype = dtype;
      c.layout = layout;
      c.b = 2;
      c.hq = 4;
      c.hkv = 2;
      c.lq = 33;
      c.lk = 47;
      c.d = 24;
      c.dv = 16;
      cases.push_back(c);
      c.causal = true;
      c.alignment = CausalAlignment::kBottomRight;
      c.weights = true;
      cases.push_back(c);
      c.causal = false;
      c.weights = false;
      c.window_left = 4;
      c.window_right = 2;
      c.key_lengths = true;
      c.bool_mask = true;
      c.alibi = true;
      c.out_dtype = DType::kFloat32;
      cases.push_back(c);
      // Gemma 2's soft-cap and gpt-oss's sinks, with weights.
      c.softcap = 0.5f;
      c.sinks = true;
      c.weights = true;
      cases.push_back(c);
      // T5's relative bias.
      c.softcap.reset();
      c.sinks = false;
      c.relative_bias = true;
      cases.push_back(c);
    }
  }
  WireCase decode;  // Lq = 1 against many keys, MQA: the decode kernel
  decode.hq = 8;
  decode.hkv = 1;
  decode.lq = 1;
  decode.lk = 1500;
  decode.d = 64;
  decode.dv = 64;
  decode.causal = true;
  decode.alignment = CausalAlignment::kBottomRight;
  cases.push_back(decode);
  decode.softcap = 0.5f;
  decode.sinks = true;
  cases.push_back(decode);
  WireCase big;  // several tiles each way
  big.hq = 2;
  big.hkv = 2;
  big.lq = 300;
  big.lk = 700;
  big.d = 64;
  big.dv = 64;
  big.causal = true;
  cases.push_back(big);
  return cases;
}

TEST_F(E2eAttendTest, UnaryResultsMatchTheReference) {
  std::vector<WireCase> cases = SweepCases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    WireCase& c = cases[i];
    const v1::AttendRequest request = c.Build(100 + i);
    v1::AttendResponse response;
    const grpc::Status status = Call(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.request_id(), request.request_id());
    EXPECT_GE(response.timing().total_us(), response.timing().compute_us());
    // The server's count, dense whatever the mask skips.
    EXPECT_EQ(response.timing().flops(),
              2.0 * c.b * c.hq * c.lq * c.lk * double(c.d + c.dv));
    ExpectMatches(c, response);
  }
}

TEST_F(E2eAttendTest, StreamAnswersInOrderAndSurvivesInvalidMessages) {
  std::vector<WireCase> cases = SweepCases();
  grpc::ClientContext context;
  auto stream = stub_->AttendStream(&context);
  std::vector<v1::AttendRequest> sent;
  for (size_t i = 0; i < cases.size(); ++i) {
    sent.push_back(cases[i].Build(200 + i));
    if (i % 3 == 1) {
      // An invalid message between valid ones: the value is one byte short.
      v1::AttendRequest bad = sent.back();
      bad.set_request_id(absl::StrCat("bad-", i));
      bad.mutable_value()->mutable_data()->pop_back();
      sent.push_back(bad);
    }
  }
  for (const auto& r : sent) ASSERT_TRUE(stream->Write(r));
  ASSERT_TRUE(stream->WritesDone());
  size_t next_case = 0;
  for (const auto& r : sent) {
    v1::AttendResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_EQ(response.request_id(), r.request_id());
    if (r.request_id().rfind("bad-", 0) == 0) {
      EXPECT_EQ(response.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(response.error_message(), HasSubstr("value"));
      EXPECT_FALSE(response.has_output());
      continue;
    }
    EXPECT_EQ(response.error_code(), 0) << response.error_message();
    ExpectMatches(cases[next_case++], response);
  }
  v1::AttendResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  EXPECT_TRUE(stream->Finish().ok());
}

// Each malformed request: the exact code and a fragment of the message.
TEST_F(E2eAttendTest, InvalidRequestsGetClearErrors) {
  struct Bad {
    std::string name;
    std::function<void(v1::AttendRequest*)> mutate;
    grpc::StatusCode code;
    std::string fragment;
  };
  const std::vector<Bad> bads = {
      {"short query",
       [](v1::AttendRequest* r) {
         r->mutable_query()->mutable_data()->pop_back();
       },
       grpc::INVALID_ARGUMENT, "query"},
      {"rank 3 key",
       [](v1::AttendRequest* r) {
         r->mutable_key()->mutable_shape()->RemoveLast();
         r->mutable_key()->mutable_shape()->Set(2, 7 * 8);
       },
       grpc::INVALID_ARGUMENT, "key"},
      {"dtype mismatch",
       [](v1::AttendRequest* r) { r->mutable_value()->set_dtype(v1::FLOAT16); },
       grpc::INVALID_ARGUMENT, "value"},
      {"Hq % Hkv",
       [](v1::AttendRequest* r) {
         // 2 query heads over 3 kv heads (sizes kept consistent).
         WireCase c;
         c.hq = 2;
         c.hkv = 3;
         *r = c.Build(9);
       },
       grpc::INVALID_ARGUMENT, "Hq % Hkv"},
      {"mask not broadcastable",
       [](v1::AttendRequest* r) {
         v1::Tensor* m = r->mutable_mask()->mutable_explicit_mask();
         m->set_dtype(v1::BOOL);
         m->add_shape(3);
         m->set_data(std::string(3, '\1'));
       },
       grpc::INVALID_ARGUMENT, "broadcast"},
      {"key_lengths count",
       [](v1::AttendRequest* r) {
         r->mutable_mask()->add_key_lengths(1);
         r->mutable_mask()->add_key_lengths(1);
       },
       grpc::INVALID_ARGUMENT, "key_lengths"},
      {"key_lengths range",
       [](v1::AttendRequest* r) { r->mutable_mask()->add_key_lengths(8); },
       grpc::INVALID_ARGUMENT, "key_lengths"},
      {"alibi length",
       [](v1::AttendRequest* r) { r->mutable_mask()->add_alibi_slopes(0.5f); },
       grpc::INVALID_ARGUMENT, "alibi"},
      {"negative window",
       [](v1::AttendRequest* r) { r->mutable_mask()->set_window_left(-1); },
       grpc::INVALID_ARGUMENT, "window_left"},
      {"relative bias table",
       [](v1::AttendRequest* r) {
         v1::RelativeBias* rb = r->mutable_mask()->mutable_relative_bias();
         rb->set_num_buckets(8);
         rb->set_max_distance(12);
         rb->add_table(1.0f);
       },
       grpc::INVALID_ARGUMENT,
       "mask.relative_bias.table: expected Hq × num_buckets = 2 × 8 = 16 "
       "entries, got 1"},
      {"zero softcap", [](v1::AttendRequest* r) { r->set_softcap(0.0f); },
       grpc::INVALID_ARGUMENT, "softcap: must be finite and > 0, got 0"},
      {"sinks length", [](v1::AttendRequest* r) { r->add_sinks(0.5f); },
       grpc::INVALID_ARGUMENT, "sinks: expected 2 entries"},
      {"sinks not finite",
       [](v1::AttendRequest* r) {
         r->add_sinks(0.5f);
         r->add_sinks(std::numeric_limits<float>::infinity());
       },
       grpc::INVALID_ARGUMENT, "sinks[1]: must be finite, got inf"},
      {"softcap with linear attention",
       [](v1::AttendRequest* r) {
         r->set_softcap(30.0f);
         r->mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
       },
       grpc::INVALID_ARGUMENT, "softcap: logit soft-capping cannot be"},
      {"bool query",
       [](v1::AttendRequest* r) {
         r->mutable_query()->set_dtype(v1::BOOL);
         r->mutable_query()->mutable_data()->resize(2 * 5 * 8);
       },
       grpc::INVALID_ARGUMENT, "query"},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.name);
    WireCase c;
    v1::AttendRequest request = c.Build(1);
    bad.mutate(&request);
    v1::AttendResponse response;
    const grpc::Status status = Call(request, &response);
    EXPECT_EQ(status.error_code(), bad.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(bad.fragment));
  }
}

TEST_F(E2eAttendTest, GetServerInfoDescribesTheServer) {
  grpc::ClientContext context;
  v1::ServerInfo info;
  ASSERT_TRUE(
      stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_FALSE(info.version().empty());
  EXPECT_EQ(info.onednn_version(), OneDnnVersion());
  EXPECT_THAT(info.isa(), ::testing::AnyOf("amx", "avx512", "avx2"));
  EXPECT_EQ(info.workers(), 1);
  EXPECT_EQ(info.threads_per_worker(), 2);
  EXPECT_EQ(info.max_queue(), 256);
  EXPECT_EQ(info.max_request_bytes(), int64_t{256} << 20);
  EXPECT_EQ(info.max_message_bytes(), int64_t{16} << 20);
}

TEST_F(E2eAttendTest, RequestsInPiecesMatchTheReference) {
  std::vector<WireCase> cases = SweepCases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    WireCase& c = cases[i];
    const v1::AttendRequest request = c.Build(100 + i);
    v1::AttendResponse response;
    grpc::ClientContext context;
    const grpc::Status status = wire::CallAttendInPieces(
        *stub_, &context, request.SerializeAsString(), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.request_id(), request.request_id());
    ExpectMatches(c, response);
  }
  // Pieces of any size: 7 bytes each, and the first piece empty.
  WireCase& c = cases.back();
  const v1::AttendRequest request = c.Build(7);
  const std::string bytes = request.SerializeAsString();
  std::vector<v1::RequestPiece> pieces(1);
  pieces[0].set_request_bytes(static_cast<int64_t>(bytes.size()));
  for (size_t at = 0; at < bytes.size(); at += 7) {
    pieces.emplace_back().set_data(bytes.substr(at, 7));
  }
  v1::AttendResponse response;
  const grpc::Status status = SendPieces(pieces, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectMatches(c, response);
}

// A request past the message limit as one message is refused by gRPC; the
// same request in pieces, as attnserve's clients send it, is served.
TEST_F(E2eAttendTest, ARequestPastTheMessageLimitGoesInPieces) {
  WireCase c;  // one query against 34 000 keys: 17 MiB, little to compute
  c.hq = 1;
  c.hkv = 1;
  c.lq = 1;
  c.lk = 34000;
  c.d = 64;
  c.dv = 64;
  const v1::AttendRequest request = c.Build(3);
  ASSERT_GT(request.ByteSizeLong(), size_t{16} << 20);
  v1::AttendResponse response;
  const grpc::Status refused = Call(request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("larger than max"));
  grpc::ClientContext context;
  const grpc::Status served =
      wire::CallAttend(*stub_, &context, request, &response);
  ASSERT_TRUE(served.ok()) << served.error_message();
  ExpectMatches(c, response);
}

// A client that announces a request and stops sending its pieces holds the
// bytes reserved for it only until --send_timeout passes without a piece.
TEST_F(E2eAttendTest, AClientThatStopsSendingPiecesIsCancelled) {
  StartServer({"--send_timeout=1s"});
  auto stub = v1::AttentionService::NewStub(channel());
  const std::string used = R"(attnserve_inflight_bytes{state="used"})";
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  v1::AttendResponse response;
  auto writer = stub->AttendPieces(&context, &response);
  v1::RequestPiece first;
  first.set_request_bytes(int64_t{64} << 20);
  first.set_data(std::string(1000, '\0'));
  ASSERT_TRUE(writer->Write(first));
  EXPECT_GE(::attnserve::testing::AwaitMetric(server(), used, 128 << 20),
            128 << 20)
      << "the request's bytes, twice, reserved at the first piece";
  // Nothing more is sent; the server cancels the call.
  EXPECT_EQ(::attnserve::testing::AwaitMetricAtMost(server(), used, 0,
                                                    absl::Seconds(20)),
            0);
  EXPECT_GE(::attnserve::testing::MetricSample(server(),
                                               "attnserve_send_timeouts_total"),
            1);
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(E2eAttendTest, MalformedPiecesGetClearErrors) {
  v1::AttendRequest request = SweepCases()[0].Build(5);
  const std::string bytes = request.SerializeAsString();
  const int64_t size = static_cast<int64_t>(bytes.size());
  auto piece = [](int64_t announced, std::string data) {
    v1::RequestPiece p;
    p.set_request_bytes(announced);
    p.set_data(std::move(data));
    return p;
  };
  const std::string half = bytes.substr(0, bytes.size() / 2);
  const std::string rest = bytes.substr(bytes.size() / 2);
  struct Case {
    std::vector<v1::RequestPiece> pieces;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{}, "ended after 0 bytes of the 0"},
      {{piece(0, bytes)}, "request_bytes must be between 1 and"},
      {{piece(-5, bytes)}, "got -5"},
      {{piece((int64_t{256} << 20) + 1, bytes)},
       "--max_request_bytes = 268435456"},
      {{piece(size, half), piece(size, rest)},
       "request_bytes is set in piece 1"},
      {{piece(size, half)},
       absl::StrCat("ended after ", half.size(), " bytes of the ", size)},
      {{piece(size, half), piece(0, rest), piece(0, "x")},
       "carry more than the"},
      {{piece(8, "\xff\xff\xff\xff\xff\xff\xff\xff")},
       "not a serialized AttendRequest"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("case ", i));
    v1::AttendResponse response;
    const grpc::Status status = SendPieces(cases[i].pieces, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(cases[i].error));
  }
  // The request itself is checked as an Attend request is.
  request.mutable_query()->set_data("short");
  v1::AttendResponse response;
  grpc::ClientContext context;
  const grpc::Status status = wire::CallAttendInPieces(
      *stub_, &context, request.SerializeAsString(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("query"));
}

}  // namespace
}  // namespace attnserve
