#include "server/kserve/infer_codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "wire/dtype.h"
#include "wire/v2_names.h"

// Typed contents are the host's floats and ints; the wire is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "typed contents are copied as little-endian bytes");

namespace attnserve::server::kserve {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;

// Model outputs by index (ModelInterface::outputs): every model's "output"
// and "weights", then model "attention"'s weight statistics.
constexpr int kOutputIndex = 0;
constexpr int kWeightsIndex = 1;
constexpr int kEntropyIndex = 2;
constexpr int kMaxWeightIndex = 3;

// What a request's parameters ask the response to carry.
struct Returned {
  bool weights = false;
  bool weight_stats = false;
};

const std::vector<v1::DataType>& FloatTypes() {
  static const auto* const types =
      new std::vector<v1::DataType>{v1::FLOAT32, v1::BFLOAT16, v1::FLOAT16};
  return *types;
}

TensorSpec Spec(std::string name, std::vector<v1::DataType> datatypes,
                std::vector<int64_t> shape, bool optional) {
  return TensorSpec{std::move(name), std::move(datatypes), std::move(shape),
                    optional};
}

// The mask inputs both kinds of model take.
void AddMaskInputs(std::vector<TensorSpec>* inputs) {
  inputs->push_back(Spec(wire::kV2Mask, {v1::BOOL, v1::FLOAT32},
                         {-1, -1, -1, -1},
                         /*optional=*/true));
  inputs->push_back(Spec(wire::kV2KeyLengths, {v1::INT32}, {-1}, true));
  inputs->push_back(Spec(wire::kV2AlibiSlopes, {v1::FLOAT32}, {-1}, true));
}

ModelInterface AttentionInterface() {
  ModelInterface m;
  m.name = wire::kV2AttentionModel;
  const std::vector<int64_t> rank4 = {-1, -1, -1, -1};
  for (const char* name : {wire::kV2Query, wire::kV2Key, wire::kV2Value}) {
    m.inputs.push_back(Spec(name, FloatTypes(), rank4, false));
  }
  AddMaskInputs(&m.inputs);
  m.inputs.push_back(Spec(wire::kV2Sinks, {v1::FLOAT32}, {-1}, true));
  m.outputs.push_back(Spec(wire::kV2Output, FloatTypes(), rank4, false));
  m.outputs.push_back(Spec(wire::kV2Weights, {v1::FLOAT32}, rank4, true));
  const std::vector<int64_t> rank3 = {-1, -1, -1};
  m.outputs.push_back(Spec(wire::kV2Entropy, {v1::FLOAT32}, rank3, true));
  m.outputs.push_back(Spec(wire::kV2MaxWeight, {v1::FLOAT32}, rank3, true));
  m.parameters = {
      wire::kV2Causal,     wire::kV2Alignment,     wire::kV2Scale,
      wire::kV2Softcap,    wire::kV2WindowLeft,    wire::kV2WindowRight,
      wire::kV2SinkTokens, wire::kV2ReturnWeights, wire::kV2ReturnWeightStats,
      wire::kV2Layout,     wire::kV2OutputDatatype};
  return m;
}

ModelInterface HostedInterface(const HostedModel& hosted) {
  ModelInterface m;
  m.name = hosted.name;
  m.hosted = &hosted;
  const model::ModelConfig& config = hosted.layer->config();
  const int64_t d = config.d_model;
  m.inputs.push_back(Spec(wire::kV2Hidden, FloatTypes(), {-1, -1, d}, false));
  m.inputs.push_back(Spec(wire::kV2Memory, FloatTypes(), {-1, -1, d}, true));
  m.inputs.push_back(Spec(wire::kV2Positions, {v1::INT32}, {-1, -1}, true));
  AddMaskInputs(&m.inputs);
  m.outputs.push_back(Spec(wire::kV2Output, FloatTypes(), {-1, -1, d}, false));
  m.outputs.push_back(Spec(wire::kV2Weights, {v1::FLOAT32},
                           {-1, config.num_heads, -1, -1}, true));
  m.parameters = {wire::kV2Causal,        wire::kV2Alignment,
                  wire::kV2WindowLeft,    wire::kV2WindowRight,
                  wire::kV2SinkTokens,    wire::kV2ReturnWeights,
                  wire::kV2OutputDatatype};
  return m;
}

std::string NameList(const std::vector<TensorSpec>& specs) {
  return absl::StrJoin(specs, ", ", [](std::string* out, const TensorSpec& s) {
    out->append(s.name);
  });
}

std::string DataTypeList(const std::vector<v1::DataType>& types) {
  return absl::StrJoin(types, ", ", [](std::string* out, v1::DataType t) {
    out->append(wire::V2DataTypeName(t));
  });
}

int FindSpec(const std::vector<TensorSpec>& specs, absl::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const char* ParameterKind(InferParameter::ParameterChoiceCase c) {
  switch (c) {
    case InferParameter::kBoolParam:
      return "bool_param";
    case InferParameter::kInt64Param:
      return "int64_param";
    case InferParameter::kStringParam:
      return "string_param";
    case InferParameter::kDoubleParam:
      return "double_param";
    case InferParameter::kUint64Param:
      return "uint64_param";
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "no value";
}

absl::Status WrongKind(absl::string_view field, absl::string_view expected,
                       const InferParameter& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": expected ", expected, ", got ",
                   ParameterKind(value.parameter_choice_case())));
}

absl::StatusOr<bool> BoolParameter(absl::string_view field,
                                   const InferParameter& value) {
  if (value.parameter_choice_case() != InferParameter::kBoolParam) {
    return WrongKind(field, "a bool_param", value);
  }
  return value.bool_param();
}

// The string value, upper-cased: enum names are matched without case.
absl::StatusOr<std::string> EnumParameter(absl::string_view field,
                                          const InferParameter& value) {
  if (value.parameter_choice_case() != InferParameter::kStringParam) {
    return WrongKind(field, "a string_param", value);
  }
  return absl::AsciiStrToUpper(value.string_param());
}

absl::StatusOr<int32_t> WindowParameter(absl::string_view field,
                                        const InferParameter& value) {
  int64_t v = 0;
  if (value.parameter_choice_case() == InferParameter::kInt64Param) {
    v = value.int64_param();
  } else if (value.parameter_choice_case() == InferParameter::kUint64Param) {
    v = static_cast<int64_t>(std::min<uint64_t>(
        value.uint64_param(), std::numeric_limits<int64_t>::max()));
  } else {
    return WrongKind(field, "an int64_param", value);
  }
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", v, " is out of range [0, ",
                     std::numeric_limits<int32_t>::max(), "]"));
  }
  return static_cast<int32_t>(v);
}

