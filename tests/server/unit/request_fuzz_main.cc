// A seeded, deterministic stand-in for libFuzzer's driver, so that the request
// fuzz target runs under GCC and in the ASan+UBSan build. It mutates valid
// requests built here at the field level (shapes, data lengths, enum numbers,
// mask parts) and at the byte level (bit flips, inserts, deletes), and feeds
// each result to LLVMFuzzerTestOneInput.
// One file because the mutators and the valid-request builders are one
// driver, each mutator a few lines.
//
//   attnserve_request_fuzz [--seconds S] [--iterations N] [--seed K] [FILE...]
//
// Stops after S seconds (default 20) or N iterations, whichever comes first;
// the sequence of inputs depends only on K. FILE arguments are replayed once
// each instead. Should a run die, the input being tried is written to
// request_fuzz_crash.bin in the working directory for replay. The valid
// requests it starts from are tests/fuzz/seed_requests.h's, which the
// libFuzzer target's corpus holds too (tests/fuzz/).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "attnserve/v1/attention.pb.h"
#include "base/random.h"
#include "tests/fuzz/seed_requests.h"
#include "tests/server/unit/request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Present when linked with a sanitizer runtime: runs before the process dies of
// a sanitizer report.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

namespace attnserve::server {
namespace {

// The input under test, kept where a dying process can still write it out.
std::string* g_current_input = nullptr;
constexpr char kCrashFile[] = "request_fuzz_crash.bin";

void SaveCurrentInput() {
  if (g_current_input == nullptr) return;
  // Only async-signal-safe calls: this may run inside a signal handler.
  const int fd = open(kCrashFile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const char* p = g_current_input->data();
  size_t left = g_current_input->size();
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
}

void OnFatalSignal(int signal) {
  SaveCurrentInput();
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

using Rng = ::attnserve::base::SplitMix64;
using ::attnserve::fuzz::FillTensor;

int64_t InterestingDim(Rng& rng, int64_t current) {
  static constexpr int64_t kValues[] = {-1,
                                        0,
                                        1,
                                        2,
                                        3,
                                        4,
                                        7,
                                        8,
                                        255,
                                        256,
                                        257,
                                        int64_t{1} << 31,
                                        int64_t{1} << 40,
                                        int64_t{1} << 62,
                                        std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int64_t>::min()};
  switch (rng.Below(3)) {
    case 0:  // Wraps at the extremes, as an attacker's value would.
      return static_cast<int64_t>(static_cast<uint64_t>(current) + 1);
    case 1:
      return static_cast<int64_t>(static_cast<uint64_t>(current) - 1);
    default:
      return kValues[rng.Below(std::size(kValues))];
  }
}

float InterestingFloat(Rng& rng) {
  static constexpr float kValues[] = {0.0f,
                                      -0.0f,
                                      1.0f,
                                      -1.0f,
                                      1e-30f,
                                      1e30f,
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN(),
                                      std::numeric_limits<float>::max()};
  if (rng.OneIn(2)) return 4.0f * rng.UnitFloat() - 2.0f;
  return kValues[rng.Below(std::size(kValues))];
}

int32_t InterestingInt32(Rng& rng) {
  static constexpr int32_t kValues[] = {-1,
                                        0,
                                        1,
                                        2,
                                        3,
                                        4,
                                        5,
                                        7,
                                        48,
                                        std::numeric_limits<int32_t>::max(),
                                        std::numeric_limits<int32_t>::min()};
  return kValues[rng.Below(std::size(kValues))];
}

// An enum number: mostly the known values, sometimes one proto3 keeps unknown.
int EnumNumber(Rng& rng, int known) {
  if (rng.OneIn(4)) return static_cast<int>(rng.Next() & 0xff) - 16;
  return static_cast<int>(rng.Below(known));
}

v1::Tensor* SomeTensor(Rng& rng, v1::AttendRequest* r) {
  switch (rng.Below(4)) {
    case 0:
      return r->mutable_query();
    case 1:
      return r->mutable_key();
    case 2:
      return r->mutable_value();
    default:
      return r->mutable_mask()->mutable_explicit_mask();
  }
}

void MutateTensor(Rng& rng, v1::Tensor* t) {
  switch (rng.Below(7)) {
    case 0:
      if (t->shape_size() > 0) {
        const int i = static_cast<int>(rng.Below(t->shape_size()));
        t->set_shape(i, InterestingDim(rng, t->shape(i)));
      }
      break;
    case 1:
      t->add_shape(InterestingDim(rng, 1));
      break;
    case 2:
      if (t->shape_size() > 0) t->mutable_shape()->RemoveLast();
      break;
    case 3: {
      std::string* data = t->mutable_data();
      data->resize(rng.Below(data->size() + 1));
      break;
    }
    case 4:
      t->mutable_data()->append(1 + rng.Below(8), '\x7f');
      break;
    case 5:
      t->set_dtype(static_cast<v1::DataType>(EnumNumber(rng, 5)));
      break;
    default: {
      // A consistent tensor of another shape, so that the semantic checks (and
      // not only the byte count) are reached.
      std::vector<int64_t> shape(rng.Below(6));
      for (int64_t& d : shape) d = static_cast<int64_t>(rng.Below(6));
      const v1::DataType dtype = static_cast<v1::DataType>(1 + rng.Below(4));
      FillTensor(rng, dtype, shape, t);
      break;
    }
  }
}

// A broadcastable or nearly broadcastable mask over the request's own sizes.
void RandomMask(Rng& rng, v1::AttendRequest* r) {
  std::vector<int64_t> dims;
  for (const v1::Tensor* t : {&r->query(), &r->key()}) {
    for (int64_t d : t->shape()) {
      if (d >= 0 && d < 64) dims.push_back(d);
    }
  }
  dims.push_back(1);
  std::vector<int64_t> shape(rng.Below(6));
  for (int64_t& d : shape) d = dims[rng.Below(dims.size())];
  FillTensor(rng, rng.OneIn(2) ? v1::BOOL : v1::FLOAT32, shape,
             r->mutable_mask()->mutable_explicit_mask());
}

// One field of Mask.block_sparse: sizes near the request's own, extremes,
// unknown enum numbers, unsorted or out-of-range global tokens, block masks
// of near-right shapes.
void MutateBlockSparse(Rng& rng, v1::AttendRequest* r) {
  v1::BlockSparse* b = r->mutable_mask()->mutable_block_sparse();
  const auto small = [&rng] {
    return rng.OneIn(2) ? static_cast<int32_t>(rng.Below(9))
                        : InterestingInt32(rng);
  };
  switch (rng.Below(9)) {
    case 0:
      b->set_block_size(small());
      break;
    case 1:
      if (rng.OneIn(3)) {
        b->clear_local_left();
      } else {
        b->set_local_left(small());
      }
      break;
    case 2:
      if (rng.OneIn(3)) {
        b->clear_local_right();
      } else {
        b->set_local_right(small());
      }
      break;
    case 3:
      b->set_stride(small());
      break;
    case 4:
      b->set_stride_pattern(static_cast<v1::StridePattern>(EnumNumber(rng, 3)));
      break;
    case 5:
      b->set_random_blocks(small());
      b->set_seed(rng.Next());
      break;
    case 6: {
      b->clear_global_tokens();
      const uint64_t n = rng.Below(5);
      for (uint64_t i = 0; i < n; ++i) b->add_global_tokens(small());
      break;
    }
    case 7: {
      std::vector<int64_t> shape(rng.Below(4));
      for (int64_t& d : shape) d = static_cast<int64_t>(rng.Below(6));
      FillTensor(rng, rng.OneIn(4) ? v1::FLOAT32 : v1::BOOL, shape,
                 b->mutable_block_mask());
      break;
    }
    default:
      r->mutable_mask()->clear_block_sparse();
      break;
  }
}

// The method oneof: softmax, linear or LSH with in-range and extreme fields;
// LSH sometimes without the key it refuses.
void MutateMethod(Rng& rng, v1::AttendRequest* r) {
  const auto small = [&rng] {
    return rng.OneIn(2) ? static_cast<int32_t>(1 + rng.Below(8))
                        : InterestingInt32(rng);
  };
  switch (rng.Below(3)) {
    case 0:
      r->clear_linear();
      r->clear_lsh();
      break;
    case 1: {
      v1::LinearAttention* l = r->mutable_linear();
      l->set_feature_map(static_cast<v1::FeatureMap>(EnumNumber(rng, 4)));
      l->set_num_features(small());
      l->set_seed(rng.Next());
      break;
    }
    default: {
      v1::LshAttention* l = r->mutable_lsh();
      l->set_num_hashes(small());
      // Even counts often (the valid ones), in int64 so that doubling an
      // extreme cannot overflow.
      const int64_t buckets = rng.OneIn(2) ? 2 * int64_t{small()} : small();
      l->set_num_buckets(static_cast<int32_t>(
          std::clamp<int64_t>(buckets, std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int32_t>::max())));
      l->set_chunk_size(small());
      l->set_seed(rng.Next());
      if (rng.OneIn(2)) r->clear_key();
      break;
    }
  }
}

void MutateField(Rng& rng, v1::AttendRequest* r) {
  v1::Mask* m = r->mutable_mask();
  switch (rng.Below(18)) {
    case 0:
    case 1:
    case 2:
      MutateTensor(rng, SomeTensor(rng, r));
      break;
    case 3:
      r->set_layout(static_cast<v1::Layout>(EnumNumber(rng, 3)));
      break;
    case 4:
      m->set_alignment(static_cast<v1::Alignment>(EnumNumber(rng, 3)));
      break;
    case 5:
      r->set_output_dtype(static_cast<v1::DataType>(EnumNumber(rng, 5)));
      break;
    case 6:
      RandomMask(rng, r);
      break;
    case 7: {
      m->clear_key_lengths();
      const uint64_t n = rng.Below(4);
      for (uint64_t i = 0; i < n; ++i) {
        m->add_key_lengths(rng.OneIn(2) ? static_cast<int32_t>(rng.Below(9))
                                        : InterestingInt32(rng));
      }
      break;
    }
    case 8: {
      m->clear_alibi_slopes();
      const uint64_t n = rng.Below(6);
      for (uint64_t i = 0; i < n; ++i)
        m->add_alibi_slopes(InterestingFloat(rng));
      break;
    }
    case 9:
      if (rng.OneIn(3)) {
        m->clear_window_left();
      } else {
        m->set_window_left(InterestingInt32(rng));
      }
      break;
    case 10:
      if (rng.OneIn(3)) {
        m->clear_window_right();
      } else {
        m->set_window_right(InterestingInt32(rng));
      }
      break;
    case 11:
      if (rng.OneIn(3)) {
        r->clear_scale();
      } else {
        r->set_scale(InterestingFloat(rng));
      }
      break;
    case 12:
      r->set_return_weights(!r->return_weights());
      break;
    case 13:
      m->set_causal(!m->causal());
      break;
    case 14:
      switch (rng.Below(4)) {
        case 0:
          r->clear_query();
          break;
        case 1:
          r->clear_key();
          break;
        case 2:
          r->clear_value();
          break;
        default:
          r->clear_mask();
          break;
      }
      break;
    case 15:
      r->mutable_key()->Swap(r->mutable_value());
      break;
    case 16:
      MutateBlockSparse(rng, r);
      break;
    default:
      MutateMethod(rng, r);
      break;
  }
}

void MutateBytes(Rng& rng, std::string* bytes) {
  const uint64_t n = 1 + rng.Below(4);
  for (uint64_t k = 0; k < n; ++k) {
    const size_t size = bytes->size();
    switch (rng.Below(5)) {
      case 0:
        if (size > 0)
          (*bytes)[rng.Below(size)] ^= static_cast<char>(1 << rng.Below(8));
        break;
      case 1:
        if (size > 0) (*bytes)[rng.Below(size)] = static_cast<char>(rng.Next());
        break;
      case 2:
        bytes->insert(bytes->begin() + rng.Below(size + 1),
                      static_cast<char>(rng.Next()));
        break;
      case 3:
        if (size > 0) {
          const size_t at = rng.Below(size);
          bytes->erase(at, 1 + rng.Below(std::min<size_t>(size - at, 16)));
        }
        break;
      default:
        bytes->resize(rng.Below(size + 1));
        break;
    }
  }
}

void RunOne(const std::string& input) {
  *g_current_input = input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

int Replay(const std::vector<std::string>& files) {
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "request_fuzz: cannot read %s\n", path.c_str());
      return 2;
    }
    RunOne(std::string(std::istreambuf_iterator<char>(in), {}));
    std::printf("request_fuzz: %s ok\n", path.c_str());
  }
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: attnserve_request_fuzz [--seconds S] [--iterations N] "
               "[--seed K] [FILE...]\n");
  return 2;
}

int Main(int argc, char** argv) {
  double seconds = 20.0;
  uint64_t iterations = std::numeric_limits<uint64_t>::max();
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--seconds" && has_value) {
      seconds = std::strtod(argv[++i], nullptr);
    } else if (arg == "--iterations" && has_value) {
      iterations = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg.rfind("--", 0) == 0) {
      return Usage();
    } else {
      files.push_back(arg);
    }
  }

  std::string current;
  g_current_input = &current;
  if (__sanitizer_set_death_callback != nullptr) {
    __sanitizer_set_death_callback(SaveCurrentInput);
  }
  std::signal(SIGABRT, OnFatalSignal);
  if (!files.empty()) return Replay(files);

  Rng rng(seed);
  const std::vector<v1::AttendRequest> seeds =
      ::attnserve::fuzz::SeedAttendRequests(rng);
  // Mutants that still parse join a small pool so mutations can stack.
  std::vector<std::string> pool;
  for (const v1::AttendRequest& r : seeds)
    pool.push_back(r.SerializeAsString());
  const size_t seed_count = pool.size();
  constexpr size_t kPoolSize = 256;

  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds));
  uint64_t done = 0;
  // Every seed first, unmutated: they must all compute.
  for (const std::string& s : pool) RunOne(s);
  while (done < iterations && std::chrono::steady_clock::now() < deadline) {
    const std::string& base = rng.OneIn(2) ? pool[rng.Below(seed_count)]
                                           : pool[rng.Below(pool.size())];
    std::string input;
    v1::AttendRequest request;
    if (!rng.OneIn(4) && request.ParseFromString(base)) {
      const uint64_t n = 1 + rng.Below(3);
      for (uint64_t k = 0; k < n; ++k) MutateField(rng, &request);
      input = request.SerializeAsString();
      if (rng.OneIn(8)) MutateBytes(rng, &input);
    } else {
      input = base;
      MutateBytes(rng, &input);
    }
    const uint64_t parsed_before = RequestFuzzCountsSoFar().parsed;
    RunOne(input);
    ++done;
    if (RequestFuzzCountsSoFar().parsed > parsed_before) {
      if (pool.size() < kPoolSize) {
        pool.push_back(std::move(input));
      } else {
        pool[seed_count + rng.Below(kPoolSize - seed_count)] = std::move(input);
      }
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const RequestFuzzCounts& counts = RequestFuzzCountsSoFar();
  std::printf(
      "request_fuzz: seed %llu, %llu mutants in %.1f s: %llu parsed, %llu "
      "rejected, %llu computed (%llu non-empty); no failure\n",
      static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(done), elapsed,
      static_cast<unsigned long long>(counts.parsed),
      static_cast<unsigned long long>(counts.rejected),
      static_cast<unsigned long long>(counts.computed),
      static_cast<unsigned long long>(counts.computed_nonempty));
  return 0;
}

}  // namespace
}  // namespace attnserve::server

int main(int argc, char** argv) { return attnserve::server::Main(argc, argv); }
