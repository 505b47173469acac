#include "client/load/decode_bench.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "attnserve/v1/attention.grpc.pb.h"
#include "attnserve/v1/sessions.grpc.pb.h"
#include "client/load/latency_histogram.h"
#include "client/request_builder.h"
#include "client/rpc_status.h"
#include "client/session.h"
#include "client/step_channel.h"
#include "nlohmann/json.hpp"
#include "wire/attend_call.h"
#include "wire/dtype.h"

namespace attnserve::client {
namespace {

// What one phase measured.
struct Phase {
  LatencyHistogram steps;
  // Of the session steps: the server's time per step (receipt to answer,
  // Timing.total_us, summed over layers) and the kernel's (compute_us); the
  // rest of a step is the client's and the transport's.
  LatencyHistogram server;
  LatencyHistogram compute;
  int64_t tokens = 0;
  absl::Duration elapsed;
  int64_t request_bytes = 0;  // of the last step, summed over layers
  std::mutex mu;
  std::string first_error;
  std::atomic<int> errors{0};

  void Fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (errors++ == 0) first_error = what;
  }
};

// How the session steps travel, by its method's name.
const char* StepMethod(const DecodeBenchOptions& o) {
  if (o.same_host || o.tcp_channel) return "StepChannel";
  return o.stream ? "AttendSessionsStream" : "AttendSessions";
}

class Sequence {
 public:
  Sequence(const DecodeBenchOptions& o, std::shared_ptr<grpc::Channel> channel,
           std::string host, int index)
      : o_(o),
        channel_(channel),
        host_(std::move(host)),
        sessions_(v1::SessionService::NewStub(channel)),
        attention_(v1::AttentionService::NewStub(channel)),
        id_(absl::StrCat("decode-bench-", getpid(), "-", index)),
        seed_(1000 + index),
        // An int8 cache takes float keys and values: f32 ones.
        tensor_dtype_(o.storage_dtype == v1::INT8 ? v1::FLOAT32
                                                  : o.storage_dtype) {}

  const std::string& id() const { return id_; }

  void Prepare(grpc::ClientContext* context) const {
    PrepareSessionContext(o_.connection, id_, context);
  }

  bool Create(Phase& phase) {
    v1::CreateSessionRequest r;
    r.set_session_id(id_);
    v1::SessionShape* s = r.mutable_shape();
    s->set_num_layers(o_.layers);
    s->set_num_kv_heads(static_cast<int32_t>(o_.kv_heads));
    s->set_head_dim(static_cast<int32_t>(o_.head_dim));
    s->set_storage_dtype(o_.storage_dtype);
    s->set_max_tokens(o_.prefill + o_.steps);
    v1::SessionInfo info;
    grpc::ClientContext context;
    Prepare(&context);
    return Check(phase, "CreateSession",
                 sessions_->CreateSession(&context, r, &info));
  }

  bool Prefill(Phase& phase) {
    constexpr int64_t kChunk = 512;
    for (int layer = 0; layer < o_.layers; ++layer) {
      v1::SessionInfo info;
      grpc::ClientContext context;
      Prepare(&context);
      auto writer = sessions_->AppendKvStream(&context, &info);
      for (int64_t t = 0; t < o_.prefill; t += kChunk) {
        const int64_t n = std::min(kChunk, o_.prefill - t);
        v1::AppendKvRequest r;
        r.set_session_id(id_);
        r.set_layer(layer);
        r.set_position(t);
        *r.mutable_key() = RandomTensor(
            tensor_dtype_, {n, o_.kv_heads, o_.head_dim}, seed_, 2 * t);
        *r.mutable_value() = RandomTensor(
            tensor_dtype_, {n, o_.kv_heads, o_.head_dim}, seed_, 2 * t + 1);
        if (!writer->Write(r)) break;
      }
      writer->WritesDone();
      if (!Check(phase, "AppendKvStream", writer->Finish())) return false;
    }
    return true;
  }

