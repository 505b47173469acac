#include "client/tensors/wire_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace attnserve::client {
namespace {

absl::Status BadValue(absl::string_view flag, absl::string_view text,
                      absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, ": unknown value \"", text, "\" (expected ", expected, ")"));
}

}  // namespace

absl::StatusOr<v1::DataType> ParseFloatDataType(absl::string_view flag,
                                                absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "f32" || lower == "float32") return v1::FLOAT32;
  if (lower == "bf16" || lower == "bfloat16") return v1::BFLOAT16;
  if (lower == "f16" || lower == "float16") return v1::FLOAT16;
  return BadValue(flag, text, "f32, bf16 or f16");
}

absl::StatusOr<v1::DataType> ParseStorageDataType(absl::string_view flag,
                                                  absl::string_view text) {
  if (absl::AsciiStrToLower(text) == "int8") return v1::INT8;
  absl::StatusOr<v1::DataType> dtype = ParseFloatDataType(flag, text);
  if (!dtype.ok()) return BadValue(flag, text, "f32, bf16, f16 or int8");
  return dtype;
}

absl::StatusOr<v1::Layout> ParseLayout(absl::string_view flag,
                                       absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "bhld") return v1::BHLD;
  if (lower == "blhd") return v1::BLHD;
  return BadValue(flag, text, "bhld or blhd");
}

std::string LayoutName(v1::Layout layout) {
  switch (layout) {
    case v1::BHLD:
    case v1::LAYOUT_UNSPECIFIED:
      return "bhld";
    case v1::BLHD:
      return "blhd";
    default:
      return absl::StrCat("Layout(", static_cast<int>(layout), ")");
  }
}

absl::StatusOr<v1::Alignment> ParseAlignment(absl::string_view flag,
                                             absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "top_left") return v1::TOP_LEFT;
  if (lower == "bottom_right") return v1::BOTTOM_RIGHT;
  return BadValue(flag, text, "top_left or bottom_right");
}

std::string AlignmentName(v1::Alignment alignment) {
  switch (alignment) {
    case v1::TOP_LEFT:
    case v1::ALIGNMENT_UNSPECIFIED:
      return "top_left";
    case v1::BOTTOM_RIGHT:
      return "bottom_right";
    default:
      return absl::StrCat("Alignment(", static_cast<int>(alignment), ")");
  }
}

absl::StatusOr<v1::StridePattern> ParseStridePattern(absl::string_view flag,
                                                     absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "strided") return v1::STRIDED;
  if (lower == "fixed") return v1::FIXED;
  return BadValue(flag, text, "strided or fixed");
}

absl::StatusOr<v1::FeatureMap> ParseFeatureMap(absl::string_view flag,
                                               absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "elu") return v1::ELU_PLUS_ONE;
  if (lower == "relu") return v1::RELU;
  if (lower == "favor") return v1::FAVOR_PLUS;
  return BadValue(flag, text, "elu, relu or favor");
}

}  // namespace attnserve::client