// A real-valued parameter (scale, softcap): a double_param, or a string_param
// that parses as a number.
absl::StatusOr<double> NumberParameter(absl::string_view field,
                                       const InferParameter& value) {
  switch (value.parameter_choice_case()) {
    case InferParameter::kDoubleParam:
      return value.double_param();
    case InferParameter::kStringParam: {
      double v = 0;
      if (!absl::SimpleAtod(value.string_param(), &v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": \"", value.string_param(), "\" is not a number"));
      }
      return v;
    }
    default:
      return WrongKind(field, "a double_param or a string_param", value);
  }
}

absl::Status ApplyParameters(const ModelInterface& model,
                             const ModelInferRequest& request, NativeCall* call,
                             Returned* returned) {
  const bool attend = model.hosted == nullptr;
  v1::Mask* mask =
      attend ? call->attend.mutable_mask() : call->hosted.mutable_mask();
  // Map order is unspecified; checking in name order keeps the first error
  // reported the same from call to call.
  std::vector<const std::string*> keys;
  for (const auto& entry : request.parameters()) keys.push_back(&entry.first);
  std::sort(keys.begin(), keys.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (const std::string* key_pointer : keys) {
    const std::string& key = *key_pointer;
    const InferParameter& value = request.parameters().at(key);
    const std::string field = absl::StrCat("parameters[\"", key, "\"]");
    if (std::find(model.parameters.begin(), model.parameters.end(), key) ==
        model.parameters.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": unknown parameter for model ", model.name, " (expected ",
          absl::StrJoin(model.parameters, ", "), ")"));
    }
    if (key == wire::kV2Causal) {
      ASSIGN_OR_RETURN(const bool causal, BoolParameter(field, value));
      mask->set_causal(causal);
    } else if (key == wire::kV2ReturnWeights) {
      ASSIGN_OR_RETURN(returned->weights, BoolParameter(field, value));
    } else if (key == wire::kV2ReturnWeightStats) {
      ASSIGN_OR_RETURN(returned->weight_stats, BoolParameter(field, value));
    } else if (key == wire::kV2Alignment) {
      ASSIGN_OR_RETURN(const std::string name, EnumParameter(field, value));
      v1::Alignment alignment;
      if (name.empty() || !v1::Alignment_Parse(name, &alignment) ||
          alignment == v1::ALIGNMENT_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": unknown alignment \"", value.string_param(),
                         "\" (expected TOP_LEFT or BOTTOM_RIGHT)"));
      }
      mask->set_alignment(alignment);
    } else if (key == wire::kV2Layout) {
      ASSIGN_OR_RETURN(const std::string name, EnumParameter(field, value));
      v1::Layout layout;
      if (name.empty() || !v1::Layout_Parse(name, &layout) ||
          layout == v1::LAYOUT_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": unknown layout \"", value.string_param(),
                         "\" (expected BHLD or BLHD)"));
      }
      call->attend.set_layout(layout);
    } else if (key == wire::kV2OutputDatatype) {
      if (value.parameter_choice_case() != InferParameter::kStringParam) {
        return WrongKind(field, "a string_param", value);
      }
      ASSIGN_OR_RETURN(const v1::DataType dtype,
                       wire::DataTypeFromV2Name(value.string_param(), field));
      if (attend) {
        call->attend.set_output_dtype(dtype);
      } else {
        call->hosted.set_output_dtype(dtype);
      }
    } else if (key == wire::kV2WindowLeft) {
      ASSIGN_OR_RETURN(const int32_t w, WindowParameter(field, value));
      mask->set_window_left(w);
    } else if (key == wire::kV2WindowRight) {
      ASSIGN_OR_RETURN(const int32_t w, WindowParameter(field, value));
      mask->set_window_right(w);
    } else if (key == wire::kV2SinkTokens) {
      ASSIGN_OR_RETURN(const int32_t n, WindowParameter(field, value));
      mask->set_sink_tokens(n);
    } else if (key == wire::kV2Scale) {
      ASSIGN_OR_RETURN(const double scale, NumberParameter(field, value));
      // Out-of-range values become infinite, which the native check refuses.
      call->attend.set_scale(static_cast<float>(scale));
    } else if (key == wire::kV2Softcap) {
      ASSIGN_OR_RETURN(const double cap, NumberParameter(field, value));
      call->attend.set_softcap(static_cast<float>(cap));
    }
  }
  return absl::OkStatus();
}

