// Writes the libFuzzer target's seed corpus (tests/fuzz/corpus/): valid and
// edge-case messages of every family, each file byte 0 (fuzz_input.h) and one
// serialized message. Deterministic: the same files on every run, so that
// the fuzz_corpus_current test can hold the committed corpus to it.
//
//   attnserve_fuzz_corpus DIR
//
// Regenerate the committed corpus with
//   build/tests/fuzz/attnserve_fuzz_corpus tests/fuzz/corpus

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "attnserve/v1/attention.pb.h"
#include "attnserve/v1/sessions.pb.h"
#include "base/random.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "inference/grpc_predict_v2.pb.h"
#include "kvcache/session_snapshot.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/seed_requests.h"

namespace attnserve::fuzz {
namespace {

using Rng = base::SplitMix64;
using inference::ModelInferRequest;

class CorpusWriter {
 public:
  explicit CorpusWriter(std::string dir) : dir_(std::move(dir)) {}

  void Add(const std::string& name, Family family,
           const google::protobuf::Message& message, bool evict = false) {
    std::string bytes(1, static_cast<char>(HeaderByte(family, evict)));
    {
      // Maps (the v2 parameters) in key order: the same bytes on every run.
      google::protobuf::io::StringOutputStream stream(&bytes);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      message.SerializeToCodedStream(&coded);
    }
    const std::string path = dir_ + "/" + name + ".bin";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "attnserve_fuzz_corpus: cannot write %s\n",
                   path.c_str());
      ok_ = false;
    }
    ++count_;
  }
  bool ok() const { return ok_; }
  int count() const { return count_; }

 private:
  std::string dir_;
  bool ok_ = true;
  int count_ = 0;
};

void AttendSeeds(Rng& rng, CorpusWriter& out) {
  const std::vector<v1::AttendRequest> seeds = SeedAttendRequests(rng);
  for (size_t i = 0; i < seeds.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "attend_%02zu", i);
    out.Add(name, Family::kAttend, seeds[i]);
  }
  // The limits (fuzz_input.h's), from inputs well under -max_len: weights of
  // 300 x 300 (360 KB of response), and 1.02e6 FLOPs of 64 query heads over
  // 500 keys.
  {
    v1::AttendRequest r;
    FillTensor(rng, v1::FLOAT32, {1, 1, 300, 1}, r.mutable_query());
    FillTensor(rng, v1::FLOAT32, {1, 1, 300, 1}, r.mutable_key());
    FillTensor(rng, v1::FLOAT32, {1, 1, 300, 1}, r.mutable_value());
    r.set_return_weights(true);
    out.Add("attend_refused_response_bytes", Family::kAttend, r);
    FillTensor(rng, v1::BFLOAT16, {1, 64, 8, 1}, r.mutable_query());
    FillTensor(rng, v1::BFLOAT16, {1, 1, 500, 1}, r.mutable_key());
    FillTensor(rng, v1::BFLOAT16, {1, 1, 500, 1}, r.mutable_value());
    r.set_return_weights(false);
    out.Add("attend_refused_flops", Family::kAttend, r);
  }
  // Weight statistics without the weights, and refused with LSH.
  v1::AttendRequest r = seeds[0];
  r.set_return_weight_stats(true);
  out.Add("attend_weight_stats", Family::kAttend, r);
  // StreamingLLM's mask: a window with the first keys kept.
  r = seeds[0];
  r.mutable_mask()->set_causal(true);
  r.mutable_mask()->set_window_left(3);
  r.mutable_mask()->set_sink_tokens(2);
  out.Add("attend_sink_tokens", Family::kAttend, r);
  // Relative position keys: a shared table of 5 rows, a query bias.
  r = seeds[0];
  {
    const int64_t heads = r.query().shape(1), dim = r.query().shape(3);
    v1::RelativeKeys* keys = r.mutable_mask()->mutable_relative_keys();
    // Fixed values: the seeds after this one draw what they drew before.
    v1::Tensor* table = keys->mutable_table();
    table->set_dtype(v1::FLOAT32);
    for (int64_t d : {int64_t{1}, int64_t{5}, dim}) table->add_shape(d);
    std::vector<float> values(static_cast<size_t>(5 * dim));
    for (size_t e = 0; e < values.size(); ++e) values[e] = 0.125f * (e % 7);
    table->set_data(values.data(), values.size() * sizeof(float));
    keys->set_zero_row(2);
    for (int64_t e = 0; e < heads * dim; ++e) keys->add_query_bias(0.25f);
  }
  out.Add("attend_relative_keys", Family::kAttend, r);
  // Edges the decoder refuses: an unknown layout, LSH with a key.
  r = seeds[0];
  r.set_layout(static_cast<v1::Layout>(7));
  out.Add("attend_refused_layout", Family::kAttend, r);
  r = seeds[0];
  r.mutable_lsh()->set_num_hashes(1);
  r.mutable_lsh()->set_num_buckets(2);
  r.mutable_lsh()->set_chunk_size(2);
  out.Add("attend_refused_lsh_key", Family::kAttend, r);
  {
    // The first Attend seed as the data of AttendPieces; announced with a
    // byte too many (refused).
    const std::string bytes = seeds[0].SerializeAsString();
    v1::RequestPiece piece;
    piece.set_request_bytes(static_cast<int64_t>(bytes.size()));
    piece.set_data(bytes);
    out.Add("pieces", Family::kAttendPieces, piece);
    piece.set_request_bytes(piece.request_bytes() + 1);
    out.Add("pieces_refused_short", Family::kAttendPieces, piece);
  }
}

