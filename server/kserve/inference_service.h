#ifndef ATTNSERVE_SERVER_KSERVE_INFERENCE_SERVICE_H_
#define ATTNSERVE_SERVER_KSERVE_INFERENCE_SERVICE_H_

// inference.GRPCInferenceService, the Open Inference Protocol (KServe v2) with
// Triton's ModelConfig and ModelStatistics, on the server's port
// (docs/api.md, "Open Inference Protocol"). Handlers only translate:
// ModelInfer becomes the native request (infer_codec.h) and goes through
// AttentionService's own decode, limits, scheduler and kernels; admission
// (draining, bearer token) is the server's shared Admission.

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/attention_service.h"
#include "server/kserve/infer_codec.h"
#include "server/kserve/model_statistics.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/rpc/admission.h"
#include "server/shared_memory_service.h"
#include "server/work_tracker.h"

namespace attnserve::server::kserve {

struct InferenceServiceOptions {
  // ServerMetadata's version (default "dev").
  std::string version = "dev";
  // The hosted models; null (default) = none. Must outlive the service.
  const ModelRegistry* models = nullptr;
  // Cancels ModelInfer calls whose client does not take the answer
  // (--send_timeout); null = none. Must outlive the service.
  SendWatchdog* watchdog = nullptr;
  // The system shared-memory RPCs' registrations (the server's one registry,
  // behind attnserve.v1's SharedMemoryService); null = those RPCs answer
  // FAILED_PRECONDITION naming --shared_memory. Must outlive the service.
  SharedMemoryService* shared_memory = nullptr;
};

class InferenceService final
    : public inference::GRPCInferenceService::CallbackService {
 public:
  // `admission`, `native` and `metrics` must outlive the service.
  InferenceService(InferenceServiceOptions options, const Admission* admission,
                   AttentionService* native, Metrics* metrics);
  ~InferenceService() override;
  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // Waits until no call is in flight, or until `deadline`. True when idle.
  bool WaitUntilIdle(absl::Time deadline) {
    return work_.WaitUntilIdle(deadline);
  }

  // live = true. No token needed (a probe).
  grpc::ServerUnaryReactor* ServerLive(
      grpc::CallbackServerContext* context,
      const inference::ServerLiveRequest* request,
      inference::ServerLiveResponse* response) override;
  // ready = false once draining, as grpc.health.v1 goes NOT_SERVING. No token
  // needed (a probe).
  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context,
      const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;
  // ready = the model and version are served and the server is not
  // draining. Needs the token.
  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;
  // The calls below need admission (not draining, the token); an unknown
  // model or version is NOT_FOUND listing the served ones.
  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(
      grpc::CallbackServerContext* context,
      const inference::ModelConfigRequest* request,
      inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(
      grpc::CallbackServerContext* context,
      const inference::ModelStatisticsRequest* request,
      inference::ModelStatisticsResponse* response) override;
  // Triton's system shared memory (system_shared_memory.h): regions that
  // ModelInfer inputs and outputs name in their "shared_memory_region"
  // parameters. Registrations last until Unregister: no lease.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  // The native Attend (model "attention") or AttendModel (a hosted model).
  grpc::ServerUnaryReactor* ModelInfer(
      grpc::CallbackServerContext* context,
      const inference::ModelInferRequest* request,
      inference::ModelInferResponse* response) override;
  // ModelInfer's messages on one stream, answered one at a time in order; a
  // failed message is answered with error_message and the stream goes on.
  grpc::ServerBidiReactor<inference::ModelInferRequest,
                          inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

 private:
  class InferMessages;
  class InferAllocator;
  class StreamReactor;

  // One inference's native call and answer.
  struct InferState {
    NativeCall call;
    v1::AttendResponse native_response;
    // The model's index in interfaces_; -1 until it is known.
    int model_index = -1;
  };

  // Finds the model, builds the native request (moving `request`'s raw
  // contents) and submits it; `done` is called exactly once, inline on an
  // error, with `state->native_response` filled when OK. `request` and
  // `state` must stay valid until then.
  void SubmitInfer(grpc::CallbackServerContext* context,
                   inference::ModelInferRequest& request, InferState* state,
                   absl::Time received, std::shared_ptr<QueueTicket> ticket,
                   absl::AnyInvocable<void(absl::Status)> done);
  // The metrics and statistics of one answered inference.
  void RecordInfer(Method method, const inference::ModelInferRequest& request,
                   const InferState& state, const absl::Status& status,
                   absl::Time received, int64_t request_bytes,
                   int64_t response_bytes);

  // The index of the model in interfaces_, or NotFound naming the served
  // models (or versions).
  absl::StatusOr<int> FindModel(absl::string_view name,
                                absl::string_view version) const;
  // Admission, then FindModel: the model a call about one model describes.
  absl::StatusOr<const ModelInterface*> AdmittedModel(
      const grpc::CallbackServerContext& context, absl::string_view name,
      absl::string_view version) const;

  // FAILED_PRECONDITION naming --shared_memory when there is no registry or
  // it is off, else OK.
  absl::Status SharedMemoryOn() const;

  // Answers a small call at once and counts it.
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                   Method method, absl::Time received,
                                   const google::protobuf::Message& request,
                                   const google::protobuf::Message& response,
                                   const absl::Status& status);

  const InferenceServiceOptions options_;
  const Admission* const admission_;
  AttentionService* const native_;
  Metrics* const metrics_;
  const std::vector<ModelInterface> interfaces_;
  ModelStatisticsTable statistics_;
  WorkTracker work_;
  const std::unique_ptr<InferAllocator> allocator_;
};

}  // namespace attnserve::server::kserve

#endif  // ATTNSERVE_SERVER_KSERVE_INFERENCE_SERVICE_H_
