#include "client/infer.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/check.h"
#include "client/hosted_model.h"
#include "client/rpc_status.h"
#include "client/shared_memory.h"
#include "client/tensors/input_files.h"
#include "client/tensors/npy.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "client/v2_messages.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "wire/attend_call.h"
#include "wire/v2_names.h"

namespace attnserve::client {
namespace {

// Prints "error: <message>" and returns `code`.
ExitCode Fail(std::ostream& err, const absl::Status& status, ExitCode code) {
  err << "error: " << status.message() << "\n";
  return code;
}

void PrintTensorLine(absl::string_view name, const v1::Tensor& tensor,
                     bool stats, std::ostream& out) {
  out << absl::StrFormat("%-8s %s %s", name,
                         wire::ShortDataTypeName(tensor.dtype()),
                         wire::ShapeText(tensor));
  if (stats) {
    const TensorStats s = ComputeStats(tensor);
    out << absl::StrFormat("  mean %.6g  absmax %.6g", s.mean, s.abs_max);
    if (s.non_finite > 0) out << "  non-finite " << s.non_finite;
  }
  out << "\n";
}

// Each query head's mean over its rows of an f32 [B, Hq, Lq] tensor (the
// weights' entropy): a head near 0 attends one key, one near ln(Lk) spreads
// evenly. At most the first 32 heads.
void PrintHeadMeans(const v1::Tensor& tensor, std::ostream& out) {
  if (tensor.shape_size() != 3 || tensor.dtype() != v1::FLOAT32) return;
  const int64_t b = tensor.shape(0), hq = tensor.shape(1), lq = tensor.shape(2);
  if (b * hq * lq * 4 != static_cast<int64_t>(tensor.data().size())) return;
  std::vector<float> values(static_cast<size_t>(b * hq * lq));
  std::memcpy(values.data(), tensor.data().data(), tensor.data().size());
  std::vector<std::string> means;
  for (int64_t h = 0; h < std::min<int64_t>(hq, 32); ++h) {
    double sum = 0;
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t r = 0; r < lq; ++r) sum += values[(i * hq + h) * lq + r];
    }
    means.push_back(absl::StrFormat("%.3g", b * lq > 0 ? sum / (b * lq) : 0.0));
  }
  out << absl::StrFormat("%-8s mean entropy per head: %s%s\n", "heads",
                         absl::StrJoin(means, " "), hq > 32 ? " ..." : "");
}

void PrintRequest(const v1::AttendRequest& request, std::ostream& out) {
  out << absl::StrFormat("%-8s %s\n", "layout", LayoutName(request.layout()));
  PrintTensorLine("query", request.query(), false, out);
  PrintTensorLine("key", request.key(), false, out);
  PrintTensorLine("value", request.value(), false, out);
  out << absl::StrFormat("%-8s %s\n", "mask", MaskText(request.mask()));
  out << absl::StrFormat("%-8s %s\n", "scale",
                         request.has_scale()
                             ? absl::StrCat(request.scale())
                             : std::string("default (1/sqrt(D))"));
}

void PrintResponse(const v1::AttendResponse& response, absl::Duration connect,
                   absl::Duration round_trip, std::ostream& out) {
  PrintTensorLine("output", response.output(), true, out);
  if (response.has_weights()) {
    PrintTensorLine("weights", response.weights(), true, out);
  }
  if (response.has_entropy()) {
    PrintTensorLine("entropy", response.entropy(), true, out);
    PrintTensorLine("max_w", response.max_weight(), true, out);
    PrintHeadMeans(response.entropy(), out);
  }
  const v1::Timing& t = response.timing();
  out << absl::StrFormat(
      "%-8s server queue %.3f ms, compute %.3f ms, total %.3f ms; client "
      "round trip %.3f ms (after %.3f ms connecting)\n",
      "timing", t.queue_us() / 1e3, t.compute_us() / 1e3, t.total_us() / 1e3,
      absl::ToDoubleMilliseconds(round_trip),
      absl::ToDoubleMilliseconds(connect));
}

absl::Status SaveTensor(const std::string& path, const v1::Tensor& tensor) {
  absl::StatusOr<NpyArray> array = NpyFromTensor(tensor);
  if (!array.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", array.status().message()));
  }
  return WriteNpyFile(path, *array);
}

// Writes --out and --weights_out, printing a "wrote" line for each.
ExitCode SaveOutputs(const InferOptions& options,
                     const v1::AttendResponse& response, std::ostream& out,
                     std::ostream& err) {
  const std::pair<const std::string*, const v1::Tensor*> saves[] = {
      {&options.output_file, &response.output()},
      {&options.weights_file, &response.weights()}};
  for (const auto& [path, tensor] : saves) {
    if (path->empty()) continue;
    const absl::Status saved = SaveTensor(*path, *tensor);
    if (!saved.ok()) return Fail(err, saved, kExitFileError);
    out << absl::StrFormat("%-8s %s\n", "wrote", *path);
  }
  return kExitOk;
}

