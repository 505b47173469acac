#include "server/kserve/inference_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "inference/model_config.pb.h"
#include "server/kserve/system_shared_memory.h"
#include "server/log.h"
#include "server/rpc/arena_messages.h"
#include "server/rpc/status_util.h"
#include "server/tracked_unary_reactor.h"
#include "wire/dtype.h"
#include "wire/v2_names.h"

namespace attnserve::server::kserve {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;

constexpr char kServerName[] = "attnserve";
constexpr char kPlatform[] = "attnserve";

// Triton's configuration enum spells the protocol's datatype names with a
// prefix, so the one name table (wire/dtype.h) serves both.
inference::DataType ConfigDataType(v1::DataType dtype) {
  inference::DataType out = inference::TYPE_INVALID;
  inference::DataType_Parse(absl::StrCat("TYPE_", wire::V2DataTypeName(dtype)),
                            &out);
  return out;
}

void Describe(const TensorSpec& spec,
              inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(wire::V2DataTypeName(spec.datatypes.front()));
  for (int64_t d : spec.shape) out->add_shape(d);
}

}  // namespace

// The messages of one ModelInfer call, on the call's arena as the native
// unary calls' (server/rpc/arena_messages.h), with the native request and
// response it becomes. gRPC hands the handler its request as const; the
// holder is this service's own (InferAllocator), so the handler may move the
// request's raw_input_contents into the native request instead of copying
// them (std::string swaps, which the arena does not affect), and the native
// messages live exactly as long as the call.
class InferenceService::InferMessages
    : public grpc::MessageHolder<ModelInferRequest, ModelInferResponse> {
 public:
  InferMessages() : request_(arena_.Create<ModelInferRequest>()) {
    set_request(request_);
    set_response(arena_.Create<ModelInferResponse>());
  }
  void Release() override { delete this; }

  ModelInferRequest& mutable_request() { return *request_; }
  InferState state;

 private:
  CallArena arena_;
  ModelInferRequest* const request_;
};

class InferenceService::InferAllocator
    : public grpc::MessageAllocator<ModelInferRequest, ModelInferResponse> {
 public:
  grpc::MessageHolder<ModelInferRequest, ModelInferResponse>* AllocateMessages()
      override {
    return new InferMessages();
  }
};

InferenceService::InferenceService(InferenceServiceOptions options,
                                   const Admission* admission,
                                   AttentionService* native, Metrics* metrics)
    : options_(std::move(options)),
      admission_(admission),
      native_(native),
      metrics_(metrics),
      interfaces_(ModelInterfaces(options_.models)),
      statistics_(static_cast<int>(interfaces_.size())),
      work_(metrics),
      allocator_(std::make_unique<InferAllocator>()) {
  SetMessageAllocatorFor_ModelInfer(allocator_.get());
  if (options_.models != nullptr &&
      options_.models->Find(wire::kV2AttentionModel) != nullptr) {
    ATTNSERVE_LOG(LogLevel::kWarning, "hosted model \"",
                  wire::kV2AttentionModel,
                  "\" is reachable through AttendModel only: over the Open "
                  "Inference Protocol that name is the Attend call");
  }
}

InferenceService::~InferenceService() = default;

absl::StatusOr<int> InferenceService::FindModel(
    absl::string_view name, absl::string_view version) const {
  return kserve::FindModel(interfaces_, name, version);
}

absl::StatusOr<const ModelInterface*> InferenceService::AdmittedModel(
    const grpc::CallbackServerContext& context, absl::string_view name,
    absl::string_view version) const {
  RETURN_IF_ERROR(admission_->Admit(context));
  ASSIGN_OR_RETURN(const int index, FindModel(name, version));
  return &interfaces_[index];
}