  bool Step(Phase& phase, int64_t step) {
    const absl::Time start = absl::Now();
    int64_t bytes = 0;
    int64_t server_us = 0;
    int64_t compute_us = 0;
    for (int layer = 0; layer < o_.layers; ++layer) {
      v1::AttendSessionsRequest r;
      r.set_layer(layer);
      v1::SessionQuery* q = r.add_sessions();
      q->set_session_id(id_);
      *q->mutable_query() = RandomTensor(
          tensor_dtype_, {1, o_.heads, o_.head_dim}, seed_, 7 * step);
      *q->mutable_key() = RandomTensor(
          tensor_dtype_, {1, o_.kv_heads, o_.head_dim}, seed_, 7 * step + 1);
      *q->mutable_value() = RandomTensor(
          tensor_dtype_, {1, o_.kv_heads, o_.head_dim}, seed_, 7 * step + 2);
      q->set_position(o_.prefill + step);
      bytes += static_cast<int64_t>(r.ByteSizeLong());
      v1::AttendSessionsResponse response;
      if (!Check(phase, StepMethod(o_), Send(r, &response))) {
        return false;
      }
      server_us += response.timing().total_us();
      compute_us += response.timing().compute_us();
    }
    Record(phase, absl::Now() - start, bytes, absl::Microseconds(server_us),
           absl::Microseconds(compute_us));
    return true;
  }

  // Ends the step stream or channel, if one is open; false (and the phase's
  // error) when a stream does not end OK.
  bool EndStream(Phase& phase) {
    step_channel_.reset();
    if (stream_ == nullptr) return true;
    stream_->WritesDone();
    const grpc::Status st = stream_->Finish();
    stream_.reset();
    stream_context_.reset();
    return Check(phase, "AttendSessionsStream", st);
  }

  // The same step as an Attend call per layer carrying the whole cache
  // (BLHD, so that a prefix of the buffer is a prefix of the tokens).
  bool StatelessStep(Phase& phase, int64_t step) {
    const int64_t tokens = o_.prefill + step + 1;
    if (cache_.empty()) {
      cache_ = UniformBytes(
          tensor_dtype_,
          (o_.prefill + o_.steps + 1) * o_.kv_heads * o_.head_dim, seed_, 99);
    }
    const size_t used = static_cast<size_t>(tokens * o_.kv_heads * o_.head_dim *
                                            wire::ElementSize(tensor_dtype_));
    const absl::Time start = absl::Now();
    int64_t bytes = 0;
    for (int layer = 0; layer < o_.layers; ++layer) {
      v1::AttendRequest r;
      r.set_layout(v1::BLHD);
      *r.mutable_query() = RandomTensor(
          tensor_dtype_, {1, 1, o_.heads, o_.head_dim}, seed_, 7 * step);
      for (v1::Tensor* t : {r.mutable_key(), r.mutable_value()}) {
        t->set_dtype(tensor_dtype_);
        for (int64_t d : {int64_t{1}, tokens, o_.kv_heads, o_.head_dim}) {
          t->add_shape(d);
        }
        t->set_data(cache_.data(), used);
      }
      r.mutable_mask()->set_causal(true);
      r.mutable_mask()->set_alignment(v1::BOTTOM_RIGHT);
      bytes += static_cast<int64_t>(r.ByteSizeLong());
      v1::AttendResponse response;
      grpc::ClientContext context;
      PrepareContext(o_.connection, &context);
      if (!Check(phase, "Attend",
                 wire::CallAttend(*attention_, &context, r, &response))) {
        return false;
      }
    }
    Record(phase, absl::Now() - start, bytes);
    return true;
  }

  int64_t CloseAndCountBytes(Phase& phase) {
    v1::CloseSessionRequest r;
    r.set_session_id(id_);
    v1::SessionInfo info;
    grpc::ClientContext context;
    Prepare(&context);
    if (!Check(phase, "CloseSession",
               sessions_->CloseSession(&context, r, &info))) {
      return 0;
    }
    return info.kv_bytes();
  }

 private:
  // One step call, unary or as a message of the sequence's step stream (opened
  // at its first step); a message's error becomes its status.
  grpc::Status Send(const v1::AttendSessionsRequest& r,
                    v1::AttendSessionsResponse* response) {
    if (o_.same_host || o_.tcp_channel) return SendThroughChannel(r, response);
    if (!o_.stream) {
      grpc::ClientContext context;
      Prepare(&context);
      return sessions_->AttendSessions(&context, r, response);
    }
    if (stream_ == nullptr) {
      stream_context_ = std::make_unique<grpc::ClientContext>();
      Prepare(stream_context_.get());
      stream_ = sessions_->AttendSessionsStream(stream_context_.get());
    }
    if (!stream_->Write(r) || !stream_->Read(response)) {
      // The stream is over: its status, once (EndStream has nothing left).
      const grpc::Status status = stream_->Finish();
      stream_.reset();
      stream_context_.reset();
      return status;
    }
    return StepStatus(*response);
  }