grpc::Status CallNative(v1::AttentionService::Stub& stub,
                        grpc::ClientContext* context,
                        const v1::AttendRequest& request,
                        v1::AttendResponse* response) {
  return wire::CallAttend(stub, context, request, response);
}

grpc::Status CallNative(v1::AttentionService::Stub& stub,
                        grpc::ClientContext* context,
                        const v1::ModelRequest& request,
                        v1::AttendResponse* response) {
  return stub.AttendModel(context, request, response);
}

// "protocol v2 ModelInfer of model NAME" when the call goes that way.
void PrintProtocol(const InferOptions& options, absl::string_view model,
                   std::ostream& out) {
  if (options.protocol != Protocol::kV2) return;
  out << absl::StrFormat("%-8s v2 ModelInfer of model \"%s\"\n", "protocol",
                         model);
}

// One call of `request` (an AttendRequest or a ModelRequest) in
// options.protocol: Attend / AttendModel, or ModelInfer with the answer read
// back as the native response it means (an answer that does not read is
// INTERNAL). `round_trip` is the call's alone, without the conversions.
template <typename Request>
grpc::Status CallServer(const InferOptions& options,
                        const std::shared_ptr<grpc::Channel>& channel,
                        const Request& request, v1::AttendResponse* response,
                        absl::Duration* round_trip) {
  grpc::ClientContext context;
  PrepareContext(options.connection, &context);
  if (options.protocol == Protocol::kNative) {
    auto stub = v1::AttentionService::NewStub(channel);
    const absl::Time start = absl::Now();
    const grpc::Status status = CallNative(*stub, &context, request, response);
    *round_trip = absl::Now() - start;
    return status;
  }
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  const inference::ModelInferRequest v2_request = ToModelInferRequest(request);
  inference::ModelInferResponse answer;
  const absl::Time start = absl::Now();
  const grpc::Status status = stub->ModelInfer(&context, v2_request, &answer);
  *round_trip = absl::Now() - start;
  if (!status.ok()) return status;
  absl::StatusOr<v1::AttendResponse> native =
      FromModelInferResponse(std::move(answer));
  if (!native.ok()) {
    return grpc::Status(
        grpc::StatusCode::INTERNAL,
        absl::StrCat("the ModelInfer response: ", native.status().message()));
  }
  *response = *std::move(native);
  return grpc::Status::OK;
}

void PrintModelRequest(const v1::ModelInfo& model,
                       const v1::ModelRequest& request, std::ostream& out) {
  out << absl::StrFormat("%-8s %s: %s\n", "model", model.name(),
                         ModelSummary(model));
  PrintTensorLine("hidden", request.hidden(), false, out);
  if (request.has_memory()) {
    PrintTensorLine("memory", request.memory(), false, out);
  } else {
    out << absl::StrFormat("%-8s none (self-attention)\n", "memory");
  }
  out << absl::StrFormat("%-8s %s\n", "position",
                         request.has_positions()
                             ? PositionsText(request.positions())
                             : std::string("default (0..Lq-1)"));
  out << absl::StrFormat("%-8s %s\n", "mask", MaskText(request.mask()));
}

ExitCode RunModelInfer(const InferOptions& options, std::ostream& out,
                       std::ostream& err) {
  if (options.files.HasTensors()) {
    return Fail(err,
                absl::InvalidArgumentError(
                    "--q, --k and --v do not apply with --model: its inputs "
                    "are random hidden states"),
                kExitUsage);
  }
  if (options.check) {
    return Fail(err,
                absl::InvalidArgumentError(
                    "--check is not available with --model: the client does "
                    "not have the model's weights to recompute the layer"),
                kExitUsage);
  }
  const RandomInputs& random = options.spec.random;
  if (const absl::Status valid = ValidateModelSpec(random, options.model);
      !valid.ok()) {
    return Fail(err, valid, kExitUsage);
  }
  CallOptions call = options.spec.call;
  if (!options.weights_file.empty()) call.return_weights = true;
  v1::ModelRequest request;
  request.set_request_id(options.request_id);
  if (!options.files.mask.empty()) {
    const absl::Status status = LoadMaskFile(
        options.files.mask, request.mutable_mask()->mutable_explicit_mask());
    if (!status.ok()) return Fail(err, status, kExitFileError);
  }

  auto channels = CreateChannels(options.connection);
  if (!channels.ok()) return Fail(err, channels.status(), kExitFileError);
  const absl::Duration connect =
      ConnectChannel(*channels->front(), options.connection.timeout);
  v1::ServerInfo server;
  v1::ModelInfo model;
  if (const grpc::Status found =
          LookUpModel(channels->front(), options.connection, options.model.name,
                      &server, &model);
      !found.ok()) {
    err << RpcErrorLine(found) << "\n";
    return kExitRpcFailed;
  }
  if (const absl::Status fits =
          ValidateModelInputBytes(random, options.model, model.d_model(),
                                  options.connection.max_message_bytes);
      !fits.ok()) {
    return Fail(err, fits, kExitUsage);
  }
  FillModelRequest(random, options.model, model.d_model(), call, &request);
  PrintModelRequest(model, request, out);
  PrintProtocol(options, request.model(), out);

  v1::AttendResponse response;
  absl::Duration round_trip;
  const grpc::Status status =
      CallServer(options, channels->front(), request, &response, &round_trip);
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  PrintResponse(response, connect, round_trip, out);
  return SaveOutputs(options, response, out, err);
}

}  // namespace

