#ifndef ATTNSERVE_TESTS_FUZZ_SEED_REQUESTS_H_
#define ATTNSERVE_TESTS_FUZZ_SEED_REQUESTS_H_

// Valid AttendRequests to start fuzzing from: the seeded driver
// (tests/server/unit/request_fuzz_main.cc) mutates them, and the corpus
// generator (tests/fuzz/make_corpus.cc) writes them for libFuzzer.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnserve/v1/attention.pb.h"
#include "base/random.h"

namespace attnserve::fuzz {

// Bytes of one element of `dtype` on the wire (1 for BOOL and unknown values).
size_t WireElementSize(v1::DataType dtype);

// Sets `tensor` to `shape` of `dtype` with values in [-1, 1) (BOOL: 0 or 1).
void FillTensor(base::SplitMix64& rng, v1::DataType dtype,
                const std::vector<int64_t>& shape, v1::Tensor* tensor);

// Requests covering both layouts, the three dtypes, GQA, decode-like shapes,
// every mask part (block-sparse with both patterns), weights, linear attention
// with each feature map, LSH, and the empty edges (no keys, no batch). Every
// one computes in well under 1e6 FLOPs.
std::vector<v1::AttendRequest> SeedAttendRequests(base::SplitMix64& rng);

}  // namespace attnserve::fuzz

#endif  // ATTNSERVE_TESTS_FUZZ_SEED_REQUESTS_H_
