#include "server/shared_memory_codec.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace attnserve::server {

absl::StatusOr<SharedMemoryUse::Span> SharedMemoryUse::Resolve(
    absl::string_view field, absl::string_view ref_field,
    const v1::SharedMemoryRef& ref, size_t element_size,
    SharedMemoryRegistry* registry) {
  if (registry == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(ref_field,
                     ": shared memory is off on this server (start it "
                     "with --shared_memory)"));
  }
  if (absl::Status enabled = registry->CheckEnabled(); !enabled.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ref_field, ": ", enabled.message()));
  }
  std::shared_ptr<SharedRegion> region;
  for (const std::shared_ptr<SharedRegion>& held : regions_) {
    if (held->name() == ref.region()) region = held;
  }
  if (region == nullptr) {
    absl::StatusOr<std::shared_ptr<SharedRegion>> found =
        registry->Find(ref.region());
    if (!found.ok()) {
      return absl::Status(
          found.status().code(),
          absl::StrCat(ref_field, ".region: ", found.status().message()));
    }
    region = *std::move(found);
    registry_ = registry;
    if (absl::Status intact = region->Check(); !intact.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(ref_field, ": ", intact.message()));
    }
    regions_.push_back(region);
  }
  const int64_t offset = ref.offset();
  const int64_t size = ref.byte_size();
  if (offset < 0 || size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ref_field, ": offset ", offset, " and byte_size ", size,
                     " must not be negative"));
  }
  // The element's place in the object, not only in the region: a region
  // registered at an odd offset of its object (the Open Inference Protocol
  // allows any) moves every element with it.
  if ((region->offset() + offset) % static_cast<int64_t>(element_size) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ref_field, ".offset: ", offset,
                     region->offset() == 0
                         ? ""
                         : absl::StrCat(" (byte ", region->offset() + offset,
                                        " of the object: the region starts at ",
                                        region->offset(), ")"),
                     " is not a multiple of the element size ", element_size,
                     " (misaligned)"));
  }
  if (offset > region->size() || size > region->size() - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(ref_field, ": bytes [", offset, ", ", offset, " + ", size,
                     ") lie past the end of region \"", region->name(), "\" (",
                     region->size(), " bytes)"));
  }
  return Span{region.get(), offset, offset + size, std::string(field)};
}

absl::StatusOr<absl::string_view> SharedMemoryUse::Input(
    absl::string_view field, const v1::Tensor& tensor, size_t element_size,
    SharedMemoryRegistry* registry) {
  if (!tensor.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": data (", tensor.data().size(),
                     " bytes) and shared_memory are both set (send one)"));
  }
  ASSIGN_OR_RETURN(Span span,
                   Resolve(field, absl::StrCat(field, ".shared_memory"),
                           tensor.shared_memory(), element_size, registry));
  spans_.push_back(span);
  return absl::string_view(span.region->data() + span.begin,
                           static_cast<size_t>(span.end - span.begin));
}

absl::StatusOr<char*> SharedMemoryUse::Output(absl::string_view field,
                                              const v1::SharedMemoryRef& ref,
                                              int64_t bytes,
                                              size_t element_size,
                                              SharedMemoryRegistry* registry) {
  ASSIGN_OR_RETURN(Span span,
                   Resolve(field, field, ref, element_size, registry));
  if (ref.byte_size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".byte_size: ", ref.byte_size(), " differs from the ", bytes,
        " bytes of the ", absl::StripSuffix(field, "_shared_memory")));
  }
  for (const Span& other : spans_) {
    if (other.region == span.region && span.begin < other.end &&
        other.begin < span.end) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": bytes [", span.begin, ", ", span.end, ") of region \"",
          span.region->name(), "\" overlap those of ", other.field, " [",
          other.begin, ", ", other.end, ")"));
    }
  }
  spans_.push_back(span);
  return span.region->data() + span.begin;
}

absl::Status SharedMemoryUse::Finish() const {
  for (const std::shared_ptr<SharedRegion>& region : regions_) {
    RETURN_IF_ERROR(region->Check());
  }
  for (const std::shared_ptr<SharedRegion>& region : regions_) {
    region->CountCall();
  }
  if (registry_ != nullptr) registry_->CountCall();
  return absl::OkStatus();
}

}  // namespace attnserve::server