// Elements of `shape`, for typed contents.
absl::StatusOr<int64_t> ElementCount(
    absl::string_view field,
    const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t n = 1;
  for (int i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".shape: dimension ", i, " is ", d, " (must be >= 0)"));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape: the element count overflows"));
    }
    n *= d;
  }
  return n;
}

template <typename T>
std::string BytesOf(const google::protobuf::RepeatedField<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(T));
}

// The bytes of typed contents of `dtype`, which must be in the one field the
// datatype uses and hold exactly the shape's element count.
absl::StatusOr<std::string> TypedBytes(
    absl::string_view field, v1::DataType dtype,
    const ModelInferRequest::InferInputTensor& input) {
  const std::string name = wire::V2DataTypeName(dtype);
  if (dtype == v1::FLOAT16 || dtype == v1::BFLOAT16) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", name,
                     " has no typed contents in the protocol; send it in "
                     "raw_input_contents"));
  }
  const InferTensorContents& c = input.contents();
  const std::pair<const char*, int> fields[] = {
      {"bool_contents", c.bool_contents_size()},
      {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()},
      {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()},
      {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},
      {"bytes_contents", c.bytes_contents_size()}};
  const char* expected = dtype == v1::FLOAT32 ? "fp32_contents"
                         : dtype == v1::BOOL  ? "bool_contents"
                                              : "int_contents";
  int count = 0;
  for (const auto& [contents_field, size] : fields) {
    if (std::strcmp(contents_field, expected) == 0) {
      count = size;
    } else if (size > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".contents: ", contents_field,
                       " is set, but datatype ", name, " takes ", expected));
    }
  }
  ASSIGN_OR_RETURN(const int64_t elements, ElementCount(field, input.shape()));
  if (count != elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".contents: ", count, " ", expected, " for shape [",
                     absl::StrJoin(input.shape(), ", "), "] (expected ",
                     elements, "; or send raw_input_contents)"));
  }
  if (dtype == v1::FLOAT32) return BytesOf(c.fp32_contents());
  if (dtype == v1::INT32) return BytesOf(c.int_contents());
  std::string bytes(c.bool_contents_size(), '\0');
  for (int i = 0; i < c.bool_contents_size(); ++i) {
    bytes[i] = c.bool_contents(i) ? 1 : 0;
  }
  return bytes;
}

