#include "client/shared_memory.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "wire/dtype.h"

namespace attnserve::client {
namespace {

constexpr int64_t kAlignment = 64;

int64_t AlignUp(int64_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

int64_t Elements(const v1::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape()) n *= d;
  return n;
}

// Bytes of the output and of the weights the server will write: [B, Hq, Lq,
// Dv] of the output dtype and [B, Hq, Lq, Lk] of f32 (query rows from the
// query, Dv and Lk from the value, in either layout). 0 when the request's
// shapes are not rank 4: the server then refuses it with the reason.
std::pair<int64_t, int64_t> OutputBytes(const v1::AttendRequest& request) {
  const v1::Tensor& q = request.query();
  const v1::Tensor& v = request.value();
  if (q.shape_size() != 4 || v.shape_size() != 4 || q.shape(3) <= 0) {
    return {0, 0};
  }
  const int64_t rows = Elements(q) / q.shape(3);
  const int64_t keys = request.layout() == v1::BLHD ? v.shape(1) : v.shape(2);
  const v1::DataType out_dtype =
      request.output_dtype() == v1::DATA_TYPE_UNSPECIFIED
          ? q.dtype()
          : request.output_dtype();
  return {
      rows * v.shape(3) * static_cast<int64_t>(wire::ElementSize(out_dtype)),
      request.return_weights() ? rows * keys * 4 : 0};
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryPlacement>>
SharedMemoryPlacement::Create(const std::shared_ptr<grpc::Channel>& channel,
                              const ConnectionOptions& connection,
                              v1::AttendRequest* request) {
  v1::Tensor* inputs[] = {request->mutable_query(), request->mutable_key(),
                          request->mutable_value()};
  const bool present[] = {request->has_query(), request->has_key(),
                          request->has_value()};
  int64_t offsets[3] = {0, 0, 0};
  int64_t size = 0;
  for (int i = 0; i < 3; ++i) {
    if (!present[i]) continue;
    offsets[i] = size;
    size = AlignUp(size + static_cast<int64_t>(inputs[i]->data().size()));
  }
  const auto [output_bytes, weights_bytes] = OutputBytes(*request);
  const int64_t output_offset = size;
  size = AlignUp(size + output_bytes);
  const int64_t weights_offset = size;
  size = AlignUp(size + weights_bytes);
  size = std::max<int64_t>(size, kAlignment);

  std::unique_ptr<SharedMemoryPlacement> p(new SharedMemoryPlacement());
  ASSIGN_OR_RETURN(p->region_,
                   RegisteredRegion::Create(channel, connection, size));
  const std::string& name = p->region_->name();
  char* data = p->region_->data();
  for (int i = 0; i < 3; ++i) {
    if (!present[i]) continue;
    v1::Tensor* t = inputs[i];
    std::memcpy(data + offsets[i], t->data().data(), t->data().size());
    v1::SharedMemoryRef* ref = t->mutable_shared_memory();
    ref->set_region(name);
    ref->set_offset(offsets[i]);
    ref->set_byte_size(static_cast<int64_t>(t->data().size()));
    t->clear_data();
  }
  if (output_bytes > 0) {
    v1::SharedMemoryRef* ref = request->mutable_output_shared_memory();
    ref->set_region(name);
    ref->set_offset(output_offset);
    ref->set_byte_size(output_bytes);
  }
  if (weights_bytes > 0) {
    v1::SharedMemoryRef* ref = request->mutable_weights_shared_memory();
    ref->set_region(name);
    ref->set_offset(weights_offset);
    ref->set_byte_size(weights_bytes);
  }
  return p;
}

absl::Status SharedMemoryPlacement::CopyOut(absl::string_view name,
                                            v1::Tensor* tensor) const {
  if (!tensor->has_shared_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: the response carries the ", name,
        "'s bytes instead of a reference to region \"", region_->name(), "\""));
  }
  const v1::SharedMemoryRef& ref = tensor->shared_memory();
  if (ref.region() != region_->name() || ref.offset() < 0 ||
      ref.byte_size() < 0 || ref.offset() > region_->size() ||
      ref.byte_size() > region_->size() - ref.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: the response refers to bytes [", ref.offset(), ", +",
        ref.byte_size(), ") of region \"", ref.region(),
        "\", not a span of attnctl's \"", region_->name(), "\""));
  }
  tensor->set_data(region_->data() + ref.offset(),
                   static_cast<size_t>(ref.byte_size()));
  tensor->clear_shared_memory();
  return absl::OkStatus();
}

absl::Status SharedMemoryPlacement::CollectOutputs(
    v1::AttendResponse* response) const {
  if (absl::Status s = CopyOut("output", response->mutable_output()); !s.ok()) {
    return s;
  }
  if (!response->has_weights()) return absl::OkStatus();
  return CopyOut("weights", response->mutable_weights());
}

}  // namespace attnserve::client
