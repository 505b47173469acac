// The resident memory of sessions that share a prompt: each session's copy of
// a shared block is freed as soon as it fills, and without BlockPool's reuse
// of that memory the process kept every such copy (the system allocator
// cannot place the next block in a lone freed one). Not in the sanitizer
// builds, whose heaps and shadow memory are their own.

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvcache/session_store.h"

namespace attnserve::kvcache {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// VmRSS of this process in bytes.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

std::vector<float> Rows(int64_t t0, int64_t n, int64_t width, int session) {
  std::vector<float> rows(static_cast<size_t>(n * width));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      rows[static_cast<size_t>(t * width + i)] =
          float(t0 + t) + float(i) / 4096.0f + 1e4f * float(session);
    }
  }
  return rows;
}

TEST(BlockMemoryTest, SessionsSharingAPromptStayResidentAtTheStoresCount) {
  // 1 MiB blocks (128 tokens × 8 heads × (128 + 128) × f32); each session
  // appends a 2048-token prompt that the first one already holds (16 blocks,
  // each freed as it fills) and 256 tokens of its own.
  StoreOptions options;
  options.budget_bytes = int64_t{4} << 30;
  options.block_tokens = 128;
  options.sweep_interval = absl::ZeroDuration();
  options.share_blocks = true;
  std::unique_ptr<SessionStore> store = *SessionStore::Create(options);
  SessionShape shape;
  shape.num_layers = 1;
  shape.num_kv_heads = 8;
  shape.head_dim = 128;
  shape.value_dim = 128;
  shape.max_tokens = 4096;
  const int64_t width = 8 * 128, prompt = 2048, tail = 256, chunk = 512;
  std::vector<std::vector<float>> prompt_rows;
  for (int64_t t = 0; t < prompt; t += chunk) {
    prompt_rows.push_back(Rows(t, chunk, width, 0));
  }
  const auto append = [&](const std::string& id, int64_t t0,
                          const std::vector<float>& rows) {
    const int64_t n = static_cast<int64_t>(rows.size()) / width;
    const TensorView view =
        MakeTensorView(rows.data(), DType::kFloat32, {n, 8, 128});
    ASSERT_TRUE(store->Append(id, 0, t0, view, view).ok());
  };
  const int64_t before = ResidentBytes();
  constexpr int kSessions = 32;
  for (int s = 0; s < kSessions; ++s) {
    const std::string id = absl::StrCat("s", s);
    ASSERT_TRUE(store->CreateSession(id, shape, {}).ok());
    for (size_t i = 0; i < prompt_rows.size(); ++i) {
      append(id, static_cast<int64_t>(i) * chunk, prompt_rows[i]);
    }
    append(id, prompt, Rows(prompt, tail, width, s + 1));
  }
  const int64_t used = store->Stats().used_bytes;
  EXPECT_EQ(used, (16 + 2 * kSessions) * kMiB);
  // Without the reuse: about 3 MiB more per session (the freed copies).
  EXPECT_LE(ResidentBytes() - before, used + used / 4)
      << "store " << used << " bytes";
}

}  // namespace
}  // namespace attnserve::kvcache
