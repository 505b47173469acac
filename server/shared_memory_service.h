#ifndef ATTNSERVE_SERVER_SHARED_MEMORY_SERVICE_H_
#define ATTNSERVE_SERVER_SHARED_MEMORY_SERVICE_H_

// SharedMemoryService (shared_memory.proto) on gRPC's callback API: clients
// register POSIX shared-memory regions in a SharedMemoryRegistry for Attend
// tensors to refer to. A registration lives as long as its Register call (the
// lease): Unregister ends the call OK; a client that cancels it, dies or
// loses its connection ends it CANCELLED, and the region goes with it.
// Everything here is bookkeeping and runs on gRPC's threads.

#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "attnserve/v1/shared_memory.grpc.pb.h"
#include "server/metrics.h"
#include "server/rpc/admission.h"
#include "server/shm/shared_memory_registry.h"

namespace attnserve::server {

class SharedMemoryService final
    : public v1::SharedMemoryService::CallbackService {
 public:
  // `admission`, `registry` and `metrics` must outlive the service; so must
  // gRPC's server (its Shutdown ends the open leases).
  SharedMemoryService(const Admission* admission,
                      SharedMemoryRegistry* registry, Metrics* metrics);
  ~SharedMemoryService() override;

  grpc::ServerWriteReactor<v1::SharedMemoryLease>* Register(
      grpc::CallbackServerContext* context,
      const v1::RegisterSharedMemoryRequest* request) override;
  grpc::ServerUnaryReactor* Unregister(
      grpc::CallbackServerContext* context,
      const v1::UnregisterSharedMemoryRequest* request,
      v1::UnregisterSharedMemoryResponse* response) override;
  grpc::ServerUnaryReactor* Status(
      grpc::CallbackServerContext* context,
      const v1::SharedMemoryStatusRequest* request,
      v1::SharedMemoryStatusResponse* response) override;

  // Unregisters `name`, whichever protocol registered it (names are global
  // to the server): the region leaves the registry and, when an
  // attnserve.v1 Register call leases it, that call ends OK. The registry's
  // errors otherwise (NotFound, FailedPrecondition when off). The one way
  // out of the registry but a lease's own end, so that no lease outlives
  // its region.
  absl::Status UnregisterRegion(absl::string_view name);

  SharedMemoryRegistry* registry() const { return registry_; }

 private:
  class Lease;
  // What outlives a lease's reactor: whoever ends it first (Unregister, the
  // client's cancellation) finishes the call, exactly once.
  struct LeaseEnd;

  const Admission* const admission_;
  SharedMemoryRegistry* const registry_;
  Metrics* const metrics_;
  // Held across a registration and its lease entry (and an unregistration
  // and its lookup), so that the two never come apart.
  absl::Mutex mu_;
  std::map<const SharedRegion*, std::shared_ptr<LeaseEnd>> leases_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SHARED_MEMORY_SERVICE_H_
