#ifndef ATTNSERVE_CLIENT_TENSORS_WIRE_NAMES_H_
#define ATTNSERVE_CLIENT_TENSORS_WIRE_NAMES_H_

// The command-line names of the wire enums: "f32", "bhld", "top_left", ...

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/attention.pb.h"

namespace attnserve::client {

// "f32", "bf16", "f16" (the float dtypes; "bool" is not accepted).
// InvalidArgument naming `flag` otherwise.
absl::StatusOr<v1::DataType> ParseFloatDataType(absl::string_view flag,
                                                absl::string_view text);
// As ParseFloatDataType, and "int8": a session's storage dtype.
absl::StatusOr<v1::DataType> ParseStorageDataType(absl::string_view flag,
                                                  absl::string_view text);
// The names of dtypes are wire::ShortDataTypeName's (wire/dtype.h).

// "bhld" or "blhd" (case-insensitive).
absl::StatusOr<v1::Layout> ParseLayout(absl::string_view flag,
                                       absl::string_view text);
std::string LayoutName(v1::Layout layout);

// "top_left" or "bottom_right" (case-insensitive).
absl::StatusOr<v1::Alignment> ParseAlignment(absl::string_view flag,
                                             absl::string_view text);
std::string AlignmentName(v1::Alignment alignment);

// "strided" or "fixed" (case-insensitive).
absl::StatusOr<v1::StridePattern> ParseStridePattern(absl::string_view flag,
                                                     absl::string_view text);

// "elu" (elu + 1), "relu" or "favor" (FAVOR+), case-insensitive.
absl::StatusOr<v1::FeatureMap> ParseFeatureMap(absl::string_view flag,
                                               absl::string_view text);

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_TENSORS_WIRE_NAMES_H_
