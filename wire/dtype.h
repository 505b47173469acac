#ifndef ATTNSERVE_WIRE_DTYPE_H_
#define ATTNSERVE_WIRE_DTYPE_H_

// The wire's DataType and the core's DType, mapped and named in one place.
// Proto3 keeps enum numbers it does not know, so every function here accepts
// any int value of v1::DataType.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"
#include "core/tensor.h"

namespace attnserve::wire {

// The core dtype of a wire dtype. InvalidArgument naming `field` (e.g.
// "query.dtype") for DATA_TYPE_UNSPECIFIED, INT32 (which only
// ModelRequest.positions uses and the core has no dtype for) and unknown
// values, listing the accepted ones.
absl::StatusOr<DType> DTypeFromWire(v1::DataType dtype,
                                    absl::string_view field);

// The wire dtype of a core dtype.
v1::DataType DTypeToWire(DType dtype);

// The proto's name, "FLOAT32", or "unknown value 9" for numbers the proto does
// not name: the spelling of the server's error messages.
std::string DataTypeName(v1::DataType dtype);

// The short name attnctl prints and parses, as core's DTypeName spells it:
// "f32", "bf16", "f16", "bool", and "i32" for INT32; "unspecified" or
// "DataType(9)" for the rest.
std::string ShortDataTypeName(v1::DataType dtype);

// Bytes per element: 4 for FLOAT32 and INT32, 2 for BFLOAT16 and FLOAT16, 1 for
// BOOL, 0 for unspecified or unknown values.
int64_t ElementSize(v1::DataType dtype);

// The Open Inference Protocol's (KServe v2) datatype string of a wire dtype:
// "FP32", "BF16", "FP16", "BOOL", "INT32"; empty for unspecified or unknown
// values. Triton's model-configuration enum spells them with a "TYPE_" prefix.
std::string V2DataTypeName(v1::DataType dtype);

// The wire dtype of a protocol datatype string (exact, upper case).
// InvalidArgument naming `field`: for the protocol's other datatypes (UINT8,
// INT64, FP64, BYTES, ...) that attnserve has no dtype for, and for strings
// the protocol does not define; both list the accepted ones.
absl::StatusOr<v1::DataType> DataTypeFromV2Name(absl::string_view name,
                                                absl::string_view field);

}  // namespace attnserve::wire

#endif  // ATTNSERVE_WIRE_DTYPE_H_