void ModelSeeds(Rng& rng, CorpusWriter& out) {
  {
    // "dot": self-attention, f32, positions, causal with padding.
    v1::ModelRequest r;
    r.set_model("dot");
    FillTensor(rng, v1::FLOAT32, {2, 3, 16}, r.mutable_hidden());
    r.mutable_positions()->set_dtype(v1::INT32);
    r.mutable_positions()->add_shape(2);
    r.mutable_positions()->add_shape(3);
    const int32_t positions[] = {0, 1, 2, 5, 6, 7};
    r.mutable_positions()->set_data(positions, sizeof(positions));
    r.mutable_mask()->set_causal(true);
    r.mutable_mask()->add_key_lengths(3);
    r.mutable_mask()->add_key_lengths(2);
    out.Add("model_dot_self", Family::kModel, r);
  }
  {
    // "additive": cross-attention over bf16 memory, every mask part, weights.
    v1::ModelRequest r;
    r.set_model("additive");
    FillTensor(rng, v1::BFLOAT16, {1, 2, 12}, r.mutable_hidden());
    FillTensor(rng, v1::BFLOAT16, {1, 4, 12}, r.mutable_memory());
    v1::Mask* m = r.mutable_mask();
    m->set_causal(true);
    m->set_alignment(v1::BOTTOM_RIGHT);
    m->set_window_left(2);
    FillTensor(rng, v1::BOOL, {1, 2, 4}, m->mutable_explicit_mask());
    for (int h = 0; h < 4; ++h) m->add_alibi_slopes(0.25f * (h + 1));
    r.set_return_weights(true);
    r.set_output_dtype(v1::FLOAT32);
    out.Add("model_additive_cross", Family::kModel, r);
  }
  {
    // "general": f16 hidden, f32 additive mask, bf16 output.
    v1::ModelRequest r;
    r.set_model("general");
    FillTensor(rng, v1::FLOAT16, {1, 4, 8}, r.mutable_hidden());
    FillTensor(rng, v1::FLOAT32, {4, 4},
               r.mutable_mask()->mutable_explicit_mask());
    r.set_output_dtype(v1::BFLOAT16);
    out.Add("model_general_f16", Family::kModel, r);
  }
  {
    // Edge: no batch, with positions of that shape.
    v1::ModelRequest r;
    r.set_model("additive");
    FillTensor(rng, v1::FLOAT32, {0, 3, 12}, r.mutable_hidden());
    r.mutable_positions()->set_dtype(v1::INT32);
    r.mutable_positions()->add_shape(0);
    r.mutable_positions()->add_shape(3);
    out.Add("model_edge_no_batch", Family::kModel, r);
  }
  {
    v1::ModelRequest r;
    r.set_model("no_such_model");
    FillTensor(rng, v1::FLOAT32, {1, 1, 16}, r.mutable_hidden());
    out.Add("model_refused_not_found", Family::kModel, r);
  }
}