bool NamesRegion(
    const google::protobuf::Map<std::string, InferParameter>& parameters) {
  return parameters.count(wire::kV2SharedMemoryRegion) > 0;
}

absl::StatusOr<int64_t> SizeParameter(absl::string_view field,
                                      const InferParameter& value) {
  if (value.parameter_choice_case() != InferParameter::kInt64Param) {
    return WrongKind(field, "an int64_param", value);
  }
  if (value.int64_param() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", value.int64_param(), " must not be negative"));
  }
  return value.int64_param();
}

// The native reference that a tensor's parameters (`field` =
// "inputs[0] (query)") describe: shared_memory_region (string, required),
// shared_memory_byte_size (int64, required, as Triton's clients always send
// it) and shared_memory_offset (int64, 0 when absent, as they send it only
// when not 0); any other parameter is refused. Region, bounds, alignment and
// the size against the tensor's are the native checks' (SharedMemoryUse),
// once the request is decoded.
absl::StatusOr<v1::SharedMemoryRef> SharedMemoryParameters(
    absl::string_view field,
    const google::protobuf::Map<std::string, InferParameter>& parameters) {
  // In name order, so that the first error is the same from call to call.
  std::vector<const std::string*> keys;
  for (const auto& entry : parameters) keys.push_back(&entry.first);
  std::sort(keys.begin(), keys.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  v1::SharedMemoryRef ref;
  bool has_size = false;
  for (const std::string* key : keys) {
    const InferParameter& value = parameters.at(*key);
    const std::string name = absl::StrCat(field, ".parameters[\"", *key, "\"]");
    if (*key == wire::kV2SharedMemoryRegion) {
      if (value.parameter_choice_case() != InferParameter::kStringParam) {
        return WrongKind(name, "a string_param", value);
      }
      if (value.string_param().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": empty (name a registered region)"));
      }
      ref.set_region(value.string_param());
    } else if (*key == wire::kV2SharedMemoryOffset) {
      ASSIGN_OR_RETURN(const int64_t offset, SizeParameter(name, value));
      ref.set_offset(offset);
    } else if (*key == wire::kV2SharedMemoryByteSize) {
      ASSIGN_OR_RETURN(const int64_t size, SizeParameter(name, value));
      ref.set_byte_size(size);
      has_size = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".parameters: unknown parameter \"", *key, "\" (expected ",
          wire::kV2SharedMemoryRegion, ", ", wire::kV2SharedMemoryOffset, ", ",
          wire::kV2SharedMemoryByteSize, ")"));
    }
  }
  if (ref.region().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".parameters: ", *keys.front(), " is set without ",
                     wire::kV2SharedMemoryRegion,
                     " (name the registered region the bytes are in)"));
  }
  if (!has_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".parameters: ", wire::kV2SharedMemoryRegion, " is set without ",
        wire::kV2SharedMemoryByteSize, " (the tensor's size in bytes)"));
  }
  return ref;
}

// The tensors the native Attend takes in shared memory: query, key, value,
// output and weights of model `attention` (SharedMemoryUse's rule).
absl::Status CheckSharedMemoryAllowed(absl::string_view field,
                                      const ModelInterface& model,
                                      absl::string_view name) {
  const bool allowed = model.hosted == nullptr &&
                       (name == wire::kV2Query || name == wire::kV2Key ||
                        name == wire::kV2Value || name == wire::kV2Output ||
                        name == wire::kV2Weights);
  if (allowed) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ".parameters: ", wire::kV2SharedMemoryRegion,
      " is set, but only the inputs query, key and value and the outputs "
      "output and weights of model ",
      wire::kV2AttentionModel, " may be in shared memory; send ", name,
      "'s data"));
}

