#include "client/v2_messages.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/repeated_field.h"
#include "wire/dtype.h"
#include "wire/v2_names.h"

namespace attnserve::client {
namespace {

using inference::ModelInferRequest;
using Parameters =
    google::protobuf::Map<std::string, inference::InferParameter>;

// Triton's parameters of a tensor in a shared-memory region (docs/api.md,
// "System shared memory (Triton)").
void SetSharedMemory(const v1::SharedMemoryRef& ref, Parameters* p) {
  (*p)[wire::kV2SharedMemoryRegion].set_string_param(ref.region());
  (*p)[wire::kV2SharedMemoryOffset].set_int64_param(ref.offset());
  (*p)[wire::kV2SharedMemoryByteSize].set_int64_param(ref.byte_size());
}

inference::ModelInferRequest::InferInputTensor* AddInputHeader(
    const std::string& name, v1::DataType dtype,
    const google::protobuf::RepeatedField<int64_t>& shape,
    ModelInferRequest* r) {
  auto* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(wire::V2DataTypeName(dtype));
  *input->mutable_shape() = shape;
  return input;
}

void AddInput(const std::string& name, v1::DataType dtype,
              const google::protobuf::RepeatedField<int64_t>& shape,
              std::string bytes, ModelInferRequest* r) {
  AddInputHeader(name, dtype, shape, r);
  *r->add_raw_input_contents() = std::move(bytes);
}

// A tensor in a region has no raw_input_contents entry.
void AddTensor(const std::string& name, const v1::Tensor& t,
               ModelInferRequest* r) {
  if (t.has_shared_memory()) {
    SetSharedMemory(
        t.shared_memory(),
        AddInputHeader(name, t.dtype(), t.shape(), r)->mutable_parameters());
    return;
  }
  AddInput(name, t.dtype(), t.shape(), t.data(), r);
}

// Outputs written into a region are requested by name with its parameters;
// otherwise `outputs` stays empty (output, and weights when return_weights).
void AddOutputs(const v1::AttendRequest& request, ModelInferRequest* r) {
  if (!request.has_output_shared_memory() &&
      !request.has_weights_shared_memory()) {
    return;
  }
  auto* output = r->add_outputs();
  output->set_name(wire::kV2Output);
  if (request.has_output_shared_memory()) {
    SetSharedMemory(request.output_shared_memory(),
                    output->mutable_parameters());
  }
  if (request.return_weights() || request.has_weights_shared_memory()) {
    auto* weights = r->add_outputs();
    weights->set_name(wire::kV2Weights);
    if (request.has_weights_shared_memory()) {
      SetSharedMemory(request.weights_shared_memory(),
                      weights->mutable_parameters());
    }
  }
}

template <typename T>
void AddVector(const std::string& name, v1::DataType dtype,
               const google::protobuf::RepeatedField<T>& values,
               ModelInferRequest* r) {
  google::protobuf::RepeatedField<int64_t> shape;
  shape.Add(values.size());
  AddInput(name, dtype, shape,
           std::string(reinterpret_cast<const char*>(values.data()),
                       values.size() * sizeof(T)),
           r);
}

void AddMask(const v1::Mask& m, ModelInferRequest* r) {
  auto& p = *r->mutable_parameters();
  if (m.causal()) p[wire::kV2Causal].set_bool_param(true);
  if (m.alignment() != v1::ALIGNMENT_UNSPECIFIED) {
    p[wire::kV2Alignment].set_string_param(v1::Alignment_Name(m.alignment()));
  }
  if (m.has_window_left()) {
    p[wire::kV2WindowLeft].set_int64_param(m.window_left());
  }
  if (m.has_window_right()) {
    p[wire::kV2WindowRight].set_int64_param(m.window_right());
  }
  if (m.sink_tokens() != 0) {
    p[wire::kV2SinkTokens].set_int64_param(m.sink_tokens());
  }
  if (m.has_explicit_mask()) AddTensor(wire::kV2Mask, m.explicit_mask(), r);
  if (m.key_lengths_size() > 0) {
    AddVector(wire::kV2KeyLengths, v1::INT32, m.key_lengths(), r);
  }
  if (m.alibi_slopes_size() > 0) {
    AddVector(wire::kV2AlibiSlopes, v1::FLOAT32, m.alibi_slopes(), r);
  }
}

void AddCommon(bool return_weights, v1::DataType output_dtype,
               ModelInferRequest* r) {
  auto& p = *r->mutable_parameters();
  if (return_weights) p[wire::kV2ReturnWeights].set_bool_param(true);
  if (output_dtype != v1::DATA_TYPE_UNSPECIFIED) {
    p[wire::kV2OutputDatatype].set_string_param(
        wire::V2DataTypeName(output_dtype));
  }
}

int64_t Int64Parameter(const Parameters& p, const std::string& name) {
  const auto it = p.find(name);
  return it == p.end() ? 0 : it->second.int64_param();
}

}  // namespace

absl::Status CheckV2CanCarry(const v1::AttendRequest& request) {
  const char* what =
      request.has_linear()                 ? "linear attention"
      : request.has_lsh()                  ? "LSH attention"
      : request.mask().has_block_sparse()  ? "a block-sparse layout"
      : request.mask().has_relative_bias() ? "a relative position bias"
      : request.mask().has_relative_keys() ? "relative position keys"
                                           : nullptr;
  if (what == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--protocol=v2 cannot carry ", what,
                   " (the Open Inference Protocol mapping has no inputs or "
                   "parameters for it); use the native protocol"));
}

