#include "model/json_util.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnserve::model {

absl::StatusOr<nlohmann::json> ParseStrictJson(absl::string_view text) {
  // One set of keys per open object; the parser reports nesting through
  // object_start/object_end events, so the stack follows it exactly.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const nlohmann::json::parser_callback_t detect_duplicates =
      [&](int /*depth*/, nlohmann::json::parse_event_t event,
          nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (event == Event::object_start) {
          open_objects.emplace_back();
        } else if (event == Event::object_end) {
          if (!open_objects.empty()) open_objects.pop_back();
        } else if (event == Event::key && !open_objects.empty() &&
                   duplicate.empty()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second) duplicate = key;
        }
        return true;
      };
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore
  // whatever follows; JSON text has no NUL outside escapes.
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: NUL byte at offset ", nul));
  }
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end(), detect_duplicates,
                                  /*allow_exceptions=*/true,
                                  /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    // what() is "[json.exception.parse_error.101] parse error at line 1, ...".
    absl::string_view what = e.what();
    if (const size_t end = what.find("] "); end != absl::string_view::npos) {
      what.remove_prefix(end + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", what));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("duplicate key \"", duplicate, "\""));
  }
  return value;
}

std::string JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return absl::StrCat("a string (", JsonShortDump(value), ")");
    case nlohmann::json::value_t::boolean:
      return absl::StrCat("a boolean (", JsonShortDump(value), ")");
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return absl::StrCat("a number (", JsonShortDump(value), ")");
    case nlohmann::json::value_t::binary:
    case nlohmann::json::value_t::discarded:
      break;
  }
  return "an unexpected value";
}

std::string JsonShortDump(const nlohmann::json& value) {
  constexpr size_t kMaxLength = 64;
  // Parsed text is valid UTF-8, but a value built in code need not be: replace
  // rather than throw.
  std::string text =
      value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxLength) {
    text.resize(kMaxLength - 3);
    text += "...";
  }
  return text;
}

}  // namespace attnserve::model
