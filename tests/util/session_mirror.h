#ifndef ATTNSERVE_TESTS_UTIL_SESSION_MIRROR_H_
#define ATTNSERVE_TESTS_UTIL_SESSION_MIRROR_H_

// A client-side copy of a KV-cache session, for end-to-end tests: what the
// server should hold (keys and values rounded to the storage dtype, as the
// server stores them), the wire tensors to send it, and the stateless
// reference of an AttendSessions result over the copy.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnserve/v1/sessions.pb.h"
#include "core/paged.h"
#include "core/tensor.h"

namespace attnserve::testing {

struct MirrorShape {
  int layers = 1;
  int kv_heads = 2;
  int head_dim = 16;
  int value_dim = 16;
  DType dtype = DType::kFloat32;
  int64_t max_tokens = 4096;
  // A sink + window session when window_tokens > 0.
  int64_t window_tokens = 0;
  int64_t sink_tokens = 0;
};

// The wire form of a session shape.
v1::SessionShape WireShape(const MirrorShape& shape);

// A wire tensor [rows, heads, dim] of `dtype` holding `values` (rounded).
v1::Tensor WireRows(DType dtype, int64_t rows, int64_t heads, int64_t dim,
                    absl::Span<const float> values);

// Floats of a wire tensor (any float dtype).
std::vector<float> WireFloats(const v1::Tensor& tensor);

// Seeded uniform values in [-1, 1).
std::vector<float> RandomValues(uint64_t seed, int64_t n);

class SessionMirror {
 public:
  SessionMirror() = default;
  explicit SessionMirror(const MirrorShape& shape);

  const MirrorShape& shape() const { return shape_; }
  int64_t tokens(int layer) const;

  // Appends rows [n, kv_heads, head_dim] / [n, kv_heads, value_dim] (as they
  // will be sent, before rounding).
  void Append(int layer, absl::Span<const float> keys,
              absl::Span<const float> values);
  // Whether the server truncates to `tokens`: a sink + window session only
  // while it holds what a query at `tokens` would see (it drops, at each
  // append, what the append's first token's window does not reach).
  bool CanTruncate(int64_t tokens) const;
  void Truncate(int64_t tokens);

  // The reference output [Lnew, Hq, Dv] (f32) of `query` [Lnew, Hq, D] over
  // `layer`, as AttendSessions defines it: the query rounded to the storage
  // dtype, bottom-right causal when `step.causal`, and the step's other
  // options (its mask parts, scale, soft-cap, sinks, relative bias; the
  // shapes and sequences of `step` are not read), and a sink + window
  // session's window and kept first tokens. With `weights`, also [Hq, Lnew,
  // tokens].
  absl::StatusOr<std::vector<float>> Reference(
      int layer, int64_t hq, absl::Span<const float> query,
      const PagedAttentionInputs& step,
      std::vector<float>* weights = nullptr) const;

 private:
  MirrorShape shape_;
  // Appends rows of `dim` floats to `to` as the storage dtype holds them
  // (rounded; an int8 row quantized with its scale and read back).
  void StoreRows(absl::Span<const float> rows, int64_t dim,
                 std::vector<float>* to) const;

  // Per layer: rows [tokens][kv_heads][dim], rounded to the storage dtype.
  std::vector<std::vector<float>> keys_, values_;
  // Per layer: the first token past the sinks a sink + window session still
  // holds.
  std::vector<int64_t> held_from_;
};

// A decode step of one session of layer 0 that appends one token: seeded
// random q [1, hq, D], k [1, Hkv, D], v [1, Hkv, Dv] (f32 on the wire) at the
// mirror's next position.
struct OneTokenStep {
  v1::AttendSessionsRequest request;
  std::vector<float> key, value;
};
OneTokenStep MakeOneTokenStep(const std::string& id,
                              const SessionMirror& mirror, int64_t hq,
                              uint64_t seed);

// Appends the step's token to `mirror` and checks `response` against it: the
// tokens, and every output element within `tolerance` of the reference. ""
// when it matches, else what differs.
std::string CheckOneTokenStep(const OneTokenStep& step,
                              const v1::AttendSessionsResponse& response,
                              double tolerance, SessionMirror* mirror);

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_SESSION_MIRROR_H_