grpc::ServerUnaryReactor* InferenceService::Answer(
    grpc::CallbackServerContext* context, Method method, absl::Time received,
    const google::protobuf::Message& request,
    const google::protobuf::Message& response, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const grpc::Status grpc_status = ToGrpcStatus(status);
  metrics_->RecordRequest(method, grpc_status.error_code(),
                          absl::ToDoubleSeconds(absl::Now() - received),
                          static_cast<int64_t>(request.ByteSizeLong()),
                          static_cast<int64_t>(response.ByteSizeLong()));
  reactor->Finish(grpc_status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(
    grpc::CallbackServerContext* context,
    const inference::ServerLiveRequest* request,
    inference::ServerLiveResponse* response) {
  const absl::Time received = absl::Now();
  response->set_live(true);
  return Answer(context, Method::kServerLive, received, *request, *response,
                absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(
    grpc::CallbackServerContext* context,
    const inference::ServerReadyRequest* request,
    inference::ServerReadyResponse* response) {
  const absl::Time received = absl::Now();
  response->set_ready(!admission_->draining());
  return Answer(context, Method::kServerReady, received, *request, *response,
                absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  const absl::Time received = absl::Now();
  const absl::Status status = admission_->Authenticate(*context);
  if (status.ok()) {
    response->set_ready(!admission_->draining() &&
                        FindModel(request->name(), request->version()).ok());
  }
  return Answer(context, Method::kModelReady, received, *request, *response,
                status);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest* request,
    inference::ServerMetadataResponse* response) {
  const absl::Time received = absl::Now();
  const absl::Status status = admission_->Admit(*context);
  if (status.ok()) {
    response->set_name(kServerName);
    response->set_version(options_.version);
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
    if (SharedMemoryOn().ok()) {
      response->add_extensions("system_shared_memory");
    }
  }
  return Answer(context, Method::kServerMetadata, received, *request, *response,
                status);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  const absl::Time received = absl::Now();
  const absl::StatusOr<const ModelInterface*> model =
      AdmittedModel(*context, request->name(), request->version());
  if (model.ok()) {
    response->set_name((*model)->name);
    response->add_versions(kModelVersion);
    response->set_platform(kPlatform);
    for (const TensorSpec& s : (*model)->inputs) {
      Describe(s, response->add_inputs());
    }
    for (const TensorSpec& s : (*model)->outputs) {
      Describe(s, response->add_outputs());
    }
  }
  return Answer(context, Method::kModelMetadata, received, *request, *response,
                model.status());
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context,
    const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  const absl::Time received = absl::Now();
  const absl::StatusOr<const ModelInterface*> found =
      AdmittedModel(*context, request->name(), request->version());
  if (found.ok()) {
    const ModelInterface& model = **found;
    inference::ModelConfig* config = response->mutable_config();
    config->set_name(model.name);
    config->set_platform(kPlatform);
    config->set_backend(kPlatform);
    // Batch is the tensors' own first dimension; no batching is added.
    config->set_max_batch_size(0);
    for (const TensorSpec& s : model.inputs) {
      inference::ModelInput* input = config->add_input();
      input->set_name(s.name);
      input->set_data_type(ConfigDataType(s.datatypes.front()));
      for (int64_t d : s.shape) input->add_dims(d);
      input->set_optional(s.optional);
    }
    for (const TensorSpec& s : model.outputs) {
      inference::ModelOutput* output = config->add_output();
      output->set_name(s.name);
      output->set_data_type(ConfigDataType(s.datatypes.front()));
      for (int64_t d : s.shape) output->add_dims(d);
    }
    config->mutable_model_transaction_policy()->set_decoupled(false);
  }
  return Answer(context, Method::kModelConfig, received, *request, *response,
                found.status());
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  std::vector<int> models;
  if (status.ok() && request->name().empty()) {
    if (!request->version().empty() && request->version() != kModelVersion) {
      status = absl::NotFoundError(
          absl::StrCat("no model has version \"", request->version(),
                       "\" (versions: ", kModelVersion, ")"));
    }
    for (size_t i = 0; i < interfaces_.size(); ++i) {
      models.push_back(static_cast<int>(i));
    }
  } else if (status.ok()) {
    const absl::StatusOr<int> index =
        FindModel(request->name(), request->version());
    status = index.status();
    if (index.ok()) models.push_back(*index);
  }
  if (status.ok()) {
    for (int m : models) {
      inference::ModelStatistics* stats = response->add_model_stats();
      stats->set_name(interfaces_[m].name);
      stats->set_version(kModelVersion);
      statistics_.Fill(m, stats);
    }
  }
  return Answer(context, Method::kModelStatistics, received, *request,
                *response, status);
}

absl::Status InferenceService::SharedMemoryOn() const {
  if (options_.shared_memory == nullptr) {
    return absl::FailedPreconditionError(
        "shared memory is off on this server (start it with --shared_memory)");
  }
  return options_.shared_memory->registry()->CheckEnabled();
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) status = SharedMemoryOn();
  if (status.ok()) {
    status = DescribeSystemRegions(
        *request, *options_.shared_memory->registry(), response);
  }
  if (!status.ok()) response->Clear();
  return Answer(context, Method::kSystemSharedMemoryStatus, received, *request,
                *response, status);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) status = SharedMemoryOn();
  if (status.ok()) {
    status = RegisterSystemRegion(*request, options_.shared_memory);
  }
  if (status.ok()) {
    ATTNSERVE_LOG(LogLevel::kInfo, "shared memory region \"", request->name(),
                  "\" registered over the Open Inference Protocol: \"",
                  request->key(), "\" from byte ", request->offset(), ", ",
                  request->byte_size(), " bytes");
  }
  return Answer(context, Method::kSystemSharedMemoryRegister, received,
                *request, *response, status);
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* response) {
  const absl::Time received = absl::Now();
  absl::Status status = admission_->Admit(*context);
  if (status.ok()) status = SharedMemoryOn();
  if (status.ok()) {
    status = UnregisterSystemRegions(*request, options_.shared_memory);
  }
  if (status.ok()) {
    ATTNSERVE_LOG(LogLevel::kInfo, "shared memory ",
                  request->name().empty()
                      ? std::string("regions")
                      : absl::StrCat("region \"", request->name(), "\""),
                  " unregistered over the Open Inference Protocol");
  }
  return Answer(context, Method::kSystemSharedMemoryUnregister, received,
                *request, *response, status);
}

void InferenceService::SubmitInfer(
    grpc::CallbackServerContext* context, ModelInferRequest& request,
    InferState* state, absl::Time received, std::shared_ptr<QueueTicket> ticket,
    absl::AnyInvocable<void(absl::Status)> done) {
  const absl::StatusOr<int> index =
      FindModel(request.model_name(), request.model_version());
  if (!index.ok()) {
    done(index.status());
    return;
  }
  state->model_index = *index;
  NativeCall& call = state->call;
  const absl::Status built = ToNative(interfaces_[*index], request, &call);
  if (!built.ok()) {
    done(built);
    return;
  }
  auto is_cancelled = [context] { return context->IsCancelled(); };
  if (call.model->hosted == nullptr) {
    native_->SubmitAttend(call.attend, &state->native_response, received,
                          std::move(is_cancelled), CallDeadline(*context),
                          std::move(ticket), std::move(done));
  } else {
    native_->SubmitModel(call.hosted, &state->native_response, received,
                         std::move(is_cancelled), CallDeadline(*context),
                         std::move(ticket), std::move(done));
  }
}

void InferenceService::RecordInfer(Method method,
                                   const ModelInferRequest& request,
                                   const InferState& state,
                                   const absl::Status& status,
                                   absl::Time received, int64_t request_bytes,
                                   int64_t response_bytes) {
  const grpc::StatusCode code = ToGrpcStatus(status).error_code();
  const absl::Time now = absl::Now();
  const double seconds = absl::ToDoubleSeconds(now - received);
  metrics_->RecordRequest(method, code, seconds, request_bytes, response_bytes);
  if (state.model_index >= 0) {
    const ModelInterface& model = interfaces_[state.model_index];
    if (model.hosted != nullptr) {
      metrics_->RecordModelRequest(model.hosted->index, code, seconds);
    }
    if (status.ok()) {
      const v1::Timing& timing = state.native_response.timing();
      statistics_.RecordSuccess(state.model_index, now - received,
                                absl::Microseconds(timing.queue_us()),
                                absl::Microseconds(timing.compute_us()), now);
    } else {
      statistics_.RecordFailure(state.model_index, now - received);
    }
  }
  ATTNSERVE_LOG(
      LogLevel::kDebug,
      method == Method::kModelInfer ? "ModelInfer" : "ModelStreamInfer",
      " model=", request.model_name(), " id=", request.id(), " code=", code,
      " bytes_in=", request_bytes, " bytes_out=", response_bytes, " ",
      status.message());
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(
    grpc::CallbackServerContext* context, const ModelInferRequest* request,
    ModelInferResponse* response) {
  auto* messages = static_cast<InferMessages*>(context->GetRpcAllocatorState());
  auto* reactor = new TrackedUnaryReactor(&work_, context, options_.watchdog);
  const absl::Time received = absl::Now();
  const int64_t request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  auto finish = [this, reactor, messages, request, response, received,
                 request_bytes](absl::Status status) {
    if (status.ok()) {
      ToInferResponse(messages->state.call, *request,
                      messages->state.native_response, response);
    } else {
      response->Clear();
    }
    RecordInfer(Method::kModelInfer, *request, messages->state, status,
                received, request_bytes,
                static_cast<int64_t>(response->ByteSizeLong()));
    work_.Answered();
    reactor->FinishWatched(ToGrpcStatus(status));
  };
  const absl::Status admitted = admission_->Admit(*context);
  if (!admitted.ok()) {
    finish(admitted);
    return reactor;
  }
  // As a native unary call: withdrawn from the queue when cancelled there.
  auto ticket = std::make_shared<QueueTicket>();
  reactor->OnCancelled([this, ticket] { native_->Withdraw(*ticket); });
  SubmitInfer(context, messages->mutable_request(), &messages->state, received,
              ticket, std::move(finish));
  return reactor;
}

// One ModelStreamInfer stream: one message at a time (read, infer, write, read
// the next), so answers come in request order and the stream needs no
// bookkeeping beyond its one message. A failed message is answered with its
// error_message (and the id and model in infer_response) and the stream goes
// on, as Triton's streams do. Deletes itself in OnDone; OnDone comes only
// after Finish, which is called only while no message is in flight.
class InferenceService::StreamReactor
    : public grpc::ServerBidiReactor<ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamReactor(InferenceService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    const absl::Status admitted = service_->admission_->Admit(*context);
    if (!admitted.ok()) {
      Finish(ToGrpcStatus(admitted));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Half-closed by the client (or cancelled): every answer is written.
      Finish(grpc::Status::OK);
      return;
    }
    service_->work_.Begin();
    received_ = absl::Now();
    request_bytes_ = static_cast<int64_t>(request_.ByteSizeLong());
    if (absl::Status admitted = service_->admission_->AdmitStreamMessage();
        !admitted.ok()) {
      Answer(std::move(admitted));
      return;
    }
    service_->SubmitInfer(context_, request_, &state_, received_,
                          /*ticket=*/nullptr,
                          [this](absl::Status status) { Answer(status); });
  }

  void OnWriteDone(bool ok) override {
    service_->work_.End();
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      return;
    }
    request_.Clear();
    response_.Clear();
    state_ = InferState();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  void Answer(const absl::Status& status) {
    inference::ModelInferResponse* infer = response_.mutable_infer_response();
    if (status.ok()) {
      ToInferResponse(state_.call, request_, state_.native_response, infer);
    } else {
      response_.set_error_message(absl::StrCat(
          absl::StatusCodeToString(status.code()), ": ", status.message()));
      infer->set_model_name(request_.model_name());
      infer->set_model_version(request_.model_version());
      infer->set_id(request_.id());
    }
    service_->RecordInfer(Method::kModelStreamInfer, request_, state_, status,
                          received_, request_bytes_,
                          static_cast<int64_t>(response_.ByteSizeLong()));
    service_->work_.Answered();
    StartWrite(&response_);
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  ModelInferRequest request_;
  inference::ModelStreamInferResponse response_;
  InferState state_;
  absl::Time received_;
  int64_t request_bytes_ = 0;
};

grpc::ServerBidiReactor<ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamReactor(this, context);
}

}  // namespace attnserve::server::kserve
