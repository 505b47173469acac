#include "core/scoring.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::StatusIs;
using ::attnserve::testing::TestTensor;
using ::testing::HasSubstr;

// The ISAs this machine (and this run's cap) can use.
std::vector<Isa> Isas() {
  std::vector<Isa> isas;
  for (Isa isa : ::attnserve::testing::MachineIsas()) {
    if (CapIsa(isa) == isa) isas.push_back(isa);
  }
  return isas;
}

TEST(AdditiveScoresTest, MatchesPlainTanhOnEveryIsa) {
  // A = 37: full vectors and a ragged tail on both ISAs; large arguments
  // saturate tanh.
  const int64_t b = 2, h = 3, lq = 4, lk = 5, a = 37;
  const TestTensor qa =
      TestTensor::Random(DType::kFloat32, {b, lq, h, a}, 1, -30.0f, 30.0f);
  const TestTensor ka =
      TestTensor::Random(DType::kFloat32, {b, lk, h, a}, 2, -2.0f, 2.0f);
  const TestTensor v = TestTensor::Random(DType::kFloat32, {h, a}, 3);
  for (Isa isa : Isas()) {
    SCOPED_TRACE(IsaName(isa));
    std::vector<float> scores(b * h * lq * lk, -1.0f);
    ASSERT_TRUE(AdditiveScores(static_cast<const float*>(qa.data()),
                               static_cast<const float*>(ka.data()),
                               static_cast<const float*>(v.data()), b, h, lq,
                               lk, a, 2, isa, scores.data())
                    .ok());
    for (int64_t bb = 0; bb < b; ++bb) {
      for (int64_t hh = 0; hh < h; ++hh) {
        for (int64_t i = 0; i < lq; ++i) {
          for (int64_t j = 0; j < lk; ++j) {
            double expected = 0;
            for (int64_t e = 0; e < a; ++e) {
              expected +=
                  v.at({hh, e}) * std::tanh(double(qa.at({bb, i, hh, e})) +
                                            ka.at({bb, j, hh, e}));
            }
            ASSERT_NEAR(scores[((bb * h + hh) * lq + i) * lk + j], expected,
                        2e-5)
                << bb << " " << hh << " " << i << " " << j;
          }
        }
      }
    }
  }
}

TEST(AdditiveScoresTest, SmallArgumentsKeepTheirSign) {
  const std::vector<float> qa = {1e-3f, -1e-3f, 0.0f, 5e-6f};
  const std::vector<float> ka = {0.0f, 0.0f, 0.0f, 0.0f};
  for (Isa isa : Isas()) {
    for (int e = 0; e < 4; ++e) {
      std::vector<float> v(4, 0.0f);
      v[e] = 1.0f;
      float score = 0;
      ASSERT_TRUE(AdditiveScores(qa.data(), ka.data(), v.data(), 1, 1, 1, 1, 4,
                                 1, isa, &score)
                      .ok());
      EXPECT_NEAR(score, std::tanh(qa[e]), 2e-7) << IsaName(isa) << " " << e;
    }
  }
}

TEST(AdditiveScoresTest, RejectsBadArguments) {
  float score = 0;
  EXPECT_THAT(AdditiveScores(nullptr, nullptr, nullptr, 1, -1, 1, 1, 1, 1,
                             Isa::kAvx2, &score),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("negative dimension")));
  EXPECT_THAT(AdditiveScores(nullptr, nullptr, nullptr, 0, 0, 0, 0, 0, 0,
                             Isa::kAvx2, &score),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_threads must be >= 1")));
#if defined(__x86_64__)
  const Isa foreign = Isa::kNeon;
#else
  const Isa foreign = Isa::kAvx2;
#endif
  EXPECT_THAT(AdditiveScores(nullptr, nullptr, nullptr, 0, 0, 0, 0, 0, 1,
                             foreign, &score),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdditiveScores: max_isa: this CPU does not "
                                 "run")));
  // kAuto runs the best ISA.
  EXPECT_TRUE(AdditiveScores(nullptr, nullptr, nullptr, 0, 0, 0, 0, 0, 1,
                             Isa::kAuto, &score)
                  .ok());
}

}  // namespace
}  // namespace attnserve
