#include "server/shared_memory_service.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "server/log.h"
#include "server/rpc/status_util.h"

namespace attnserve::server {
namespace {

void Describe(const SharedRegion& region, v1::SharedMemoryRegion* out) {
  out->set_name(region.name());
  out->set_key(region.key());
  out->set_byte_size(region.size());
  out->set_calls(region.calls());
  out->set_offset(region.offset());
}

}  // namespace

struct SharedMemoryService::LeaseEnd {
  explicit LeaseEnd(grpc::ServerWriteReactor<v1::SharedMemoryLease>* call)
      : reactor(call) {}

  // Finishes the call with `status` unless it was finished already.
  void Finish(const absl::Status& status) {
    grpc::ServerWriteReactor<v1::SharedMemoryLease>* call;
    {
      absl::MutexLock lock(&mu);
      call = std::exchange(reactor, nullptr);
    }
    // Alive until it is finished, so until here; not touched after.
    if (call != nullptr) call->Finish(ToGrpcStatus(status));
  }

  absl::Mutex mu;
  grpc::ServerWriteReactor<v1::SharedMemoryLease>* reactor ABSL_GUARDED_BY(mu);
};

class SharedMemoryService::Lease final
    : public grpc::ServerWriteReactor<v1::SharedMemoryLease> {
 public:
  Lease(SharedMemoryService* service, grpc::CallbackServerContext* context,
        const v1::RegisterSharedMemoryRequest& request)
      : service_(service),
        received_(absl::Now()),
        end_(std::make_shared<LeaseEnd>(this)) {
    absl::Status status = service_->admission_->Admit(*context);
    if (status.ok()) {
      // Registered and leased at once: an Unregister in between would find
      // the region but not the lease to end.
      absl::MutexLock lock(&service_->mu_);
      absl::StatusOr<std::shared_ptr<SharedRegion>> region =
          service_->registry_->Register(request.name(), request.key(),
                                        request.byte_size());
      if (region.ok()) {
        region_ = *std::move(region);
        service_->leases_[region_.get()] = end_;
      } else {
        status = region.status();
      }
    }
    Record(status, request.ByteSizeLong());
    if (!status.ok()) {
      end_->Finish(status);
      return;
    }
    ATTNSERVE_LOG(LogLevel::kInfo, "shared memory region \"", region_->name(),
                  "\" registered: \"/", region_->key(), "\", ", region_->size(),
                  " bytes");
    Describe(*region_, message_.mutable_region());
    // Not after a Finish: an Unregister may already have ended the lease.
    absl::MutexLock lock(&end_->mu);
    if (end_->reactor != nullptr) StartWrite(&message_);
  }

  // The lease stays open after its one message.
  void OnWriteDone(bool ok) override {}

  void OnCancel() override {
    Release();
    end_->Finish(absl::CancelledError("the registration's call ended"));
  }

  void OnDone() override {
    Release();
    delete this;
  }

 private:
  void Record(const absl::Status& status, size_t request_bytes) {
    service_->metrics_->RecordRequest(
        Method::kRegisterSharedMemory, ToGrpcStatus(status).error_code(),
        absl::ToDoubleSeconds(absl::Now() - received_),
        static_cast<int64_t>(request_bytes), 0);
  }

  // Out of the registry (unless Unregister took it out already) and out of
  // the service's leases; calls still using the region keep it mapped.
  void Release() {
    if (region_ == nullptr) return;
    {
      absl::MutexLock lock(&service_->mu_);
      service_->registry_->Remove(region_.get());
      auto it = service_->leases_.find(region_.get());
      if (it != service_->leases_.end() && it->second == end_) {
        service_->leases_.erase(it);
      }
    }
    ATTNSERVE_LOG(LogLevel::kInfo, "shared memory region \"", region_->name(),
                  "\" released");
    region_.reset();
  }

  SharedMemoryService* const service_;
  const absl::Time received_;
  const std::shared_ptr<LeaseEnd> end_;
  std::shared_ptr<SharedRegion> region_;
  v1::SharedMemoryLease message_;
};

SharedMemoryService::SharedMemoryService(const Admission* admission,
                                         SharedMemoryRegistry* registry,
                                         Metrics* metrics)
    : admission_(admission), registry_(registry), metrics_(metrics) {}

SharedMemoryService::~SharedMemoryService() = default;

grpc::ServerWriteReactor<v1::SharedMemoryLease>* SharedMemoryService::Register(
    grpc::CallbackServerContext* context,
    const v1::RegisterSharedMemoryRequest* request) {
  return new Lease(this, context, *request);
}

absl::Status SharedMemoryService::UnregisterRegion(absl::string_view name) {
  std::shared_ptr<LeaseEnd> end;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<std::shared_ptr<SharedRegion>> region =
        registry_->Unregister(name);
    if (!region.ok()) return region.status();
    auto it = leases_.find(region->get());
    if (it != leases_.end()) end = it->second;
  }
  if (end != nullptr) end->Finish(absl::OkStatus());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* SharedMemoryService::Unregister(
    grpc::CallbackServerContext* context,
    const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) status = UnregisterRegion(request->name());
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(Method::kUnregisterSharedMemory,
                          grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          static_cast<int64_t>(request->ByteSizeLong()), 0);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc_status);
  return reactor;
}

grpc::ServerUnaryReactor* SharedMemoryService::Status(
    grpc::CallbackServerContext* context,
    const v1::SharedMemoryStatusRequest* request,
    v1::SharedMemoryStatusResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) status = registry_->CheckEnabled();
  if (status.ok()) {
    const SharedMemoryOptions& options = registry_->options();
    response->set_prefix(options.prefix);
    response->set_max_regions(options.max_regions);
    response->set_max_bytes(options.max_bytes);
    if (request->name().empty()) {
      for (const std::shared_ptr<SharedRegion>& region : registry_->List()) {
        Describe(*region, response->add_regions());
      }
    } else {
      absl::StatusOr<std::shared_ptr<SharedRegion>> region =
          registry_->Find(request->name());
      if (region.ok()) {
        Describe(**region, response->add_regions());
      } else {
        status =
            absl::Status(region.status().code(),
                         absl::StrCat("name: ", region.status().message()));
      }
    }
  }
  if (!status.ok()) response->Clear();
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(Method::kSharedMemoryStatus, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          static_cast<int64_t>(request->ByteSizeLong()),
                          static_cast<int64_t>(response->ByteSizeLong()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc_status);
  return reactor;
}

}  // namespace attnserve::server