// A rank-1 input that the native request holds as a repeated field.
template <typename T>
absl::Status ToRepeated(absl::string_view field, absl::string_view axes,
                        const ModelInferRequest::InferInputTensor& input,
                        const std::string& bytes,
                        google::protobuf::RepeatedField<T>* out) {
  if (input.shape_size() != 1 || input.shape(0) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".shape: expected rank 1 ", axes, ", got [",
                     absl::StrJoin(input.shape(), ", "), "]"));
  }
  const int64_t n = input.shape(0);
  if (n > std::numeric_limits<int>::max() ||
      static_cast<int64_t>(bytes.size()) != n * int64_t{sizeof(T)}) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", bytes.size(), " bytes do not match shape [", n, "] of ",
        input.datatype(), " (expected ", n * int64_t{sizeof(T)}, " bytes)"));
  }
  out->Resize(static_cast<int>(n), T());
  if (n > 0) std::memcpy(out->mutable_data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

// The native tensor an input of `model` becomes; null for the inputs that are
// repeated fields (key_lengths, alibi_slopes, sinks).
v1::Tensor* TensorOf(absl::string_view name, NativeCall* call) {
  if (call->model->hosted == nullptr) {
    v1::AttendRequest& r = call->attend;
    if (name == wire::kV2Query) return r.mutable_query();
    if (name == wire::kV2Key) return r.mutable_key();
    if (name == wire::kV2Value) return r.mutable_value();
    if (name == wire::kV2Mask) return r.mutable_mask()->mutable_explicit_mask();
    return nullptr;
  }
  v1::ModelRequest& r = call->hosted;
  if (name == wire::kV2Hidden) return r.mutable_hidden();
  if (name == wire::kV2Memory) return r.mutable_memory();
  if (name == wire::kV2Positions) return r.mutable_positions();
  if (name == wire::kV2Mask) return r.mutable_mask()->mutable_explicit_mask();
  return nullptr;
}

absl::Status DecodeInput(int index, const TensorSpec& spec,
                         const ModelInferRequest::InferInputTensor& input,
                         std::string* raw, NativeCall* call) {
  // The input's name in messages, built only when one is needed: this runs
  // for every input of every call.
  auto field = [&] {
    return absl::StrCat("inputs[", index, "] (", input.name(), ")");
  };
  absl::StatusOr<v1::DataType> parsed =
      wire::DataTypeFromV2Name(input.datatype(), "datatype");
  if (!parsed.ok()) {
    return wire::DataTypeFromV2Name(input.datatype(), field() + ".datatype")
        .status();
  }
  const v1::DataType dtype = *parsed;
  if (std::find(spec.datatypes.begin(), spec.datatypes.end(), dtype) ==
      spec.datatypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".datatype: \"", input.datatype(), "\" is not accepted for ",
        spec.name, " (expected ", DataTypeList(spec.datatypes), ")"));
  }
  if (!input.parameters().empty()) {
    // Only Triton's shared-memory parameters: the bytes are in a region.
    ASSIGN_OR_RETURN(v1::SharedMemoryRef ref,
                     SharedMemoryParameters(field(), input.parameters()));
    RETURN_IF_ERROR(CheckSharedMemoryAllowed(field(), *call->model, spec.name));
    if (input.has_contents()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field(), ".contents: set together with parameters[\"",
          wire::kV2SharedMemoryRegion, "\"] (send the input's data one way)"));
    }
    v1::Tensor* tensor = TensorOf(spec.name, call);
    tensor->set_dtype(dtype);
    tensor->mutable_shape()->CopyFrom(input.shape());
    *tensor->mutable_shared_memory() = std::move(ref);
    return absl::OkStatus();
  }
  std::string bytes;
  if (raw != nullptr) {
    if (input.has_contents()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field(),
          ".contents: set together with raw_input_contents (send every "
          "input's data one way: all in raw_input_contents, or all in "
          "contents)"));
    }
    bytes.swap(*raw);
  } else {
    ASSIGN_OR_RETURN(bytes, TypedBytes(field(), dtype, input));
  }
  v1::Mask* mask = call->model->hosted == nullptr ? call->attend.mutable_mask()
                                                  : call->hosted.mutable_mask();
  if (spec.name == wire::kV2KeyLengths) {
    return ToRepeated(field(), "[B]", input, bytes,
                      mask->mutable_key_lengths());
  }
  if (spec.name == wire::kV2AlibiSlopes) {
    return ToRepeated(field(), "[Hq]", input, bytes,
                      mask->mutable_alibi_slopes());
  }
  if (spec.name == wire::kV2Sinks) {
    return ToRepeated(field(), "[Hq]", input, bytes,
                      call->attend.mutable_sinks());
  }
  v1::Tensor* tensor = TensorOf(spec.name, call);
  tensor->set_dtype(dtype);
  tensor->mutable_shape()->CopyFrom(input.shape());
  tensor->mutable_data()->swap(bytes);
  return absl::OkStatus();
}