  // The step through the sequence's step channel (opened at its first step).
  grpc::Status SendThroughChannel(const v1::AttendSessionsRequest& r,
                                  v1::AttendSessionsResponse* response) {
    absl::Status status;
    if (step_channel_ == nullptr) {
      absl::StatusOr<std::unique_ptr<StepChannel>> opened =
          o_.tcp_channel ? StepChannel::OpenTcp(channel_, o_.connection, host_)
                         : StepChannel::Open(channel_, o_.connection);
      status = opened.status();
      if (opened.ok()) step_channel_ = *std::move(opened);
    }
    if (status.ok()) status = step_channel_->Step(r, response);
    if (!status.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                          std::string(status.message()));
    }
    return StepStatus(*response);
  }

  // A step answered on a stream or a channel: its error fields as a status.
  static grpc::Status StepStatus(const v1::AttendSessionsResponse& response) {
    if (response.error_code() == 0) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(response.error_code()),
                        response.error_message());
  }

  bool Check(Phase& phase, const char* method, const grpc::Status& st) {
    if (st.ok()) return true;
    phase.Fail(absl::StrCat(method, " of ", id_, ": ", RpcErrorLine(st)));
    return false;
  }
  // A step; with `server` (a session step) also its server and kernel times.
  void Record(Phase& phase, absl::Duration latency, int64_t bytes,
              std::optional<absl::Duration> server = std::nullopt,
              absl::Duration compute = absl::ZeroDuration()) {
    std::lock_guard<std::mutex> lock(phase.mu);
    phase.steps.Record(latency);
    ++phase.tokens;
    phase.request_bytes = bytes;
    if (server) {
      phase.server.Record(*server);
      phase.compute.Record(compute);
    }
  }

  const DecodeBenchOptions& o_;
  const std::shared_ptr<grpc::Channel> channel_;
  // The host of channel_'s target (a TCP step channel connects there).
  const std::string host_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::AttentionService::Stub> attention_;
  const std::string id_;
  const uint64_t seed_;
  const v1::DataType tensor_dtype_;
  std::string cache_;
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AttendSessionsRequest,
                                           v1::AttendSessionsResponse>>
      stream_;
  std::unique_ptr<StepChannel> step_channel_;
};

// Runs `body(sequence)` on one thread per sequence and times the whole.
template <typename Body>
void RunAll(std::vector<std::unique_ptr<Sequence>>& seqs, Phase& phase,
            Body body) {
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (auto& s : seqs) threads.emplace_back([&, seq = s.get()] { body(*seq); });
  for (std::thread& t : threads) t.join();
  phase.elapsed = absl::Now() - start;
}

double Micros(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

nlohmann::json PhaseJson(const Phase& p) {
  const double seconds = absl::ToDoubleSeconds(p.elapsed);
  return {{"tokens", p.tokens},
          {"seconds", seconds},
          {"tokens_per_s", seconds > 0 ? p.tokens / seconds : 0},
          {"step_p50_us", Micros(p.steps.Percentile(50))},
          {"step_p99_us", Micros(p.steps.Percentile(99))},
          {"request_bytes_per_step", p.request_bytes}};
}

}  // namespace

