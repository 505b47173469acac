// The server's heap policy (base/malloc_policy.h) with a worker's warm-up
// (AttentionLayer::WarmUp): alone in its process, so that the policy is set
// before any thread starts and the worker thread gets a heap (glibc arena)
// that no other test has filled.

#include <sys/resource.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "base/malloc_policy.h"
#include "core/attention.h"
#include "gtest/gtest.h"
#include "model/attention_layer.h"
#include "tests/util/test_env.h"
#include "tests/util/test_util.h"

namespace attnserve {
namespace {

using ::attnserve::testing::CapIsa;
using ::attnserve::testing::TestTensor;

// Page faults of the calling thread so far.
int64_t ThreadMinorFaults() {
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// A worker warmed up as the server's are (WarmUpThread, then the layer's
// WarmUp of 100 rows) finds the pages of a longer call than any it made
// already resident: the warm-up touched the heap a call of 1024 rows works
// in, twice over (regression: mha_post's first call at L200 took 91-106 page
// faults, 1.7-2.1x its repeat).
TEST(WorkerHeapTest, ALongerCallAfterWarmUpFindsItsPagesResident) {
  ASSERT_TRUE(base::ApplyMallocPolicy().ok());
  model::ModelConfig config;  // mha_post's shape: d_model 64, 4 heads of 16
  config.d_model = 64;
  config.num_heads = config.num_kv_heads = 4;
  config.head_dim = 16;
  config.bias = false;
  config.norm = model::NormPlacement::kNone;
  model::LayerWeights weights;
  for (std::vector<float>* w :
       {&weights.q_proj_weight, &weights.k_proj_weight, &weights.v_proj_weight,
        &weights.o_proj_weight}) {
    w->assign(64 * 64, 0.01f);
  }
  auto layer = model::AttentionLayer::Create(config, weights);
  ASSERT_TRUE(layer.ok()) << layer.status();
  int64_t faults = -1, pages = 0;
  absl::Status status;
  std::thread worker([&] {
    EngineOptions options;
    options.num_threads = 1;
    options.max_isa = CapIsa(Isa::kAuto);
    auto engine = AttentionEngine::Create(options);
    if (!engine.ok()) {
      status = engine.status();
      return;
    }
    status = (*engine)->WarmUpThread();
    if (status.ok()) status = (*layer)->WarmUp(**engine);
    // A few calls at attnctl infer's default length, then a longer one.
    for (const int64_t len : {128, 128, 128, 1000}) {
      if (!status.ok()) return;
      const TestTensor hidden =
          TestTensor::Random(DType::kFloat32, {1, len, 64}, len);
      TestTensor out(DType::kFloat32, {1, len, 64});
      model::LayerInputs in;
      in.hidden = hidden.view();
      model::LayerOutputs o;
      o.output = out.mutable_view();
      const int64_t before = ThreadMinorFaults();
      status = (*layer)->Run(in, o, **engine);
      faults = ThreadMinorFaults() - before;
      pages = (*layer)->WorkingBytes(model::LayerShape{1, len, len}) / 4096;
    }
  });
  worker.join();
  ASSERT_TRUE(status.ok()) << status;
  // The call's buffers span WorkingBytes / 4 KiB pages (562): without the
  // warm-up's touch it faulted 480 of them in, with it 4 (2 Dec 2026).
  EXPECT_LT(faults, pages / 8) << "of " << pages << " pages";
}

}  // namespace
}  // namespace attnserve
