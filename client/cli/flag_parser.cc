#include "client/cli/flag_parser.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attnserve::client {
namespace {

bool IsHelp(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h";
}

bool Allowed(absl::Span<const absl::string_view> allowed,
             absl::string_view name) {
  return std::find(allowed.begin(), allowed.end(), name) != allowed.end();
}

absl::CommandLineFlag* BoolFlag(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->IsOfType<bool>() ? flag : nullptr;
}

constexpr absl::string_view kIndent = "      ";
constexpr size_t kWidth = 80;

// `text` broken into lines of at most `width` columns (a longer word gets a
// line of its own), each starting with `indent` and ending with a newline.
std::string Wrap(absl::string_view text, absl::string_view indent,
                 size_t width) {
  std::string out;
  std::string line(indent);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, line, "\n");
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line.push_back(' ');
    absl::StrAppend(&line, word);
  }
  absl::StrAppend(&out, line, "\n");
  return out;
}

}  // namespace

absl::StatusOr<ParsedFlags> ParseFlags(
    absl::Span<char* const> args, absl::Span<const absl::string_view> allowed) {
  ParsedFlags parsed;
  for (const char* arg : args) {
    if (IsHelp(arg)) {
      parsed.help = true;
      return parsed;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\" (only flags)"));
    }
    absl::string_view body = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
    absl::string_view name = body;
    absl::string_view value;
    const size_t equals = body.find('=');
    const bool has_value = equals != absl::string_view::npos;
    if (has_value) {
      name = body.substr(0, equals);
      value = body.substr(equals + 1);
    }

    absl::CommandLineFlag* flag = nullptr;
    bool negated = false;
    if (Allowed(allowed, name)) {
      flag = absl::FindCommandLineFlag(name);
    } else if (absl::StartsWith(name, "no") &&
               Allowed(allowed, name.substr(2)) &&
               BoolFlag(name.substr(2)) != nullptr) {
      negated = true;
      name = name.substr(2);
      flag = BoolFlag(name);
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag \"", arg, "\""));
    }

    std::string text;
    if (flag->IsOfType<bool>()) {
      if (negated && has_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", arg, "\": --no", name, " takes no value"));
      }
      text = has_value ? std::string(value) : negated ? "false" : "true";
    } else if (has_value) {
      text = std::string(value);
    } else if (i + 1 < args.size()) {
      text = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(text, &error)) {
      // absl's generic "Illegal value 'x' specified for flag 'y'" adds
      // nothing; its other messages do.
      const bool generic = error.empty() || absl::StartsWith(error, "Illegal");
      return absl::InvalidArgumentError(
          absl::StrCat("bad value \"", text, "\" for --", name,
                       generic ? "" : absl::StrCat(": ", error)));
    }
    parsed.specified.emplace(name);
  }
  return parsed;
}

std::string FlagsHelp(absl::Span<const absl::string_view> names) {
  std::string out;
  for (absl::string_view name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>()) {
      default_value = absl::StrCat("\"", default_value, "\"");
    }
    absl::StrAppend(&out, "  --", name, "=", default_value, "\n",
                    Wrap(flag->Help(), kIndent, kWidth));
  }
  return out;
}

}  // namespace attnserve::client
