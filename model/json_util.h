#ifndef ATTNSERVE_MODEL_JSON_UTIL_H_
#define ATTNSERVE_MODEL_JSON_UTIL_H_

// Internal to attnserve_model: the strict JSON parsing that config.json and
// safetensors headers share. Included by .cc files only.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace attnserve::model {

// Parses `text` as one JSON value (surrounding whitespace allowed).
// InvalidArgument, "malformed JSON: <where and why>", for text that is not
// JSON, including comments and NUL bytes (nlohmann would stop at a NUL and
// ignore the rest); and "duplicate key "<key>"" for a key repeated in an
// object (nlohmann would keep the last one silently). Never throws.
absl::StatusOr<nlohmann::json> ParseStrictJson(absl::string_view text);

// "an object", "an array", "a string", "a boolean", "null" or "a number",
// followed for scalars by the value, e.g. `a string ("64")`; for messages of
// the form "expected X, got <JsonTypeName>".
std::string JsonTypeName(const nlohmann::json& value);

// `value` as compact JSON for a message, cut to 64 characters ("...") so that
// a hostile file cannot make a huge one.
std::string JsonShortDump(const nlohmann::json& value);

}  // namespace attnserve::model

#endif  // ATTNSERVE_MODEL_JSON_UTIL_H_