absl::Status DecodeOutputs(const ModelInterface& model,
                           const ModelInferRequest& request,
                           const Returned& returned, NativeCall* call) {
  call->outputs.clear();
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& wanted = request.outputs(i);
    const std::string field =
        absl::StrCat("outputs[", i, "] (", wanted.name(), ")");
    const int index = FindSpec(model.outputs, wanted.name());
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown output for model ", model.name,
                       " (expected ", NameList(model.outputs), ")"));
    }
    if (std::find(call->outputs.begin(), call->outputs.end(), index) !=
        call->outputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": requested twice"));
    }
    if (!wanted.parameters().empty()) {
      // Only Triton's shared-memory parameters: written into a region.
      ASSIGN_OR_RETURN(v1::SharedMemoryRef ref,
                       SharedMemoryParameters(field, wanted.parameters()));
      RETURN_IF_ERROR(CheckSharedMemoryAllowed(field, model, wanted.name()));
      *(index == kWeightsIndex ? call->attend.mutable_weights_shared_memory()
                               : call->attend.mutable_output_shared_memory()) =
          std::move(ref);
    }
    call->outputs.push_back(index);
  }
  if (call->outputs.empty()) {
    call->outputs.push_back(kOutputIndex);
    if (returned.weights) call->outputs.push_back(kWeightsIndex);
    if (returned.weight_stats) {
      call->outputs.push_back(kEntropyIndex);
      call->outputs.push_back(kMaxWeightIndex);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ModelInterface> ModelInterfaces(const ModelRegistry* models) {
  std::vector<ModelInterface> interfaces = {AttentionInterface()};
  if (models != nullptr) {
    for (const HostedModel& hosted : models->models()) {
      if (hosted.name == wire::kV2AttentionModel) continue;
      interfaces.push_back(HostedInterface(hosted));
    }
  }
  return interfaces;
}

absl::StatusOr<int> FindModel(const std::vector<ModelInterface>& interfaces,
                              absl::string_view name,
                              absl::string_view version) {
  for (size_t i = 0; i < interfaces.size(); ++i) {
    if (interfaces[i].name != name) continue;
    if (!version.empty() && version != kModelVersion) {
      return absl::NotFoundError(
          absl::StrCat("model \"", name, "\" has no version \"", version,
                       "\" (versions: ", kModelVersion, ")"));
    }
    return static_cast<int>(i);
  }
  return absl::NotFoundError(
      absl::StrCat("model \"", name, "\" is not served here (models: ",
                   absl::StrJoin(interfaces, ", ",
                                 [](std::string* out, const ModelInterface& m) {
                                   out->append(m.name);
                                 }),
                   ")"));
}

absl::Status ToNative(const ModelInterface& model, ModelInferRequest& request,
                      NativeCall* call) {
  call->model = &model;
  const bool attend = model.hosted == nullptr;
  if (attend) {
    call->attend.set_request_id(request.id());
  } else {
    call->hosted.set_request_id(request.id());
    call->hosted.set_model(model.hosted->name);
  }
  Returned returned;
  RETURN_IF_ERROR(ApplyParameters(model, request, call, &returned));

  // Inputs in shared memory have no raw_input_contents entry (Triton's
  // clients send none for them): the entries are the other inputs', in order.
  int in_memory = 0;
  for (const auto& input : request.inputs()) {
    in_memory += NamesRegion(input.parameters()) ? 1 : 0;
  }
  const int raw_inputs = request.inputs_size() - in_memory;
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != raw_inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents: ", request.raw_input_contents_size(),
        " entries for ", raw_inputs, " inputs",
        in_memory > 0 ? " not in shared memory" : "",
        " (one per input, in the order of inputs, or none",
        in_memory > 0 ? "; none for an input in shared memory" : "", ")"));
  }
  int raw_index = 0;
  std::vector<bool> seen(model.inputs.size(), false);
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const int index = FindSpec(model.inputs, input.name());
    if (index < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] (", input.name(), "): unknown input for model ",
          model.name, " (expected ", NameList(model.inputs), ")"));
    }
    if (seen[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", i, "] (", input.name(), "): given twice"));
    }
    seen[index] = true;
    std::string* bytes = nullptr;
    if (raw && !NamesRegion(input.parameters())) {
      bytes = request.mutable_raw_input_contents(raw_index++);
    }
    RETURN_IF_ERROR(DecodeInput(i, model.inputs[index], input, bytes, call));
  }
  for (size_t i = 0; i < model.inputs.size(); ++i) {
    if (!seen[i] && !model.inputs[i].optional) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input \"", model.inputs[i].name, "\" (model ",
                       model.name, " takes ", NameList(model.inputs), "; ",
                       model.inputs[i].name, " is required)"));
    }
  }

  RETURN_IF_ERROR(DecodeOutputs(model, request, returned, call));
  // An output asked for by name is returned whatever the parameters say.
  const auto wanted = [&](int index) {
    return std::find(call->outputs.begin(), call->outputs.end(), index) !=
           call->outputs.end();
  };
  returned.weights = returned.weights || wanted(kWeightsIndex);
  if (attend) {
    call->attend.set_return_weights(returned.weights);
    call->attend.set_return_weight_stats(returned.weight_stats ||
                                         wanted(kEntropyIndex) ||
                                         wanted(kMaxWeightIndex));
  } else {
    call->hosted.set_return_weights(returned.weights);
  }
  return absl::OkStatus();
}

