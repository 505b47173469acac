#include "tests/fuzz/seed_requests.h"

#include <cstring>

#include "core/convert.h"

namespace attnserve::fuzz {
namespace {

struct SeedShape {
  v1::Layout layout;
  v1::DataType dtype;
  int64_t b, hq, hkv, lq, lk, d, dv;
};

std::vector<int64_t> InLayout(v1::Layout layout, int64_t b, int64_t h,
                              int64_t l, int64_t d) {
  if (layout == v1::BLHD) return {b, l, h, d};
  return {b, h, l, d};
}

v1::AttendRequest PlainRequest(base::SplitMix64& rng, const SeedShape& s) {
  v1::AttendRequest request;
  request.set_request_id("seed");
  request.set_layout(s.layout);
  FillTensor(rng, s.dtype, InLayout(s.layout, s.b, s.hq, s.lq, s.d),
             request.mutable_query());
  FillTensor(rng, s.dtype, InLayout(s.layout, s.b, s.hkv, s.lk, s.d),
             request.mutable_key());
  FillTensor(rng, s.dtype, InLayout(s.layout, s.b, s.hkv, s.lk, s.dv),
             request.mutable_value());
  return request;
}

}  // namespace

size_t WireElementSize(v1::DataType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return 4;
    case v1::BFLOAT16:
    case v1::FLOAT16:
      return 2;
    default:
      return 1;
  }
}

void FillTensor(base::SplitMix64& rng, v1::DataType dtype,
                const std::vector<int64_t>& shape, v1::Tensor* tensor) {
  tensor->set_dtype(dtype);
  tensor->clear_shape();
  int64_t n = 1;
  for (int64_t d : shape) {
    tensor->add_shape(d);
    n *= d;
  }
  std::string* data = tensor->mutable_data();
  data->assign(static_cast<size_t>(n) * WireElementSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float f = 2.0f * rng.UnitFloat() - 1.0f;
    char* at = data->data() + i * WireElementSize(dtype);
    if (dtype == v1::FLOAT32) {
      std::memcpy(at, &f, 4);
    } else if (dtype == v1::BFLOAT16 || dtype == v1::FLOAT16) {
      const uint16_t h =
          dtype == v1::BFLOAT16 ? FloatToBFloat16(f) : FloatToFloat16(f);
      std::memcpy(at, &h, 2);
    } else {
      *at = f > 0.0f ? 1 : 0;
    }
  }
}

std::vector<v1::AttendRequest> SeedAttendRequests(base::SplitMix64& rng) {
  std::vector<v1::AttendRequest> seeds;
  {
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BHLD, v1::FLOAT32, 1, 2, 1, 3, 4, 2, 2});
    v1::Mask* m = r.mutable_mask();
    m->set_causal(true);
    m->set_alignment(v1::BOTTOM_RIGHT);
    m->set_window_left(2);
    m->set_window_right(0);
    m->add_key_lengths(3);
    FillTensor(rng, v1::BOOL, {3, 4}, m->mutable_explicit_mask());
    m->add_alibi_slopes(0.5f);
    m->add_alibi_slopes(0.25f);
    r.set_scale(0.7f);
    r.set_return_weights(true);
    seeds.push_back(r);
    // Gemma 2's soft-cap and gpt-oss's sinks over the same call.
    r.set_softcap(1.5f);
    r.add_sinks(0.5f);
    r.add_sinks(-2.0f);
    seeds.push_back(r);
  }
  {
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BLHD, v1::BFLOAT16, 2, 4, 2, 5, 7, 8, 6});
    r.mutable_mask()->set_causal(true);
    r.mutable_mask()->add_key_lengths(7);
    r.mutable_mask()->add_key_lengths(2);
    r.set_output_dtype(v1::FLOAT32);
    seeds.push_back(r);
  }
  {
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BLHD, v1::FLOAT16, 1, 2, 2, 3, 5, 4, 4});
    FillTensor(rng, v1::FLOAT32, {2, 1, 5},
               r.mutable_mask()->mutable_explicit_mask());
    r.set_return_weights(true);
    r.set_output_dtype(v1::BFLOAT16);
    seeds.push_back(r);
  }
  {
    // Decode-like: one query row against many keys.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BHLD, v1::FLOAT32, 1, 4, 1, 1, 48, 8, 8});
    r.mutable_mask()->set_causal(true);
    r.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
    r.mutable_mask()->set_window_left(16);
    seeds.push_back(r);
  }
  {
    // Block-sparse: every component, with causal and padding.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BHLD, v1::FLOAT32, 1, 2, 1, 9, 11, 4, 4});
    v1::BlockSparse* b = r.mutable_mask()->mutable_block_sparse();
    b->set_block_size(2);
    b->set_local_left(1);
    b->set_stride(2);
    b->set_random_blocks(1);
    b->set_seed(3);
    b->add_global_tokens(0);
    FillTensor(rng, v1::BOOL, {5, 6}, b->mutable_block_mask());
    r.mutable_mask()->set_causal(true);
    r.mutable_mask()->add_key_lengths(10);
    seeds.push_back(r);
  }
  {
    // Linear attention, FAVOR+, causal.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BLHD, v1::FLOAT32, 1, 2, 1, 5, 5, 4, 4});
    r.mutable_linear()->set_feature_map(v1::FAVOR_PLUS);
    r.mutable_linear()->set_num_features(8);
    r.mutable_mask()->set_causal(true);
    seeds.push_back(r);
  }
  {
    // LSH attention: no key, value with the query's heads.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BHLD, v1::FLOAT32, 1, 2, 2, 7, 7, 4, 4});
    r.clear_key();
    v1::LshAttention* l = r.mutable_lsh();
    l->set_num_hashes(2);
    l->set_num_buckets(4);
    l->set_chunk_size(3);
    seeds.push_back(r);
  }
  {
    // Linear attention, ReLU features, GQA, bf16, with padding.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BHLD, v1::BFLOAT16, 2, 4, 2, 3, 6, 4, 4});
    r.mutable_linear()->set_feature_map(v1::RELU);
    r.mutable_mask()->add_key_lengths(6);
    r.mutable_mask()->add_key_lengths(1);
    seeds.push_back(r);
  }
  {
    // Linear attention, elu + 1, bottom-right causal over more keys.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BLHD, v1::FLOAT16, 1, 2, 2, 2, 5, 4, 2});
    r.mutable_linear()->set_feature_map(v1::ELU_PLUS_ONE);
    r.mutable_mask()->set_causal(true);
    r.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
    seeds.push_back(r);
  }
  {
    // Block-sparse with the FIXED pattern, a two-sided band, bf16, weights.
    v1::AttendRequest r =
        PlainRequest(rng, {v1::BLHD, v1::BFLOAT16, 1, 2, 2, 8, 8, 4, 4});
    v1::BlockSparse* b = r.mutable_mask()->mutable_block_sparse();
    b->set_block_size(3);
    b->set_local_left(0);
    b->set_local_right(1);
    b->set_stride(2);
    b->set_stride_pattern(v1::FIXED);
    b->add_global_tokens(7);
    r.set_return_weights(true);
    seeds.push_back(r);
  }
  // Empty edges: no keys, no batch.
  seeds.push_back(
      PlainRequest(rng, {v1::BHLD, v1::FLOAT32, 1, 2, 2, 3, 0, 4, 4}));
  seeds.push_back(
      PlainRequest(rng, {v1::BLHD, v1::BFLOAT16, 0, 2, 1, 3, 4, 4, 4}));
  return seeds;
}

}  // namespace attnserve::fuzz