ModelInferRequest ToModelInferRequest(const v1::AttendRequest& request) {
  ModelInferRequest r;
  r.set_model_name(wire::kV2AttentionModel);
  r.set_id(request.request_id());
  AddTensor(wire::kV2Query, request.query(), &r);
  AddTensor(wire::kV2Key, request.key(), &r);
  AddTensor(wire::kV2Value, request.value(), &r);
  AddMask(request.mask(), &r);
  auto& p = *r.mutable_parameters();
  if (request.layout() != v1::LAYOUT_UNSPECIFIED) {
    p[wire::kV2Layout].set_string_param(v1::Layout_Name(request.layout()));
  }
  if (request.has_scale()) p[wire::kV2Scale].set_double_param(request.scale());
  if (request.has_softcap()) {
    p[wire::kV2Softcap].set_double_param(request.softcap());
  }
  if (request.sinks_size() > 0) {
    AddVector(wire::kV2Sinks, v1::FLOAT32, request.sinks(), &r);
  }
  AddCommon(request.return_weights(), request.output_dtype(), &r);
  AddOutputs(request, &r);
  return r;
}

ModelInferRequest ToModelInferRequest(const v1::ModelRequest& request) {
  ModelInferRequest r;
  r.set_model_name(request.model());
  r.set_id(request.request_id());
  AddTensor(wire::kV2Hidden, request.hidden(), &r);
  if (request.has_memory()) AddTensor(wire::kV2Memory, request.memory(), &r);
  if (request.has_positions()) {
    AddTensor(wire::kV2Positions, request.positions(), &r);
  }
  AddMask(request.mask(), &r);
  AddCommon(request.return_weights(), request.output_dtype(), &r);
  return r;
}

absl::StatusOr<v1::AttendResponse> FromModelInferResponse(
    inference::ModelInferResponse response) {
  v1::AttendResponse native;
  native.set_request_id(response.id());
  // One raw entry per output, in order (an output in a region has an empty
  // one), or none at all when every output is in a region.
  const int raw = response.raw_output_contents_size();
  if (raw != 0 && raw != response.outputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_output_contents: ", raw, " entries for ",
                     response.outputs_size(), " outputs"));
  }
  for (int i = 0; i < response.outputs_size(); ++i) {
    inference::ModelInferResponse::InferOutputTensor& out =
        *response.mutable_outputs(i);
    const std::string field =
        absl::StrCat("outputs[", i, "] (", out.name(), ")");
    v1::Tensor* t = out.name() == wire::kV2Output    ? native.mutable_output()
                    : out.name() == wire::kV2Weights ? native.mutable_weights()
                                                     : nullptr;
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": not an output of attnserve (output, weights)"));
    }
    // Every output sets its tensor's dtype (never unspecified) below.
    if (t->dtype() != v1::DATA_TYPE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": given twice"));
    }
    absl::StatusOr<v1::DataType> dtype =
        wire::DataTypeFromV2Name(out.datatype(), field + ".datatype");
    if (!dtype.ok()) return dtype.status();
    t->set_dtype(*dtype);
    t->mutable_shape()->Swap(out.mutable_shape());
    const Parameters& p = out.parameters();
    const auto region = p.find(wire::kV2SharedMemoryRegion);
    if (region != p.end()) {
      v1::SharedMemoryRef* ref = t->mutable_shared_memory();
      ref->set_region(region->second.string_param());
      ref->set_offset(Int64Parameter(p, wire::kV2SharedMemoryOffset));
      ref->set_byte_size(Int64Parameter(p, wire::kV2SharedMemoryByteSize));
    } else if (raw > 0) {
      t->mutable_data()->swap(*response.mutable_raw_output_contents(i));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": no raw_output_contents entry and no shared_memory_region"));
    }
  }
  if (!native.has_output()) {
    return absl::InvalidArgumentError("outputs: no \"output\"");
  }
  const Parameters& p = response.parameters();
  v1::Timing* timing = native.mutable_timing();
  timing->set_queue_us(Int64Parameter(p, wire::kV2TimingQueueUs));
  timing->set_compute_us(Int64Parameter(p, wire::kV2TimingComputeUs));
  timing->set_total_us(Int64Parameter(p, wire::kV2TimingTotalUs));
  timing->set_flops(
      static_cast<double>(Int64Parameter(p, wire::kV2TimingFlops)));
  return native;
}

}  // namespace attnserve::client
