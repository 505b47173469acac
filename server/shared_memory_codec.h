#ifndef ATTNSERVE_SERVER_SHARED_MEMORY_CODEC_H_
#define ATTNSERVE_SERVER_SHARED_MEMORY_CODEC_H_

// The SharedMemoryRefs of an Attend request resolved against the registry:
// the bytes of query, key and value read in place from the mapped regions,
// and the spans the output and weights are written into, each checked
// (region, bounds, alignment, size, overlaps). The regions are pinned for
// the call: an Unregister while it runs unmaps only after it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "server/shm/shared_memory_registry.h"

namespace attnserve::server {

// The regions one call uses and the spans it reads and writes.
class SharedMemoryUse {
 public:
  // The bytes of `tensor`'s shared_memory reference, to read in place.
  // `element_size` is its dtype's. Errors name `field` ("query"):
  // FailedPrecondition naming --shared_memory when `registry` is null or off,
  // or for a region that shrank; InvalidArgument when data is set as well,
  // for a negative offset or byte_size, an offset not a multiple of the
  // element size, or a span past the region's end; NotFound for a region not
  // registered.
  absl::StatusOr<absl::string_view> Input(absl::string_view field,
                                          const v1::Tensor& tensor,
                                          size_t element_size,
                                          SharedMemoryRegistry* registry);

  // The span of `ref` to write `bytes` bytes into: Input's checks, and
  // InvalidArgument when ref.byte_size is not `bytes` or the span overlaps
  // an input's or another output's.
  absl::StatusOr<char*> Output(absl::string_view field,
                               const v1::SharedMemoryRef& ref, int64_t bytes,
                               size_t element_size,
                               SharedMemoryRegistry* registry);

  bool empty() const { return regions_.empty(); }

  // After the kernel: FailedPrecondition when a region shrank meanwhile (the
  // SIGBUS guard gave it zero pages, so the results are not the client's);
  // counts the call on each region and the registry.
  absl::Status Finish() const;

 private:
  struct Span {
    const SharedRegion* region;
    int64_t begin, end;
    std::string field;
  };
  // `field` names the tensor in overlap messages, `ref_field` the reference
  // in the others ("query.shared_memory", "output_shared_memory").
  absl::StatusOr<Span> Resolve(absl::string_view field,
                               absl::string_view ref_field,
                               const v1::SharedMemoryRef& ref,
                               size_t element_size,
                               SharedMemoryRegistry* registry);

  SharedMemoryRegistry* registry_ = nullptr;
  std::vector<std::shared_ptr<SharedRegion>> regions_;
  std::vector<Span> spans_;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SHARED_MEMORY_CODEC_H_