ModelInferRequest::InferInputTensor* RawInput(
    Rng& rng, ModelInferRequest* r, const std::string& name,
    const std::string& datatype, v1::DataType dtype,
    const std::vector<int64_t>& shape) {
  ModelInferRequest::InferInputTensor* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  v1::Tensor t;
  FillTensor(rng, dtype, shape, &t);
  *r->add_raw_input_contents() = t.data();
  return input;
}

void InferSeeds(Rng& rng, CorpusWriter& out) {
  {
    // attention, raw FP32 contents, every parameter kind.
    ModelInferRequest r;
    r.set_model_name("attention");
    r.set_model_version("1");
    r.set_id("seed");
    RawInput(rng, &r, "query", "FP32", v1::FLOAT32, {1, 2, 3, 4});
    RawInput(rng, &r, "key", "FP32", v1::FLOAT32, {1, 2, 5, 4});
    RawInput(rng, &r, "value", "FP32", v1::FLOAT32, {1, 2, 5, 4});
    RawInput(rng, &r, "mask", "BOOL", v1::BOOL, {1, 1, 3, 5});
    ModelInferRequest::InferInputTensor* lengths = r.add_inputs();
    lengths->set_name("key_lengths");
    lengths->set_datatype("INT32");
    lengths->add_shape(1);
    const int32_t five = 5;
    r.add_raw_input_contents()->assign(reinterpret_cast<const char*>(&five),
                                       sizeof(five));
    auto& p = *r.mutable_parameters();
    p["causal"].set_bool_param(true);
    p["alignment"].set_string_param("bottom_right");
    p["scale"].set_double_param(0.5);
    p["window_left"].set_int64_param(3);
    p["window_right"].set_uint64_param(1);
    p["layout"].set_string_param("BHLD");
    p["output_datatype"].set_string_param("FP32");
    r.add_outputs()->set_name("output");
    r.add_outputs()->set_name("weights");
    out.Add("infer_attention_raw", Family::kInfer, r);
  }
  {
    // attention, typed contents (fp32, int, alibi slopes), BLHD.
    ModelInferRequest r;
    r.set_model_name("attention");
    for (const char* name : {"query", "key", "value"}) {
      ModelInferRequest::InferInputTensor* input = r.add_inputs();
      input->set_name(name);
      input->set_datatype("FP32");
      for (int64_t d : {1, 2, 2, 2}) input->add_shape(d);
      for (int i = 0; i < 8; ++i) {
        input->mutable_contents()->add_fp32_contents(rng.Uniform(-1, 1));
      }
    }
    ModelInferRequest::InferInputTensor* alibi = r.add_inputs();
    alibi->set_name("alibi_slopes");
    alibi->set_datatype("FP32");
    alibi->add_shape(2);
    alibi->mutable_contents()->add_fp32_contents(0.5f);
    alibi->mutable_contents()->add_fp32_contents(0.25f);
    ModelInferRequest::InferInputTensor* lengths = r.add_inputs();
    lengths->set_name("key_lengths");
    lengths->set_datatype("INT32");
    lengths->add_shape(1);
    lengths->mutable_contents()->add_int_contents(1);
    (*r.mutable_parameters())["layout"].set_string_param("BLHD");
    (*r.mutable_parameters())["scale"].set_string_param("0.7");
    out.Add("infer_attention_typed", Family::kInfer, r);
  }
  {
    // A hosted model, BF16 raw hidden and memory, INT32 positions.
    ModelInferRequest r;
    r.set_model_name("dot");
    RawInput(rng, &r, "hidden", "BF16", v1::BFLOAT16, {1, 2, 16});
    RawInput(rng, &r, "memory", "BF16", v1::BFLOAT16, {1, 3, 16});
    ModelInferRequest::InferInputTensor* positions = r.add_inputs();
    positions->set_name("positions");
    positions->set_datatype("INT32");
    positions->add_shape(1);
    positions->add_shape(2);
    const int32_t at[] = {3, 4};
    r.add_raw_input_contents()->assign(reinterpret_cast<const char*>(at),
                                       sizeof(at));
    (*r.mutable_parameters())["return_weights"].set_bool_param(true);
    (*r.mutable_parameters())["output_datatype"].set_string_param("BF16");
    out.Add("infer_hosted_raw", Family::kInfer, r);
  }
  {
    // Typed contents of a shape with a negative dimension.
    ModelInferRequest r;
    r.set_model_name("attention");
    for (const char* name : {"query", "key", "value"}) {
      ModelInferRequest::InferInputTensor* input = r.add_inputs();
      input->set_name(name);
      input->set_datatype("FP32");
      for (int64_t d : {1, -2, 1, -2}) input->add_shape(d);
      for (int i = 0; i < 4; ++i)
        input->mutable_contents()->add_fp32_contents(1);
    }
    out.Add("infer_refused_negative_dim", Family::kInfer, r);
  }
  {
    ModelInferRequest r;
    r.set_model_name("attention");
    r.set_model_version("2");
    out.Add("infer_refused_version", Family::kInfer, r);
  }
  {
    // Triton's shared-memory parameters: query and key and the output in a
    // region (the value raw, the only raw entry). The fuzz target has no
    // registry, so the native decoder refuses it naming --shared_memory;
    // mutations reach the parameters' checks in ToNative.
    ModelInferRequest r;
    r.set_model_name("attention");
    const int64_t bytes = 1 * 2 * 3 * 4 * 4;
    for (const char* name : {"query", "key"}) {
      ModelInferRequest::InferInputTensor* input = r.add_inputs();
      input->set_name(name);
      input->set_datatype("FP32");
      for (int64_t d : {1, 2, 3, 4}) input->add_shape(d);
      auto& p = *input->mutable_parameters();
      p["shared_memory_region"].set_string_param("r");
      p["shared_memory_offset"].set_int64_param(name[0] == 'q' ? 0 : bytes);
      p["shared_memory_byte_size"].set_int64_param(bytes);
    }
    // Fixed bytes, not the generator's: the seeds after these stay as they
    // were.
    ModelInferRequest::InferInputTensor* value = r.add_inputs();
    value->set_name("value");
    value->set_datatype("FP32");
    for (int64_t d : {1, 2, 3, 4}) value->add_shape(d);
    r.add_raw_input_contents()->assign(bytes, '\x3c');
    auto* output = r.add_outputs();
    output->set_name("output");
    auto& p = *output->mutable_parameters();
    p["shared_memory_region"].set_string_param("r");
    p["shared_memory_offset"].set_int64_param(2 * bytes);
    p["shared_memory_byte_size"].set_int64_param(bytes);
    out.Add("infer_refused_shared_memory_off", Family::kInfer, r);
  }
  {
    // A region without its byte size, and a raw entry for it.
    ModelInferRequest r;
    r.set_model_name("attention");
    ModelInferRequest::InferInputTensor* query = r.add_inputs();
    query->set_name("query");
    query->set_datatype("FP32");
    for (int64_t d : {1, 2, 3, 4}) query->add_shape(d);
    r.add_raw_input_contents()->assign(96, '\x3c');
    (*query->mutable_parameters())["shared_memory_region"].set_string_param(
        "r");
    out.Add("infer_refused_shared_memory_size", Family::kInfer, r);
  }
}