ExitCode RunInfer(const InferOptions& options, std::ostream& out,
                  std::ostream& err) {
  if (!options.model.name.empty()) {
    if (options.shared_memory) {
      return Fail(err,
                  absl::InvalidArgumentError(
                      "--shm applies to Attend calls, not to --model"),
                  kExitUsage);
    }
    return RunModelInfer(options, out, err);
  }
  CallOptions call = options.spec.call;
  if (!options.weights_file.empty()) call.return_weights = true;

  v1::AttendRequest request;
  request.set_request_id(options.request_id);
  const int files = !options.files.query.empty() + !options.files.key.empty() +
                    !options.files.value.empty();
  if (files == 3) {
    const std::pair<const std::string*, v1::Tensor*> inputs[] = {
        {&options.files.query, request.mutable_query()},
        {&options.files.key, request.mutable_key()},
        {&options.files.value, request.mutable_value()}};
    const char* roles[] = {"query", "key", "value"};
    for (int i = 0; i < 3; ++i) {
      const absl::Status status = LoadInputFile(
          *inputs[i].first, roles[i], options.files.dtype, inputs[i].second);
      if (!status.ok()) return Fail(err, status, kExitFileError);
    }
  } else if (files == 0) {
    const absl::Status status = ValidateRandomInputs(
        options.spec.random, options.connection.max_message_bytes);
    if (!status.ok()) return Fail(err, status, kExitUsage);
    FillRandomInputs(options.spec.random, call.layout, &request);
  } else {
    return Fail(err,
                absl::InvalidArgumentError(
                    "--q, --k and --v go together: give all three files or "
                    "none (random inputs)"),
                kExitUsage);
  }
  if (!options.files.mask.empty()) {
    const absl::Status status = LoadMaskFile(
        options.files.mask, request.mutable_mask()->mutable_explicit_mask());
    if (!status.ok()) return Fail(err, status, kExitFileError);
  }
  ApplyCallOptions(call, &request);
  if (options.protocol == Protocol::kV2) {
    if (const absl::Status carried = CheckV2CanCarry(request); !carried.ok()) {
      return Fail(err, carried, kExitUsage);
    }
  }
  PrintRequest(request, out);
  PrintProtocol(options, wire::kV2AttentionModel, out);

  auto channels = CreateChannels(options.connection);
  if (!channels.ok()) return Fail(err, channels.status(), kExitFileError);
  const absl::Duration connect =
      ConnectChannel(*channels->front(), options.connection.timeout);
  // With --shm the call sends a copy whose tensors are in the region; the
  // request keeps its bytes for --check.
  std::unique_ptr<SharedMemoryPlacement> placement;
  v1::AttendRequest shm_request;
  if (options.shared_memory) {
    shm_request = request;
    absl::StatusOr<std::unique_ptr<SharedMemoryPlacement>> placed =
        SharedMemoryPlacement::Create(channels->front(), options.connection,
                                      &shm_request);
    if (!placed.ok()) {
      err << "error: "
          << StatusCodeName(
                 static_cast<grpc::StatusCode>(placed.status().code()))
          << ": " << placed.status().message() << "\n";
      return kExitRpcFailed;
    }
    placement = *std::move(placed);
    out << absl::StrFormat("%-8s region \"%s\", %d bytes\n", "shm",
                           placement->name(), placement->size());
  }
  v1::AttendResponse response;
  absl::Duration round_trip;
  const grpc::Status status = CallServer(
      options, channels->front(), placement != nullptr ? shm_request : request,
      &response, &round_trip);
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  if (placement != nullptr) {
    if (const absl::Status collected = placement->CollectOutputs(&response);
        !collected.ok()) {
      return Fail(err, collected, kExitRpcFailed);
    }
  }
  PrintResponse(response, connect, round_trip, out);
  if (const ExitCode saved = SaveOutputs(options, response, out, err);
      saved != kExitOk) {
    return saved;
  }

  if (!options.check) return kExitOk;
  absl::StatusOr<std::vector<CheckReport>> reports =
      CheckResponse(request, response);
  if (!reports.ok()) {
    err << "error: check: " << reports.status().message() << "\n";
    return kExitCheckFailed;
  }
  for (const CheckReport& report : *reports) {
    out << absl::StrFormat("%-8s %s\n", "check", FormatCheckReport(report));
  }
  const ExitCode code = CheckExitCode(*reports);
  if (code != kExitOk) {
    err << "error: check failed: the server's results differ from the "
           "reference beyond the tolerance\n";
  }
  return code;
}

}  // namespace attnserve::client
