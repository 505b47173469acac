#include "server/kserve/system_shared_memory.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace attnserve::server::kserve {
namespace {

// The protocol's sizes are uint64; the registry's int64.
absl::StatusOr<int64_t> Signed(absl::string_view field, uint64_t value) {
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value, " is larger than 2^63 - 1 bytes"));
  }
  return static_cast<int64_t>(value);
}

void Describe(const SharedRegion& region,
              inference::SystemSharedMemoryStatusResponse::RegionStatus* out) {
  out->set_name(region.name());
  out->set_key(absl::StrCat("/", region.key()));
  out->set_offset(static_cast<uint64_t>(region.offset()));
  out->set_byte_size(static_cast<uint64_t>(region.size()));
}

}  // namespace

absl::Status RegisterSystemRegion(
    const inference::SystemSharedMemoryRegisterRequest& request,
    SharedMemoryService* service) {
  SharedMemoryRegistry* registry = service->registry();
  RETURN_IF_ERROR(registry->CheckEnabled());
  ASSIGN_OR_RETURN(const int64_t offset, Signed("offset", request.offset()));
  ASSIGN_OR_RETURN(const int64_t byte_size,
                   Signed("byte_size", request.byte_size()));
  // Triton's clients name the object as shm_open does, "/name"; the
  // registry's keys go without the slash. Only one: "//x" stays refused.
  const absl::string_view key = absl::StripPrefix(request.key(), "/");
  return registry->Register(request.name(), key, byte_size, offset).status();
}

absl::Status UnregisterSystemRegions(
    const inference::SystemSharedMemoryUnregisterRequest& request,
    SharedMemoryService* service) {
  RETURN_IF_ERROR(service->registry()->CheckEnabled());
  if (!request.name().empty()) {
    const absl::Status status = service->UnregisterRegion(request.name());
    return absl::IsNotFound(status) ? absl::OkStatus() : status;
  }
  for (const std::shared_ptr<SharedRegion>& region :
       service->registry()->List()) {
    // Another call may have unregistered it meanwhile: gone either way.
    const absl::Status status = service->UnregisterRegion(region->name());
    if (!status.ok() && !absl::IsNotFound(status)) return status;
  }
  return absl::OkStatus();
}

absl::Status DescribeSystemRegions(
    const inference::SystemSharedMemoryStatusRequest& request,
    const SharedMemoryRegistry& registry,
    inference::SystemSharedMemoryStatusResponse* response) {
  RETURN_IF_ERROR(registry.CheckEnabled());
  auto& regions = *response->mutable_regions();
  if (request.name().empty()) {
    for (const std::shared_ptr<SharedRegion>& region : registry.List()) {
      Describe(*region, &regions[region->name()]);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      registry.Find(request.name());
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat("name: ", region.status().message()));
  }
  Describe(**region, &regions[(*region)->name()]);
  return absl::OkStatus();
}

}  // namespace attnserve::server::kserve