void ToInferResponse(const NativeCall& call, const ModelInferRequest& request,
                     v1::AttendResponse& native,
                     inference::ModelInferResponse* response) {
  response->set_model_name(call.model->name);
  response->set_model_version(kModelVersion);
  response->set_id(request.id());
  for (int index : call.outputs) {
    v1::Tensor* tensor = index == kWeightsIndex   ? native.mutable_weights()
                         : index == kEntropyIndex ? native.mutable_entropy()
                         : index == kMaxWeightIndex
                             ? native.mutable_max_weight()
                             : native.mutable_output();
    auto* out = response->add_outputs();
    out->set_name(call.model->outputs[index].name);
    out->set_datatype(wire::V2DataTypeName(tensor->dtype()));
    out->mutable_shape()->CopyFrom(tensor->shape());
    // An output written into a region: Triton's parameters back on it, and
    // an empty entry, so that raw_output_contents stay one per output in
    // the order of outputs, as Triton answers.
    std::string* raw = response->add_raw_output_contents();
    if (tensor->has_shared_memory()) {
      const v1::SharedMemoryRef& ref = tensor->shared_memory();
      auto& parameters = *out->mutable_parameters();
      parameters[wire::kV2SharedMemoryRegion].set_string_param(ref.region());
      parameters[wire::kV2SharedMemoryOffset].set_int64_param(ref.offset());
      parameters[wire::kV2SharedMemoryByteSize].set_int64_param(
          ref.byte_size());
      continue;
    }
    raw->swap(*tensor->mutable_data());
  }
  auto& parameters = *response->mutable_parameters();
  const v1::Timing& timing = native.timing();
  parameters[wire::kV2TimingQueueUs].set_int64_param(timing.queue_us());
  parameters[wire::kV2TimingComputeUs].set_int64_param(timing.compute_us());
  parameters[wire::kV2TimingTotalUs].set_int64_param(timing.total_us());
  parameters[wire::kV2TimingFlops].set_int64_param(
      static_cast<int64_t>(timing.flops()));
}

}  // namespace attnserve::server::kserve
