#include "client/check.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "client/tensors/wire_names.h"
#include "client/tensors/wire_tensor.h"
#include "core/attention.h"
#include "core/reference.h"
#include "core/tensor.h"
#include "wire/attend.h"
#include "wire/dtype.h"
#include "wire/tensor.h"

namespace attnserve::client {
namespace {

absl::Status ExpectShape(absl::string_view name, const v1::Tensor& got,
                         v1::DataType dtype,
                         const std::vector<int64_t>& shape) {
  const std::vector<int64_t> got_shape(got.shape().begin(), got.shape().end());
  if (got.dtype() != dtype || got_shape != shape ||
      static_cast<int64_t>(got.data().size()) !=
          wire::NumElements(got) * wire::ElementSize(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the response's ", name, " is ", wire::ShortDataTypeName(got.dtype()),
        " ", wire::ShapeText(got), " with ", got.data().size(),
        " bytes; expected ", wire::ShortDataTypeName(dtype), " [",
        absl::StrJoin(shape, ", "), "]"));
  }
  return absl::OkStatus();
}

CheckReport Compare(absl::string_view name, const v1::Tensor& got,
                    const std::vector<float>& ref, double tolerance) {
  CheckReport report;
  report.tensor = std::string(name);
  report.tolerance = tolerance;
  report.elements = static_cast<int64_t>(ref.size());
  bool first = true;
  for (int64_t i = 0; i < report.elements; ++i) {
    const double g = ElementAsFloat(got, i);
    const double r = ref[i];
    const bool both_nan = std::isnan(g) && std::isnan(r);
    const double error = both_nan ? 0.0 : std::fabs(g - r);
    if (!both_nan && !(error <= tolerance * (1 + std::fabs(r)))) {
      ++report.failures;
    }
    // NaN errors rank above every number.
    if (first || std::isnan(error) ||
        (!std::isnan(report.max_abs_error) && error > report.max_abs_error)) {
      first = false;
      report.max_abs_error = error;
      report.worst_index = i;
      report.worst_got = g;
      report.worst_ref = r;
    }
  }
  return report;
}

}  // namespace

double CheckTolerance(v1::DataType input, v1::DataType result) {
  return input == v1::FLOAT32 && result == v1::FLOAT32 ? 1e-5 : 2e-2;
}

absl::StatusOr<std::vector<CheckReport>> CheckResponse(
    const v1::AttendRequest& request, const v1::AttendResponse& response) {
  // The request as the server decodes it (tensors in shared memory are not
  // readable here).
  absl::StatusOr<wire::AttendCall> call =
      wire::DecodeAttend(request, /*shared=*/nullptr);
  if (!call.ok()) return call.status();
  const AttentionInputs& inputs = call->inputs;
  // LSH attention takes no key: its keys are the queries.
  const bool lsh = inputs.method == AttentionMethod::kLsh;
  const bool blhd = inputs.layout == Layout::kBLHD;

  const TensorView& q = inputs.query;
  const int64_t batch = q.dim(0);
  const int64_t q_heads = blhd ? q.dim(2) : q.dim(1);
  const int64_t q_len = blhd ? q.dim(1) : q.dim(2);
  const TensorView& keys = lsh ? inputs.query : inputs.key;
  const int64_t k_len = blhd ? keys.dim(1) : keys.dim(2);
  const int64_t value_dim = inputs.value.dim(3);
  const std::vector<int64_t> output_shape =
      blhd ? std::vector<int64_t>{batch, q_len, q_heads, value_dim}
           : std::vector<int64_t>{batch, q_heads, q_len, value_dim};
  const std::vector<int64_t> weights_shape = {batch, q_heads, q_len, k_len};

  const v1::DataType output_dtype =
      request.output_dtype() == v1::DATA_TYPE_UNSPECIFIED
          ? request.query().dtype()
          : request.output_dtype();
  absl::Status status =
      ExpectShape("output", response.output(), output_dtype, output_shape);
  if (!status.ok()) return status;
  if (request.return_weights()) {
    status =
        ExpectShape("weights", response.weights(), v1::FLOAT32, weights_shape);
    if (!status.ok()) return status;
  }

  auto count = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return static_cast<size_t>(n);
  };
  std::vector<float> ref_output(count(output_shape));
  std::vector<float> ref_weights(request.return_weights() ? count(weights_shape)
                                                          : 0);
  AttentionOutputs outputs;
  outputs.output =
      MakeMutableTensorView(ref_output.data(), DType::kFloat32, output_shape);
  if (request.return_weights()) {
    outputs.weights = MakeMutableTensorView(ref_weights.data(), DType::kFloat32,
                                            weights_shape);
  }
  status = ReferenceAttention(inputs, outputs);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference rejects the request: ", status.message()));
  }

  const v1::DataType input_dtype = request.query().dtype();
  std::vector<CheckReport> reports;
  reports.push_back(Compare("output", response.output(), ref_output,
                            CheckTolerance(input_dtype, output_dtype)));
  if (request.return_weights()) {
    reports.push_back(Compare("weights", response.weights(), ref_weights,
                              CheckTolerance(input_dtype, v1::FLOAT32)));
  }
  return reports;
}

ExitCode CheckExitCode(const std::vector<CheckReport>& reports) {
  for (const CheckReport& report : reports) {
    if (!report.passed()) return kExitCheckFailed;
  }
  return kExitOk;
}

std::string FormatCheckReport(const CheckReport& report) {
  std::string text = absl::StrFormat("%s: max abs error %.3g", report.tensor,
                                     report.max_abs_error);
  if (report.elements > 0) {
    absl::StrAppendFormat(&text, " at element %d (got %.7g, reference %.7g)",
                          report.worst_index, report.worst_got,
                          report.worst_ref);
  }
  absl::StrAppendFormat(&text, ", tolerance %g*(1+|ref|): ", report.tolerance);
  if (report.passed()) {
    absl::StrAppend(&text, "ok");
  } else {
    absl::StrAppendFormat(&text, "FAILED, %d of %d elements beyond",
                          report.failures, report.elements);
  }
  return text;
}

}  // namespace attnserve::client
