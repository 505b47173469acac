#ifndef ATTNSERVE_SERVER_KSERVE_SYSTEM_SHARED_MEMORY_H_
#define ATTNSERVE_SERVER_KSERVE_SYSTEM_SHARED_MEMORY_H_

// Triton's system shared-memory extension of the Open Inference Protocol
// (SystemSharedMemoryRegister, ...Unregister, ...Status) over the server's one
// SharedMemoryRegistry, the one attnserve.v1's SharedMemoryService uses: names
// are global to the server and the limits (--shared_memory_max_regions,
// --shared_memory_max_bytes) bound both protocols' registrations together.
// Unlike attnserve.v1's Register, a registration here is not held by a call:
// it lasts until SystemSharedMemoryUnregister or the server's shutdown, as in
// Triton. The calls' checks and answers, short of gRPC.

#include "absl/status/status.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/shared_memory_service.h"

namespace attnserve::server::kserve {

// Maps `key` (with or without its leading "/", as Triton's clients pass it)
// from `offset` for `byte_size` bytes under `name`. The registry's errors
// (docs/api.md "Shared memory": FAILED_PRECONDITION naming --shared_memory
// when off, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED),
// and INVALID_ARGUMENT for an offset or byte_size past 2^63 - 1.
absl::Status RegisterSystemRegion(
    const inference::SystemSharedMemoryRegisterRequest& request,
    SharedMemoryService* service);

// Unregisters `name`, or every region when it is empty (also attnserve.v1's,
// whose lease calls then end OK). A name not registered is OK, as in Triton:
// unregistering is idempotent. FAILED_PRECONDITION naming --shared_memory
// when off.
absl::Status UnregisterSystemRegions(
    const inference::SystemSharedMemoryUnregisterRequest& request,
    SharedMemoryService* service);

// Every region, or the one `name`s (NOT_FOUND when not registered), with key
// (as shm_open names it, "/attnserve_x"), offset and byte_size.
// FAILED_PRECONDITION naming --shared_memory when off.
absl::Status DescribeSystemRegions(
    const inference::SystemSharedMemoryStatusRequest& request,
    const SharedMemoryRegistry& registry,
    inference::SystemSharedMemoryStatusResponse* response);

}  // namespace attnserve::server::kserve

#endif  // ATTNSERVE_SERVER_KSERVE_SYSTEM_SHARED_MEMORY_H_
