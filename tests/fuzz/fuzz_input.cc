#include "tests/fuzz/fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.pb.h"
#include "attnserve/v1/sessions.pb.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "google/protobuf/stubs/logging.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/kserve/infer_codec.h"
#include "server/model_registry.h"
#include "server/request_codec.h"

namespace attnserve::fuzz {
namespace {

kvcache::SessionShape Shape(DType dtype, int heads, int head_dim, int value_dim,
                            int64_t max_tokens) {
  kvcache::SessionShape s;
  s.num_layers = kNumLayers;
  s.num_kv_heads = heads;
  s.head_dim = head_dim;
  s.value_dim = value_dim;
  s.dtype = dtype;
  s.max_tokens = max_tokens;
  return s;
}

// Appends `tokens` seeded f32 rows to a layer of a session of kHeadsAB heads
// of kDimAB.
absl::Status Prefill(kvcache::SessionStore& store, const std::string& id,
                     int layer, int64_t tokens, base::SplitMix64& rng) {
  std::vector<float> keys(tokens * kHeadsAB * kDimAB),
      values(tokens * kHeadsAB * kDimAB);
  for (float& x : keys) x = rng.Uniform(-1, 1);
  for (float& x : values) x = rng.Uniform(-1, 1);
  const int64_t shape[] = {tokens, kHeadsAB, kDimAB};
  return store
      .Append(id, layer, std::nullopt,
              MakeTensorView(keys.data(), DType::kFloat32, shape),
              MakeTensorView(values.data(), DType::kFloat32, shape))
      .status();
}

constexpr int64_t kMaxResponseBytes = int64_t{1} << 18;
constexpr double kMaxFlops = 1e6;

[[noreturn]] void Die(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "fuzz fixture: %s: %s\n", what,
               status.ToString().c_str());
  std::abort();
}

// What stays across inputs: nothing an input can change. Built on first use;
// a failure to build it aborts (no input could run).
struct Fixture {
  std::unique_ptr<AttentionEngine> engine;
  std::unique_ptr<server::ModelRegistry> registry;
  std::vector<server::kserve::ModelInterface> interfaces;
  server::RequestLimits limits;
};

Fixture& TheFixture() {
  static Fixture* const fixture = [] {
    // Invalid UTF-8 in string fields is logged on every parse: noise here.
    google::protobuf::SetLogHandler(nullptr);
    auto* f = new Fixture;
    EngineOptions options;
    options.num_threads = 1;
    absl::StatusOr<std::unique_ptr<AttentionEngine>> engine =
        AttentionEngine::Create(options);
    if (!engine.ok()) Die("AttentionEngine::Create", engine.status());
    f->engine = *std::move(engine);
    absl::StatusOr<std::unique_ptr<server::ModelRegistry>> registry =
        server::ModelRegistry::Create(SmallModels(kModelSeed));
    if (!registry.ok()) Die("ModelRegistry::Create", registry.status());
    f->registry = *std::move(registry);
    f->interfaces = server::kserve::ModelInterfaces(f->registry.get());
    f->limits.max_response_bytes = kMaxResponseBytes;
    f->limits.max_flops = kMaxFlops;
    return f;
  }();
  return *fixture;
}

template <typename Message>
bool Parse(const uint8_t* data, size_t size, Message* message) {
  return size <= static_cast<size_t>(INT32_MAX) &&
         message->ParseFromArray(data, static_cast<int>(size));
}

// A session family's message against a fresh store, which must then give
// back every block when its sessions close.
template <typename Message, typename Check>
absl::StatusOr<Verdict> OnSessions(const uint8_t* data, size_t size, bool evict,
                                   Check check) {
  Message message;
  if (!Parse(data, size, &message))
    return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
  absl::StatusOr<std::unique_ptr<kvcache::SessionStore>> store =
      MakeSessionStore(evict);
  if (!store.ok()) {
    return absl::InternalError(
        absl::StrCat("MakeSessionStore: ", store.status().ToString()));
  }
  absl::StatusOr<Verdict> verdict = check(message, **store);
  if (verdict.ok()) {
    const absl::Status closed = CheckStoreEmptiesOnClose(**store);
    if (!closed.ok()) return closed;
  }
  return verdict;
}

}  // namespace