ExitCode RunDecodeBench(const DecodeBenchOptions& o, std::ostream& out,
                        std::ostream& err) {
  if (o.sequences < 1 || o.prefill < 0 || o.steps < 1 || o.layers < 1 ||
      o.heads < 1 || o.kv_heads < 1 || o.heads % o.kv_heads != 0 ||
      o.head_dim < 1 || o.stateless_steps < 0 || o.stateless_steps > o.steps ||
      int{o.stream} + int{o.same_host} + int{o.tcp_channel} > 1) {
    err << "error: --decode needs --sequences >= 1, --prefill >= 0, "
           "--steps >= 1, --layers >= 1, --heads a multiple of --kv_heads, "
           "--dim >= 1, 0 <= --stateless_steps <= --steps, and at most one "
           "of --stream, --shm and --tcp_channel\n";
    return kExitUsage;
  }
  const int connections = ConnectionsFor(o.connections, o.sequences);
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      CreateChannels(o.connection, connections);
  if (!channels.ok()) {
    err << "error: " << channels.status().message() << "\n";
    return kExitFileError;
  }
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < o.sequences; ++i) {
    // CreateChannels: every target's connection k, then every one's k + 1.
    const size_t c = static_cast<size_t>(i) % channels->size();
    seqs.push_back(std::make_unique<Sequence>(
        o, (*channels)[c],
        TargetHost(o.connection.targets[c % o.connection.targets.size()]), i));
  }
  Phase setup, sessions, stateless;
  RunAll(seqs, setup,
         [&](Sequence& s) { s.Create(setup) && s.Prefill(setup); });
  if (setup.errors == 0) {
    RunAll(seqs, sessions, [&](Sequence& s) {
      for (int64_t step = 0; step < o.steps && s.Step(sessions, step); ++step) {
      }
      s.EndStream(sessions);
    });
  }
  int64_t kv_bytes = 0;
  for (auto& s : seqs) kv_bytes += s->CloseAndCountBytes(setup);
  if (setup.errors == 0 && sessions.errors == 0 && o.stateless_steps > 0) {
    RunAll(seqs, stateless, [&](Sequence& s) {
      for (int64_t step = 0;
           step < o.stateless_steps && s.StatelessStep(stateless, step);
           ++step) {
      }
    });
  }
  for (Phase* p : {&setup, &sessions, &stateless}) {
    if (p->errors > 0) {
      err << "error: " << p->errors
          << " calls failed; the first: " << p->first_error << "\n";
      return kExitRpcFailed;
    }
  }
  nlohmann::json j = {
      {"mode", "decode"},
      {"sequences", o.sequences},
      {"connections_per_target", connections},
      {"prefill", o.prefill},
      {"steps", o.steps},
      {"layers", o.layers},
      {"heads", o.heads},
      {"kv_heads", o.kv_heads},
      {"head_dim", o.head_dim},
      {"storage_dtype", wire::ShortDataTypeName(o.storage_dtype)},
      {"kv_bytes", kv_bytes},
      {"stream", o.stream},
      {"same_host", o.same_host},
      {"tcp_channel", o.tcp_channel},
      {"sessions", PhaseJson(sessions)}};
  j["sessions"]["server_p50_us"] = Micros(sessions.server.Percentile(50));
  j["sessions"]["compute_p50_us"] = Micros(sessions.compute.Percentile(50));
  if (o.stateless_steps > 0) {
    j["stateless"] = PhaseJson(stateless);
    j["step_p50_speedup"] =
        Micros(stateless.steps.Percentile(50)) /
        std::max(1e-9, Micros(sessions.steps.Percentile(50)));
  }
  if (o.json) {
    out << j.dump() << "\n";
    return kExitOk;
  }
  out << absl::StrFormat(
      "decode: %d sequences on %d connection%s per target, prefill %d, %d "
      "steps over %d layers; Hq %d, Hkv %d, D %d, %s; sessions hold %.1f MiB "
      "of KV\n",
      o.sequences, connections, connections == 1 ? "" : "s", o.prefill, o.steps,
      o.layers, o.heads, o.kv_heads, o.head_dim,
      wire::ShortDataTypeName(o.storage_dtype), kv_bytes / 1048576.0);
  out << absl::StrFormat("%-10s %10s %12s %12s %14s\n", "", "tokens/s",
                         "step_p50_us", "step_p99_us", "bytes/step");
  for (const auto& [name, p] :
       {std::pair<const char*, const Phase*>{"sessions", &sessions},
        {"stateless", &stateless}}) {
    if (p == &stateless && o.stateless_steps == 0) continue;
    const double seconds = absl::ToDoubleSeconds(p->elapsed);
    out << absl::StrFormat("%-10s %10.1f %12.0f %12.0f %14d\n", name,
                           seconds > 0 ? p->tokens / seconds : 0.0,
                           Micros(p->steps.Percentile(50)),
                           Micros(p->steps.Percentile(99)), p->request_bytes);
  }
  // Where a session step's time goes, at the median of each part.
  const double step_p50 = Micros(sessions.steps.Percentile(50));
  const double server_p50 = Micros(sessions.server.Percentile(50));
  const double compute_p50 = Micros(sessions.compute.Percentile(50));
  out << absl::StrFormat(
      "session step p50 %.0f us (%s): kernel %.0f, rest of the server %.0f, "
      "client and transport %.0f\n",
      step_p50, StepMethod(o), compute_p50,
      std::max(0.0, server_p50 - compute_p50),
      std::max(0.0, step_p50 - server_p50));
  if (o.stateless_steps > 0) {
    out << absl::StrFormat("step p50 speedup of sessions: %.1fx\n",
                           j["step_p50_speedup"].get<double>());
  }
  return kExitOk;
}

}  // namespace attnserve::client
