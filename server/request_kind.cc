#include "server/request_kind.h"

#include "absl/strings/str_cat.h"

namespace attnserve::server {

absl::StatusOr<AttendKind::Decoded> AttendKind::Decode(
    const Request& request, const DecodeContext& context) {
  return DecodeRequest(request, *context.validator, *context.limits,
                       context.shared_memory);
}

absl::Status AttendKind::Compute(const Decoded& decoded,
                                 AttentionEngine& engine,
                                 v1::AttendResponse* response) {
  const AttentionOutputs outputs = PrepareResponse(decoded, response);
  const absl::Status status = engine.Run(decoded.plan, outputs);
  if (!status.ok() || decoded.shared_memory.empty()) return status;
  return decoded.shared_memory.Finish();
}

void AttendKind::RecordCompute(const Decoded& decoded, double seconds,
                               Metrics& metrics) {
  metrics.RecordCompute(decoded.plan.kernel, seconds, decoded.plan.shape.flops);
}

const HostedModel* AttendKind::ModelOf(const Request& request,
                                       const ModelRegistry* models) {
  return nullptr;
}

absl::StatusOr<ModelKind::Decoded> ModelKind::Decode(
    const Request& request, const DecodeContext& context) {
  if (context.models == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "model: \"", request.model(),
        "\" is not hosted here (this server hosts no models: start it with "
        "--model_repository)"));
  }
  return DecodeModelRequest(request, *context.models, *context.validator,
                            *context.limits);
}

absl::Status ModelKind::Compute(const Decoded& decoded, AttentionEngine& engine,
                                v1::AttendResponse* response) {
  const model::LayerOutputs outputs = PrepareModelResponse(decoded, response);
  return decoded.model->layer->Run(decoded.inputs, outputs, engine);
}

void ModelKind::RecordCompute(const Decoded& decoded, double seconds,
                              Metrics& metrics) {
  metrics.RecordModelCompute(decoded.model->index, seconds, decoded.flops);
}

const HostedModel* ModelKind::ModelOf(const Request& request,
                                      const ModelRegistry* models) {
  return models == nullptr ? nullptr : models->Find(request.model());
}

}  // namespace attnserve::server