v1::Tensor Rows(Rng& rng, v1::DataType dtype, int64_t rows, int64_t heads,
                int64_t dim) {
  v1::Tensor t;
  FillTensor(rng, dtype, {rows, heads, dim}, &t);
  return t;
}

void SessionSeeds(Rng& rng, CorpusWriter& out) {
  {
    // A decode step on "a", f32.
    v1::AttendSessionsRequest r;
    r.set_request_id("seed");
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id("a");
    *q->mutable_query() = Rows(rng, v1::FLOAT32, 1, 4, kDimAB);
    out.Add("sessions_decode", Family::kAttendSessions, r);
    // With relative keys: a shared table of 3 rows (fixed values, so that
    // the seeds after this one draw what they drew before).
    v1::RelativeKeys* keys = r.mutable_relative_keys();
    v1::Tensor* table = keys->mutable_table();
    table->set_dtype(v1::FLOAT32);
    for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{kDimAB}}) {
      table->add_shape(d);
    }
    std::vector<float> values(static_cast<size_t>(3 * kDimAB), 0.5f);
    table->set_data(values.data(), values.size() * sizeof(float));
    keys->set_zero_row(1);
    out.Add("sessions_relative_keys", Family::kAttendSessions, r);
  }
  {
    // "a" and its fork "c", each appending (the fork copies its shared last
    // block first), with positions; f16 queries converted to f32.
    v1::AttendSessionsRequest r;
    r.set_layer(0);
    for (const char* id : {"a", "c"}) {
      v1::SessionQuery* q = r.add_sessions();
      q->set_session_id(id);
      *q->mutable_query() = Rows(rng, v1::FLOAT16, 2, 2, kDimAB);
      *q->mutable_key() = Rows(rng, v1::FLOAT16, 2, kHeadsAB, kDimAB);
      *q->mutable_value() = Rows(rng, v1::FLOAT32, 2, kHeadsAB, kDimAB);
      q->set_position(6);
    }
    out.Add("sessions_append_fork", Family::kAttendSessions, r);
    out.Add("sessions_append_fork_evict", Family::kAttendSessions, r, true);
  }
  {
    // "b" (bf16): weights, a window, ALiBi, a scale, not causal.
    v1::AttendSessionsRequest r;
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id("b");
    *q->mutable_query() = Rows(rng, v1::BFLOAT16, 3, 2, kDimAB);
    r.set_causal(false);
    r.set_window_left(2);
    r.add_alibi_slopes(0.5f);
    r.add_alibi_slopes(0.125f);
    r.set_scale(0.3f);
    r.set_return_weights(true);
    r.set_output_dtype(v1::FLOAT16);
    out.Add("sessions_bf16_weights", Family::kAttendSessions, r);
    r.set_return_weights(false);
    r.set_return_weight_stats(true);
    out.Add("sessions_bf16_weight_stats", Family::kAttendSessions, r);
  }
  {
    // "d", empty until this call: its first tokens and queries, layer 1.
    v1::AttendSessionsRequest r;
    r.set_layer(1);
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id("d");
    *q->mutable_query() = Rows(rng, v1::FLOAT16, 2, 2, kHeadDimD);
    *q->mutable_key() = Rows(rng, v1::FLOAT16, 2, kHeadsD, kHeadDimD);
    *q->mutable_value() = Rows(rng, v1::FLOAT16, 2, kHeadsD, kValueDimD);
    out.Add("sessions_first_tokens", Family::kAttendSessions, r);
  }
  {
    // Refused before the append they carry: no query heads; ALiBi slopes of
    // the wrong count; one session named twice.
    v1::AttendSessionsRequest r;
    v1::SessionQuery* q = r.add_sessions();
    q->set_session_id("a");
    *q->mutable_query() = Rows(rng, v1::FLOAT32, 1, 0, kDimAB);
    *q->mutable_key() = Rows(rng, v1::FLOAT32, 1, kHeadsAB, kDimAB);
    *q->mutable_value() = Rows(rng, v1::FLOAT32, 1, kHeadsAB, kDimAB);
    out.Add("sessions_refused_no_heads", Family::kAttendSessions, r);
    *q->mutable_query() = Rows(rng, v1::FLOAT32, 1, 2, kDimAB);
    r.add_alibi_slopes(0.5f);
    out.Add("sessions_refused_alibi_count", Family::kAttendSessions, r);
    r.clear_alibi_slopes();
    *r.add_sessions() = *q;
    out.Add("sessions_refused_twice", Family::kAttendSessions, r);
  }
  {
    v1::CreateSessionRequest r;
    r.set_session_id("e");
    v1::SessionShape* s = r.mutable_shape();
    s->set_num_layers(1);
    s->set_num_kv_heads(2);
    s->set_head_dim(4);
    s->set_storage_dtype(v1::BFLOAT16);
    s->set_max_tokens(32);
    r.set_ttl_ms(60000);
    out.Add("create_new", Family::kCreateSession, r);
    r.clear_session_id();
    out.Add("create_server_id", Family::kCreateSession, r);
    // A sink + window session.
    r.set_session_id("w");
    s->set_window_tokens(8);
    s->set_sink_tokens(2);
    s->set_max_tokens(int64_t{1} << 40);
    out.Add("create_sink_window", Family::kCreateSession, r);
    s->set_window_tokens(0);
    s->set_sink_tokens(0);
    s->set_max_tokens(32);
    // A retry of "a": same shape, answered with the session.
    r.set_session_id("a");
    s->set_num_layers(kNumLayers);
    s->set_head_dim(kDimAB);
    s->set_value_dim(kDimAB);
    s->set_storage_dtype(v1::FLOAT32);
    s->set_max_tokens(64);
    out.Add("create_retry", Family::kCreateSession, r);
  }
  {
    v1::AppendKvRequest r;
    r.set_session_id("a");
    r.set_layer(1);
    r.set_position(3);
    *r.mutable_key() = Rows(rng, v1::FLOAT32, 3, kHeadsAB, kDimAB);
    *r.mutable_value() = Rows(rng, v1::BFLOAT16, 3, kHeadsAB, kDimAB);
    out.Add("append_a", Family::kAppendKv, r);
    r.set_session_id("c");
    out.Add("append_fork", Family::kAppendKv, r);
    // More than the budget holds: refused, or (evicting) others make room.
    r.set_session_id("b");
    r.clear_position();
    *r.mutable_key() = Rows(rng, v1::BFLOAT16, 40, kHeadsAB, kDimAB);
    *r.mutable_value() = Rows(rng, v1::BFLOAT16, 40, kHeadsAB, kDimAB);
    out.Add("append_refused_budget", Family::kAppendKv, r);
    out.Add("append_over_budget_evict", Family::kAppendKv, r, true);
  }
  {
    v1::ForkSessionRequest r;
    r.set_session_id("c");
    r.set_child_id("e");
    r.set_ttl_ms(1000);
    out.Add("fork", Family::kForkSession, r);
  }
  {
    v1::TruncateSessionRequest r;
    r.set_session_id("a");
    r.set_tokens(2);
    out.Add("truncate", Family::kTruncateSession, r);
  }
  {
    v1::CloseSessionRequest r;
    r.set_session_id("a");
    out.Add("close_parent", Family::kCloseSession, r);
  }
  {
    v1::GetSessionRequest r;
    r.set_session_id("c");
    out.Add("get", Family::kGetSession, r);
  }
  {
    // Sessions "a" (f32) and "b" (bf16) of the fuzz store as snapshots of new
    // ids "x" and "y", back to back; and "a" under its own id (live: refused).
    absl::StatusOr<std::unique_ptr<kvcache::SessionStore>> store =
        MakeSessionStore(false);
    absl::StatusOr<std::vector<kvcache::ExportedSession>> e =
        (*store)->Export({"a", "b"}, false);
    v1::SessionTransferChunk r;
    kvcache::ExportedSession x = (*e)[0], y = (*e)[1];
    x.header.id = "x";
    y.header.id = "y";
    r.set_data(kvcache::SnapshotBytes(x) + kvcache::SnapshotBytes(y));
    out.Add("import_two", Family::kImportSessions, r);
    r.set_data(kvcache::SnapshotBytes((*e)[0]));
    out.Add("import_refused_live_id", Family::kImportSessions, r);
  }
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: attnserve_fuzz_corpus DIR\n");
    return 2;
  }
  CorpusWriter out(argv[1]);
  Rng rng(kModelSeed);
  AttendSeeds(rng, out);
  ModelSeeds(rng, out);
  InferSeeds(rng, out);
  SessionSeeds(rng, out);
  if (!out.ok()) return 1;
  std::printf("attnserve_fuzz_corpus: wrote %d files to %s\n", out.count(),
              argv[1]);
  return 0;
}

}  // namespace
}  // namespace attnserve::fuzz

int main(int argc, char** argv) { return attnserve::fuzz::Main(argc, argv); }
