#include "client/session.h"

#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "client/request_builder.h"
#include "client/rpc_status.h"
#include "client/tensors/wire_tensor.h"
#include "wire/dtype.h"

namespace attnserve::client {
namespace {

class Caller {
 public:
  Caller(const SessionCommand& c, std::shared_ptr<grpc::Channel> channel)
      : command_(c), stub_(v1::SessionService::NewStub(std::move(channel))) {}

  void Prepare(grpc::ClientContext* context) const {
    PrepareSessionContext(command_.connection,
                          !command_.route_key.empty() ? command_.route_key
                          : command_.sessions.empty()
                              ? std::string()
                              : command_.sessions.front(),
                          context);
  }
  v1::SessionService::Stub& stub() { return *stub_; }

 private:
  const SessionCommand& command_;
  std::unique_ptr<v1::SessionService::Stub> stub_;
};

ExitCode Report(const grpc::Status& status, const v1::SessionInfo& info,
                std::ostream& out, std::ostream& err) {
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  out << FormatSessionInfo(info);
  return kExitOk;
}

ExitCode Append(const SessionCommand& c, Caller& caller,
                const v1::SessionShape& shape, std::ostream& out,
                std::ostream& err) {
  const int64_t chunk = c.chunk_tokens > 0 && c.chunk_tokens < c.tokens
                            ? c.chunk_tokens
                            : c.tokens;
  std::vector<v1::AppendKvRequest> chunks;
  for (int64_t done = 0; done < c.tokens; done += chunk) {
    const int64_t rows = std::min(chunk, c.tokens - done);
    v1::AppendKvRequest r;
    r.set_session_id(c.sessions.front());
    r.set_layer(c.layer);
    if (c.position) r.set_position(*c.position + done);
    *r.mutable_key() = RandomTensor(
        c.input_dtype, {rows, shape.num_kv_heads(), shape.head_dim()}, c.seed,
        2 * done);
    *r.mutable_value() = RandomTensor(
        c.input_dtype, {rows, shape.num_kv_heads(), shape.value_dim()}, c.seed,
        2 * done + 1);
    chunks.push_back(std::move(r));
  }
  v1::SessionInfo info;
  grpc::ClientContext context;
  caller.Prepare(&context);
  if (chunks.size() == 1) {
    return Report(caller.stub().AppendKv(&context, chunks[0], &info), info, out,
                  err);
  }
  auto writer = caller.stub().AppendKvStream(&context, &info);
  for (const v1::AppendKvRequest& r : chunks) {
    if (!writer->Write(r)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (status.ok()) out << "chunks: " << chunks.size() << "\n";
  return Report(status, info, out, err);
}

ExitCode Step(const SessionCommand& c, Caller& caller,
              const v1::SessionShape& shape, std::ostream& out,
              std::ostream& err) {
  v1::AttendSessionsRequest r;
  r.set_request_id("attnctl-session-step");
  r.set_layer(c.layer);
  if (!c.causal) r.set_causal(false);
  if (c.window_left) r.set_window_left(static_cast<int32_t>(*c.window_left));
  if (c.scale) r.set_scale(*c.scale);
  r.set_return_weights(c.return_weights);
  for (size_t i = 0; i < c.sessions.size(); ++i) {
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id(c.sessions[i]);
    *q->mutable_query() = RandomTensor(
        c.input_dtype, {c.lnew, c.heads, shape.head_dim()}, c.seed, 3 * i);
    if (c.append) {
      *q->mutable_key() = RandomTensor(
          c.input_dtype, {c.lnew, shape.num_kv_heads(), shape.head_dim()},
          c.seed, 3 * i + 1);
      *q->mutable_value() = RandomTensor(
          c.input_dtype, {c.lnew, shape.num_kv_heads(), shape.value_dim()},
          c.seed, 3 * i + 2);
    }
  }
  v1::AttendSessionsResponse response;
  grpc::ClientContext context;
  caller.Prepare(&context);
  const grpc::Status status =
      caller.stub().AttendSessions(&context, r, &response);
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  for (const v1::SessionResult& result : response.results()) {
    const TensorStats stats = ComputeStats(result.output());
    out << absl::StrFormat(
        "session %s: tokens %d, output %s %s mean %.6g "
        "absmax %.6g",
        result.session_id(), result.tokens(),
        wire::ShortDataTypeName(result.output().dtype()),
        wire::ShapeText(result.output()), stats.mean, stats.abs_max);
    if (result.has_weights()) {
      out << ", weights " << wire::ShapeText(result.weights());
    }
    out << "\n";
  }
  const v1::Timing& t = response.timing();
  out << absl::StrFormat(
      "timing: queue %d us, compute %d us, total %d us, "
      "%.4g MFLOP\n",
      t.queue_us(), t.compute_us(), t.total_us(), t.flops() / 1e6);
  return kExitOk;
}

// export: the sessions' snapshots, as the server sends them, into c.file.
ExitCode Export(const SessionCommand& c, Caller& caller, std::ostream& out,
                std::ostream& err) {
  std::ofstream file(c.file, std::ios::binary | std::ios::trunc);
  if (!file) {
    err << "error: --file: cannot write \"" << c.file << "\"\n";
    return kExitFileError;
  }
  v1::ExportSessionsRequest r;
  for (const std::string& id : c.sessions) r.add_session_ids(id);
  r.set_remove(c.remove);
  grpc::ClientContext context;
  caller.Prepare(&context);
  auto call = caller.stub().ExportSessions(&context, r);
  v1::SessionTransferChunk chunk;
  int64_t bytes = 0;
  while (call->Read(&chunk)) {
    file.write(chunk.data().data(),
               static_cast<std::streamsize>(chunk.data().size()));
    bytes += static_cast<int64_t>(chunk.data().size());
  }
  const grpc::Status status = call->Finish();
  file.close();
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  if (!file) {
    err << "error: --file: writing \"" << c.file << "\" failed\n";
    return kExitFileError;
  }
  out << "exported_bytes: " << bytes << "\nfile: " << c.file << "\n";
  return kExitOk;
}

// import: the snapshots of c.file, streamed in pieces of 1 MiB.
ExitCode Import(const SessionCommand& c, Caller& caller, std::ostream& out,
                std::ostream& err) {
  std::ifstream file(c.file, std::ios::binary);
  if (!file) {
    err << "error: --file: cannot read \"" << c.file << "\"\n";
    return kExitFileError;
  }
  grpc::ClientContext context;
  caller.Prepare(&context);
  v1::ImportSessionsResponse response;
  auto call = caller.stub().ImportSessions(&context, &response);
  v1::SessionTransferChunk chunk;
  std::string piece(size_t{1} << 20, '\0');
  while (file) {
    file.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    chunk.set_data(piece.data(), static_cast<size_t>(file.gcount()));
    if (chunk.data().empty() || !call->Write(chunk)) break;
  }
  call->WritesDone();
  const grpc::Status status = call->Finish();
  if (!status.ok()) {
    err << RpcErrorLine(status) << "\n";
    return kExitRpcFailed;
  }
  for (const v1::SessionInfo& info : response.sessions()) {
    out << FormatSessionInfo(info);
  }
  return kExitOk;
}

}  // namespace

void PrepareSessionContext(const ConnectionOptions& options,
                           const std::string& route_key,
                           grpc::ClientContext* context) {
  PrepareContext(options, context);
  if (!route_key.empty()) context->AddMetadata(kSessionRouteHeader, route_key);
}

std::string FormatSessionInfo(const v1::SessionInfo& info) {
  const v1::SessionShape& s = info.shape();
  return absl::StrCat(
      "session_id: ", info.session_id(), "\n", "shape: layers ", s.num_layers(),
      ", kv_heads ", s.num_kv_heads(), ", head_dim ", s.head_dim(),
      ", value_dim ", s.value_dim(), ", ",
      wire::ShortDataTypeName(s.storage_dtype()), ", max_tokens ",
      s.max_tokens(),
      s.window_tokens() > 0
          ? absl::StrCat(", window_tokens ", s.window_tokens(),
                         ", sink_tokens ", s.sink_tokens())
          : "",
      "\n", "layer_tokens: [", absl::StrJoin(info.layer_tokens(), ", "), "]\n",
      "kv_bytes: ", info.kv_bytes(), "\n", "ttl_ms: ", info.ttl_ms(), "\n",
      "idle_ms: ", info.idle_ms(), "\n",
      "created: ", info.created() ? "true" : "false", "\n",
      info.parent_id().empty()
          ? ""
          : absl::StrCat("parent_id: ", info.parent_id(), "\n"));
}

ExitCode RunSessionCommand(const SessionCommand& c, std::ostream& out,
                           std::ostream& err) {
  const bool needs_session =
      c.action != "create" && c.action != "export" && c.action != "import";
  if (needs_session && c.sessions.empty()) {
    err << "error: --session is required for session " << c.action << "\n";
    return kExitUsage;
  }
  if (c.action != "step" && c.action != "export" && c.sessions.size() > 1) {
    err << "error: session " << c.action
        << " takes one --session (step and export take a comma list)\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      CreateChannels(c.connection);
  if (!channels.ok()) {
    err << "error: " << channels.status().message() << "\n";
    return kExitFileError;
  }
  Caller caller(c, channels->front());
  if (c.action == "export" || c.action == "import") {
    if (c.file.empty()) {
      err << "error: --file is required for session " << c.action << "\n";
      return kExitUsage;
    }
    return c.action == "export" ? Export(c, caller, out, err)
                                : Import(c, caller, out, err);
  }
  v1::SessionInfo info;
  if (c.action == "create") {
    v1::CreateSessionRequest r;
    if (!c.sessions.empty()) r.set_session_id(c.sessions.front());
    v1::SessionShape* s = r.mutable_shape();
    s->set_num_layers(c.layers);
    s->set_num_kv_heads(c.kv_heads);
    s->set_head_dim(c.head_dim);
    s->set_value_dim(c.value_dim);
    s->set_storage_dtype(c.storage_dtype);
    s->set_max_tokens(c.max_tokens);
    s->set_window_tokens(c.window_tokens);
    s->set_sink_tokens(c.sink_tokens);
    r.set_ttl_ms(absl::ToInt64Milliseconds(c.ttl));
    grpc::ClientContext context;
    caller.Prepare(&context);
    return Report(caller.stub().CreateSession(&context, r, &info), info, out,
                  err);
  }
  if (c.action == "info" || c.action == "append" || c.action == "step") {
    // append and step make tensors of the session's shape: ask it first.
    v1::GetSessionRequest r;
    r.set_session_id(c.sessions.front());
    grpc::ClientContext context;
    caller.Prepare(&context);
    const grpc::Status status = caller.stub().GetSession(&context, r, &info);
    if (c.action == "info" || !status.ok()) {
      return Report(status, info, out, err);
    }
    return c.action == "append" ? Append(c, caller, info.shape(), out, err)
                                : Step(c, caller, info.shape(), out, err);
  }
  grpc::ClientContext context;
  caller.Prepare(&context);
  if (c.action == "fork") {
    v1::ForkSessionRequest r;
    r.set_session_id(c.sessions.front());
    r.set_child_id(c.child);
    r.set_ttl_ms(absl::ToInt64Milliseconds(c.ttl));
    return Report(caller.stub().ForkSession(&context, r, &info), info, out,
                  err);
  }
  if (c.action == "truncate") {
    v1::TruncateSessionRequest r;
    r.set_session_id(c.sessions.front());
    r.set_tokens(c.tokens);
    return Report(caller.stub().TruncateSession(&context, r, &info), info, out,
                  err);
  }
  if (c.action == "close") {
    v1::CloseSessionRequest r;
    r.set_session_id(c.sessions.front());
    return Report(caller.stub().CloseSession(&context, r, &info), info, out,
                  err);
  }
  err << "error: unknown session action \"" << c.action
      << "\" (expected create, append, step, info, fork, truncate, close, "
         "export or import)\n";
  return kExitUsage;
}

}  // namespace attnserve::client
