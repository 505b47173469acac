#include "client/load/bench.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "client/hosted_model.h"
#include "client/load/first_calls.h"
#include "client/rpc_status.h"
#include "client/shared_memory.h"
#include "client/tensors/file_util.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "client/v2_messages.h"
#include "wire/transport.h"

namespace attnserve::client {
namespace {

ExitCode Fail(std::ostream& err, absl::string_view message, ExitCode code) {
  err << "error: " << message << "\n";
  return code;
}

std::string RequestText(const v1::AttendRequest& request) {
  std::string text = absl::StrCat(
      wire::ShortDataTypeName(request.query().dtype()), " ",
      LayoutName(request.layout()), " q ", wire::ShapeText(request.query()),
      " k ", wire::ShapeText(request.key()), " v ",
      wire::ShapeText(request.value()), "; mask ", MaskText(request.mask()));
  if (request.return_weights()) absl::StrAppend(&text, "; weights");
  return text;
}

// The output's dtype: `output_dtype` unless unspecified, then the inputs'.
v1::DataType OutputDType(v1::DataType input_dtype, v1::DataType output_dtype) {
  return output_dtype == v1::DATA_TYPE_UNSPECIFIED ? input_dtype : output_dtype;
}

// Bytes of a response's output: [B, Hq, Lq, Dv] elements of the output dtype.
int64_t OutputBytes(const RandomInputs& inputs, const CallOptions& call) {
  const RandomInputs r = ResolveDefaults(inputs);
  return r.batch * r.heads * r.q_len * r.value_dim *
         wire::ElementSize(OutputDType(r.dtype, call.output_dtype));
}

// Asks every target for its ServerInfo (into `infos`), and with a model for
// that model (into `model`, from the first target; the others must host the
// same config), so that an unreachable server or an unknown model shows as
// one clear error before the load.
ExitCode CheckTargets(
    const BenchOptions& options,
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    std::vector<v1::ServerInfo>* infos, v1::ModelInfo* model,
    std::ostream& err) {
  const std::vector<std::string>& targets = options.connection.targets;
  infos->resize(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    ConnectChannel(*channels[t], options.connection.timeout);
    v1::ServerInfo& info = (*infos)[t];
    grpc::Status status;
    if (options.model.name.empty()) {
      auto stub = v1::AttentionService::NewStub(channels[t]);
      grpc::ClientContext context;
      PrepareContext(options.connection, &context);
      status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
    } else {
      v1::ModelInfo found;
      status = LookUpModel(channels[t], options.connection, options.model.name,
                           &info, &found);
      if (status.ok() && t == 0) *model = found;
      if (status.ok() && found.config_json() != model->config_json()) {
        err << "error: " << targets[t] << ": model " << options.model.name
            << " has another config than on " << targets[0] << " ("
            << found.config_json() << " vs " << model->config_json() << ")\n";
        return kExitRpcFailed;
      }
    }
    if (!status.ok()) {
      err << "error: " << targets[t] << ": "
          << StatusCodeName(status.error_code()) << ": "
          << status.error_message() << "\n";
      return kExitRpcFailed;
    }
  }
  return kExitOk;
}

// A request beyond a server's limit would only give errors.
ExitCode CheckRequestBytes(const BenchOptions& options,
                           const std::vector<v1::ServerInfo>& infos,
                           int64_t request_bytes, bool pieces,
                           std::ostream& err) {
  for (size_t t = 0; t < infos.size(); ++t) {
    const v1::ServerInfo& info = infos[t];
    if (info.max_request_bytes() > 0 &&
        request_bytes > info.max_request_bytes()) {
      err << "error: " << options.connection.targets[t] << ": the request has "
          << request_bytes << " bytes, beyond the server's --max_request_bytes="
          << info.max_request_bytes() << "\n";
      return kExitRpcFailed;
    }
    // Streams, hosted models and v2 send the request as one message.
    if (!pieces && info.max_message_bytes() > 0 &&
        request_bytes > info.max_message_bytes()) {
      err << "error: " << options.connection.targets[t] << ": the request has "
          << request_bytes << " bytes, beyond the server's --max_message_bytes="
          << info.max_message_bytes()
          << " for one message (only unary Attend calls go in pieces)\n";
      return kExitRpcFailed;
    }
  }
  return kExitOk;
}

// "\r[level 2/3 concurrency 4] 3.0/5 s  1234 requests  410.9 req/s  p50 ..."
std::string ProgressLine(absl::string_view level, const BenchOptions& options,
                         absl::Duration since_start, const LoadResult& r) {
  if (since_start < absl::ZeroDuration()) {
    return absl::StrFormat("\r\033[K[%s] warm-up %.0f/%g s", level,
                           absl::ToDoubleSeconds(since_start + options.warmup),
                           absl::ToDoubleSeconds(options.warmup));
  }
  const double seconds = absl::ToDoubleSeconds(since_start);
  return absl::StrFormat(
      "\r\033[K[%s] %.0f/%g s  %d requests  %.1f req/s  p50 %.0f us  p99 %.0f "
      "us  errors %d",
      level, seconds, absl::ToDoubleSeconds(options.duration), r.requests,
      seconds > 0 ? r.requests / seconds : 0.0,
      absl::ToDoubleMicroseconds(r.latency.Percentile(50)),
      absl::ToDoubleMicroseconds(r.latency.Percentile(99)), r.error_total());
}

}  // namespace

ExitCode RunBench(const BenchOptions& options, std::ostream& out,
                  std::ostream& err) {
  const bool hosted = !options.model.name.empty();
  const RandomInputs& random = options.spec.random;
  const absl::Status valid =
      hosted
          ? ValidateModelSpec(random, options.model)
          : ValidateRandomInputs(random, options.connection.max_message_bytes);
  if (!valid.ok()) return Fail(err, valid.message(), kExitUsage);
  const bool v2 = options.protocol == Protocol::kV2;
  if (options.shared_memory &&
      (hosted || options.connection.targets.size() != 1)) {
    return Fail(err,
                "--shm loads Attend calls (native or v2) on one target (not "
                "--model or several --target)",
                kExitUsage);
  }

  if (options.new_connections < 0 ||
      options.new_connections > kMaxNewConnections) {
    return Fail(
        err,
        absl::StrCat("--new_connections must be between 0 and ",
                     kMaxNewConnections, ", got ", options.new_connections),
        kExitUsage);
  }
  if (options.new_connections > 0 &&
      (hosted || v2 || options.stream || options.shared_memory ||
       !options.rates.empty())) {
    return Fail(err,
                "--new_connections times unary native Attend calls after a "
                "closed loop (not --model, --protocol=v2, --stream, --shm or "
                "--rate)",
                kExitUsage);
  }

  int concurrency = options.max_outstanding;
  if (options.rates.empty()) {
    concurrency = 1;
    for (int level : options.concurrency) {
      concurrency = std::max(concurrency, level);
    }
  }
  const int connections = ConnectionsFor(options.connections, concurrency);
  auto channels = CreateChannels(options.connection, connections);
  if (!channels.ok()) {
    return Fail(err, channels.status().message(),
                channels.status().code() == absl::StatusCode::kInvalidArgument
                    ? kExitUsage
                    : kExitFileError);
  }
  std::vector<v1::ServerInfo> infos;
  v1::ModelInfo model;
  if (const ExitCode code =
          CheckTargets(options, *channels, &infos, &model, err);
      code != kExitOk) {
    return code;
  }

  BenchReport report;
  report.open_loop = !options.rates.empty();
  report.arrival =
      options.arrival == Arrival::kPoisson ? "poisson" : "constant";
  report.stream = options.stream;
  report.v2 = v2;
  report.model = options.model.name;
  report.targets = options.connection.targets;
  report.connections_per_target = connections;
  report.connections_auto = options.connections == kAutoConnections;
  report.warmup = options.warmup;
  report.duration = options.duration;

  v1::AttendRequest attend_request;
  v1::ModelRequest model_request;
  const google::protobuf::Message* request = &attend_request;
  int64_t expected_output_bytes = 0;
  if (hosted) {
    const absl::Status fits =
        ValidateModelInputBytes(random, options.model, model.d_model(),
                                options.connection.max_message_bytes);
    if (!fits.ok()) return Fail(err, fits.message(), kExitUsage);
    model_request.set_request_id("attnctl-bench");
    FillModelRequest(random, options.model, model.d_model(), options.spec.call,
                     &model_request);
    request = &model_request;
    report.request_text = ModelRequestText(model_request);
    expected_output_bytes = ModelOutputBytes(
        model, random.batch, random.q_len,
        OutputDType(random.dtype, options.spec.call.output_dtype));
  } else {
    attend_request.set_request_id("attnctl-bench");
    FillRandomInputs(random, options.spec.call.layout, &attend_request);
    ApplyCallOptions(options.spec.call, &attend_request);
    if (v2) {
      if (const absl::Status carried = CheckV2CanCarry(attend_request);
          !carried.ok()) {
        return Fail(err, carried.message(), kExitUsage);
      }
    }
    report.request_text = RequestText(attend_request);
    expected_output_bytes = OutputBytes(random, options.spec.call);
  }
  std::unique_ptr<SharedMemoryPlacement> placement;
  if (options.shared_memory) {
    absl::StatusOr<std::unique_ptr<SharedMemoryPlacement>> placed =
        SharedMemoryPlacement::Create(channels->front(), options.connection,
                                      &attend_request);
    if (!placed.ok()) {
      return Fail(err, placed.status().message(), kExitRpcFailed);
    }
    placement = *std::move(placed);
    report.request_text =
        absl::StrCat(report.request_text, "; shm region ", placement->name());
  }
  inference::ModelInferRequest infer_request;
  if (v2) {
    infer_request = hosted ? ToModelInferRequest(model_request)
                           : ToModelInferRequest(attend_request);
    request = &infer_request;
    report.request_text = absl::StrCat("v2 of ", report.request_text);
  }
  report.request_bytes = static_cast<int64_t>(request->ByteSizeLong());
  // As attnserve's clients send it (wire/attend_call.h).
  report.pieces = !hosted && !v2 && !options.stream &&
                  report.request_bytes > wire::kRequestPieceBytes;
  if (const ExitCode code = CheckRequestBytes(
          options, infos, report.request_bytes, report.pieces, err);
      code != kExitOk) {
    return code;
  }
  for (const auto& channel : *channels) {
    ConnectChannel(*channel, options.connection.timeout);
  }

  const size_t level_count =
      report.open_loop ? options.rates.size() : options.concurrency.size();
  for (size_t i = 0; i < level_count; ++i) {
    LevelReport level;
    LoadSpec spec;
    if (report.open_loop) {
      level.rate = spec.rate = options.rates[i];
    } else {
      level.concurrency = spec.concurrency = options.concurrency[i];
    }
    spec.arrival = options.arrival;
    spec.max_outstanding = options.max_outstanding;
    spec.stream = options.stream;
    if (report.pieces) {
      spec.method = kAttendPiecesMethod;
      spec.pieces = true;
    }
    if (hosted) {
      spec.method = kAttendModelMethod;
      spec.stream_method = kAttendModelStreamMethod;
    }
    if (v2) {
      spec.method = kModelInferMethod;
      spec.stream_method = kModelStreamInferMethod;
      spec.protocol = Protocol::kV2;
    }
    spec.warmup = options.warmup;
    spec.duration = options.duration;
    spec.seed = options.spec.random.seed + i;
    spec.expected_output_bytes = expected_output_bytes;
    const std::string name = absl::StrFormat(
        "%s%s %s",
        level_count > 1 ? absl::StrFormat("level %d/%d ", i + 1, level_count)
                        : "",
        report.open_loop ? "rate" : "concurrency",
        report.open_loop ? absl::StrFormat("%g", level.rate)
                         : absl::StrCat(level.concurrency));
    ProgressFn progress;
    if (options.progress) {
      progress = [&](absl::Duration since_start, const LoadResult& so_far) {
        err << ProgressLine(name, options, since_start, so_far) << std::flush;
      };
    }
    absl::StatusOr<LoadResult> result =
        RunLoad(*channels, options.connection, *request, spec, progress);
    if (options.progress) err << "\r\033[K" << std::flush;
    if (!result.ok()) return Fail(err, result.status().message(), kExitUsage);
    level.result = *std::move(result);
    if (report.request_flops == 0 && level.result.ok > 0) {
      report.request_flops = level.result.server_flops / level.result.ok;
    }
    report.levels.push_back(std::move(level));
  }

  if (options.new_connections > 0) {
    absl::StatusOr<LatencyHistogram> first_calls =
        TimeFirstCalls(options.connection, attend_request,
                       options.new_connections, expected_output_bytes);
    if (!first_calls.ok()) {
      return Fail(err, first_calls.status().message(), kExitRpcFailed);
    }
    report.first_calls = *std::move(first_calls);
  }

  const std::string text = FormatReport(report, options.format);
  if (options.output_file.empty()) {
    out << text;
  } else {
    const absl::Status written = WriteStringToFile(options.output_file, text);
    if (!written.ok()) return Fail(err, written.message(), kExitFileError);
    out << FormatReport(report, OutputFormat::kTable) << "wrote "
        << options.output_file << "\n";
  }

  const LoadResult total = Total(report);
  if (total.error_total() > 0 || !total.stopped_early.empty()) {
    err << "error: " << total.error_total() << " of " << total.requests
        << " requests failed"
        << (total.stopped_early.empty()
                ? std::string()
                : absl::StrCat("; stopped early: ", total.stopped_early))
        << "\n";
    return kExitRpcFailed;
  }
  return kExitOk;
}

}  // namespace attnserve::client