absl::StatusOr<std::unique_ptr<kvcache::SessionStore>> MakeSessionStore(
    bool evict) {
  kvcache::StoreOptions options;
  options.block_tokens = kBlockTokens;
  options.budget_bytes = kBudgetBytes;
  options.evict_lru = evict;
  options.sweep_interval = absl::ZeroDuration();
  options.max_sessions = 8;
  options.remembered_endings = 8;
  ASSIGN_OR_RETURN(std::unique_ptr<kvcache::SessionStore> store,
                   kvcache::SessionStore::Create(options));
  base::SplitMix64 rng(kModelSeed);
  const kvcache::SessionShape ab =
      Shape(DType::kFloat32, kHeadsAB, kDimAB, kDimAB, 64);
  RETURN_IF_ERROR(store->CreateSession("a", ab, {}).status());
  RETURN_IF_ERROR(Prefill(*store, "a", 0, 6, rng));
  RETURN_IF_ERROR(Prefill(*store, "a", 1, 3, rng));
  kvcache::SessionShape b = ab;
  b.dtype = DType::kBFloat16;
  RETURN_IF_ERROR(store->CreateSession("b", b, {}).status());
  RETURN_IF_ERROR(Prefill(*store, "b", 0, 5, rng));
  RETURN_IF_ERROR(store->Fork("a", "c", {}).status());
  RETURN_IF_ERROR(
      store
          ->CreateSession(
              "d", Shape(DType::kFloat16, kHeadsD, kHeadDimD, kValueDimD, 16),
              {})
          .status());
  return store;
}

absl::StatusOr<Verdict> RunInput(const uint8_t* data, size_t size) {
  if (size == 0) return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
  Fixture& f = TheFixture();
  const Family family = FamilyOf(data[0]);
  const bool evict = (data[0] & 0x80) != 0;
  ++data;
  --size;
  switch (family) {
    case Family::kAttend: {
      v1::AttendRequest request;
      if (!Parse(data, size, &request))
        return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
      v1::AttendResponse response;
      return CheckAttendRequest(request, *f.engine, f.limits, kMaxFlops,
                                &response);
    }
    case Family::kModel: {
      v1::ModelRequest request;
      if (!Parse(data, size, &request))
        return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
      v1::AttendResponse response;
      return CheckModelRequest(request, *f.registry, *f.engine, f.limits,
                               &response);
    }
    case Family::kInfer: {
      inference::ModelInferRequest request;
      if (!Parse(data, size, &request))
        return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
      return CheckInferRequest(request, f.interfaces, *f.registry, *f.engine,
                               f.limits, kMaxFlops);
    }
    case Family::kAttendSessions:
      return OnSessions<v1::AttendSessionsRequest>(
          data, size, evict, [&](const auto& m, kvcache::SessionStore& s) {
            v1::AttendSessionsResponse response;
            return CheckAttendSessions(m, s, *f.engine, f.limits, &response);
          });
    case Family::kCreateSession:
      return OnSessions<v1::CreateSessionRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckCreateSession(m, s);
          });
    case Family::kAppendKv:
      return OnSessions<v1::AppendKvRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckAppendKv(m, s);
          });
    case Family::kForkSession:
      return OnSessions<v1::ForkSessionRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckForkSession(m, s);
          });
    case Family::kTruncateSession:
      return OnSessions<v1::TruncateSessionRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckTruncateSession(m, s);
          });
    case Family::kCloseSession:
      return OnSessions<v1::CloseSessionRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckCloseSession(m, s);
          });
    case Family::kGetSession:
      return OnSessions<v1::GetSessionRequest>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckGetSession(m, s);
          });
    case Family::kAttendPieces: {
      v1::RequestPiece piece;
      if (!Parse(data, size, &piece))
        return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
      v1::AttendResponse response;
      return CheckAttendPieces(piece, *f.engine, f.limits, kMaxFlops,
                               &response);
    }
    case Family::kImportSessions:
      return OnSessions<v1::SessionTransferChunk>(
          data, size, evict, [](const auto& m, kvcache::SessionStore& s) {
            return CheckImportSessions(m, s);
          });
  }
  return Verdict{Outcome::kUnparsed, 0, absl::OkStatus()};
}

}  // namespace attnserve::fuzz
