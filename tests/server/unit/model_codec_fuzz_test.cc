// Hosted-model requests under random mutation: every ModelRequest that parses
// is either refused with INVALID_ARGUMENT, NOT_FOUND or RESOURCE_EXHAUSTED and
// a message, or decodes into inputs the layer computes
// (fuzz::CheckModelRequest over fuzz::SmallModels, as the libFuzzer target in
// tests/fuzz/ does). Seeded and bounded, so it runs in every build (the
// ASan+UBSan tree included).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/attention.pb.h"
#include "base/random.h"
#include "core/attention.h"
#include "core/convert.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "model/model_repository.h"
#include "server/model_registry.h"
#include "tests/fuzz/codec_checks.h"

namespace attnserve::server {
namespace {

using Rng = ::attnserve::base::SplitMix64;

int64_t InterestingDim(Rng& rng) {
  static constexpr int64_t kValues[] = {-1,
                                        0,
                                        1,
                                        2,
                                        3,
                                        5,
                                        8,
                                        16,
                                        17,
                                        int64_t{1} << 31,
                                        int64_t{1} << 62,
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
  return kValues[rng.Below(std::size(kValues))];
}

int32_t InterestingInt32(Rng& rng) {
  static constexpr int32_t kValues[] = {-1,
                                        0,
                                        1,
                                        2,
                                        3,
                                        4,
                                        7,
                                        100,
                                        std::numeric_limits<int32_t>::max(),
                                        std::numeric_limits<int32_t>::min()};
  return kValues[rng.Below(std::size(kValues))];
}

float InterestingFloat(Rng& rng) {
  static constexpr float kValues[] = {0.0f,
                                      1.0f,
                                      -1.0f,
                                      1e30f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN()};
  return rng.OneIn(2) ? 2 * rng.UnitFloat() - 1
                      : kValues[rng.Below(std::size(kValues))];
}

v1::DataType SomeDType(Rng& rng) {
  return static_cast<v1::DataType>(rng.OneIn(5)
                                       ? static_cast<int>(rng.Below(40)) - 8
                                       : static_cast<int>(rng.Below(6)));
}

void Fill(Rng& rng, v1::DataType dtype, const std::vector<int64_t>& shape,
          v1::Tensor* t) {
  t->set_dtype(dtype);
  t->clear_shape();
  int64_t n = 1;
  for (int64_t d : shape) {
    t->add_shape(d);
    n *= d;
  }
  const size_t size = dtype == v1::FLOAT32 || dtype == v1::INT32 ? 4
                      : dtype == v1::BOOL                        ? 1
                                                                 : 2;
  std::string* data = t->mutable_data();
  data->assign(static_cast<size_t>(n) * size, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float f = 2 * rng.UnitFloat() - 1;
    char* at = data->data() + i * size;
    if (dtype == v1::FLOAT32) {
      std::memcpy(at, &f, 4);
    } else if (dtype == v1::INT32) {
      const int32_t p = static_cast<int32_t>(rng.Below(64));
      std::memcpy(at, &p, 4);
    } else if (dtype == v1::BOOL) {
      *at = f > 0 ? 1 : 0;
    } else {
      const uint16_t h =
          dtype == v1::BFLOAT16 ? FloatToBFloat16(f) : FloatToFloat16(f);
      std::memcpy(at, &h, 2);
    }
  }
}

// A valid request for `m`: random sizes, sometimes cross-attention,
// positions and mask parts.
v1::ModelRequest Valid(Rng& rng, const model::LoadedModel& m) {
  const int64_t b = 1 + rng.Below(2), lq = 1 + rng.Below(6),
                lk = 1 + rng.Below(7), d = m.config.d_model;
  const v1::DataType dtype =
      static_cast<v1::DataType>(1 + rng.Below(3));  // f32, bf16, f16
  v1::ModelRequest r;
  r.set_model(m.name);
  Fill(rng, dtype, {b, lq, d}, r.mutable_hidden());
  const bool cross = rng.OneIn(2);
  if (cross) Fill(rng, dtype, {b, lk, d}, r.mutable_memory());
  if (rng.OneIn(2)) Fill(rng, v1::INT32, {b, lq}, r.mutable_positions());
  v1::Mask* mask = r.mutable_mask();
  mask->set_causal(rng.OneIn(2));
  mask->set_alignment(static_cast<v1::Alignment>(rng.Below(3)));
  if (rng.OneIn(3)) mask->set_window_left(static_cast<int32_t>(rng.Below(4)));
  if (rng.OneIn(3)) mask->set_window_right(static_cast<int32_t>(rng.Below(4)));
  const int64_t keys = cross ? lk : lq;
  if (rng.OneIn(3)) {
    for (int64_t i = 0; i < b; ++i) {
      mask->add_key_lengths(static_cast<int32_t>(rng.Below(keys + 1)));
    }
  }
  if (rng.OneIn(3)) {
    Fill(rng, rng.OneIn(2) ? v1::BOOL : v1::FLOAT32, {1, lq, keys},
         mask->mutable_explicit_mask());
  }
  if (rng.OneIn(3)) {
    for (int64_t h = 0; h < m.config.num_heads; ++h) {
      mask->add_alibi_slopes(rng.UnitFloat());
    }
  }
  r.set_return_weights(rng.OneIn(2));
  r.set_output_dtype(static_cast<v1::DataType>(rng.Below(4)));
  return r;
}

v1::Tensor* SomeTensor(Rng& rng, v1::ModelRequest* r) {
  switch (rng.Below(4)) {
    case 0:
      return r->mutable_hidden();
    case 1:
      return r->mutable_memory();
    case 2:
      return r->mutable_positions();
    default:
      return r->mutable_mask()->mutable_explicit_mask();
  }
}

void Mutate(Rng& rng, v1::ModelRequest* r) {
  v1::Tensor* t = SomeTensor(rng, r);
  v1::Mask* mask = r->mutable_mask();
  switch (rng.Below(12)) {
    case 0:
      if (t->shape_size() > 0) {
        t->set_shape(static_cast<int>(rng.Below(t->shape_size())),
                     InterestingDim(rng));
      }
      break;
    case 1:
      t->add_shape(InterestingDim(rng));
      break;
    case 2:
      t->set_dtype(SomeDType(rng));
      break;
    case 3:
      t->mutable_data()->resize(rng.Below(t->data().size() + 9));
      break;
    case 4:
      if (!t->data().empty()) {
        const float f = InterestingFloat(rng);
        const size_t at = rng.Below(t->data().size());
        std::memcpy(t->mutable_data()->data() + at, &f,
                    std::min<size_t>(4, t->data().size() - at));
      }
      break;
    case 5:
      mask->add_key_lengths(InterestingInt32(rng));
      break;
    case 6:
      mask->set_window_left(InterestingInt32(rng));
      break;
    case 7:
      mask->add_alibi_slopes(InterestingFloat(rng));
      break;
    case 8:
      mask->set_alignment(static_cast<v1::Alignment>(InterestingInt32(rng)));
      break;
    case 9:
      r->set_output_dtype(SomeDType(rng));
      break;
    case 10:
      r->set_model(rng.OneIn(2) ? "" : "no_such_model");
      break;
    default:
      if (r->has_memory()) {
        r->clear_memory();
      } else {
        r->clear_positions();
      }
      break;
  }
}

TEST(ModelCodecFuzzTest, EveryRequestIsRefusedClearlyOrComputed) {
  // Invalid UTF-8 in the model name is logged on every parse: noise here.
  google::protobuf::SetLogHandler(nullptr);
  Rng rng(20261201);
  const model::RepositoryContents contents = fuzz::SmallModels(20261201);
  auto registry = ModelRegistry::Create(contents);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EngineOptions options;
  options.num_threads = 1;
  auto engine = AttentionEngine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  RequestLimits limits;
  limits.max_response_bytes = int64_t{1} << 20;
  limits.max_flops = 1e8;

  int computed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    const model::LoadedModel& m =
        contents.models[rng.Below(contents.models.size())];
    v1::ModelRequest request = Valid(rng, m);
    const int mutations = static_cast<int>(rng.Below(4));
    for (int k = 0; k < mutations; ++k) Mutate(rng, &request);
    if (rng.OneIn(8)) {
      // Bytes-level damage: whatever still parses is a request too.
      std::string bytes = request.SerializeAsString();
      if (!bytes.empty()) {
        bytes[rng.Below(bytes.size())] ^= static_cast<char>(1 + rng.Below(255));
      }
      if (!request.ParseFromString(bytes)) continue;
    }
    SCOPED_TRACE(absl::StrCat("iteration ", i));
    v1::AttendResponse response;
    const absl::StatusOr<fuzz::Verdict> verdict = fuzz::CheckModelRequest(
        request, **registry, **engine, limits, &response);
    ASSERT_TRUE(verdict.ok()) << verdict.status() << "\n"
                              << request.ShortDebugString();
    if (verdict->outcome == fuzz::Outcome::kRefused) {
      ++refused;
    } else {
      ++computed;
    }
  }
  // The mutations must leave both outcomes common, or the test tests little.
  EXPECT_GT(computed, 4000);
  EXPECT_GT(refused, 4000);
}

}  // namespace
}  // namespace attnserve::server
