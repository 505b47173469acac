#include "client/load/bench_levels.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attnserve::client {
namespace {

absl::Status LevelError(absl::string_view flag, absl::string_view text,
                        absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--", flag, " \"", text, "\": ", why,
      " (expected N, A,B,C, START:END, START:END:STEP or START:END:xFACTOR)"));
}

absl::StatusOr<double> Level(absl::string_view flag, absl::string_view text,
                             absl::string_view part, bool integer) {
  double value;
  part = absl::StripAsciiWhitespace(part);
  if (!absl::SimpleAtod(part, &value) || !std::isfinite(value)) {
    return LevelError(flag, text,
                      absl::StrCat("\"", part, "\" is not a number"));
  }
  if (value <= 0) {
    return LevelError(flag, text, absl::StrCat(part, " is not positive"));
  }
  if (integer && (value != std::floor(value) || value > 1e6)) {
    return LevelError(flag, text,
                      absl::StrCat(part, " is not a whole number up to 1e6"));
  }
  return value;
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseLevels(absl::string_view flag,
                                                absl::string_view text,
                                                bool integer) {
  std::vector<double> levels;
  if (absl::StrContains(text, ',')) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      absl::StatusOr<double> level = Level(flag, text, part, integer);
      if (!level.ok()) return level.status();
      levels.push_back(*level);
    }
  } else {
    const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
    if (parts.size() > 3) return LevelError(flag, text, "too many parts");
    absl::StatusOr<double> start = Level(flag, text, parts[0], integer);
    if (!start.ok()) return start.status();
    levels.push_back(*start);
    if (parts.size() >= 2) {
      absl::StatusOr<double> end = Level(flag, text, parts[1], integer);
      if (!end.ok()) return end.status();
      if (*end < *start) return LevelError(flag, text, "END is below START");
      absl::string_view step_text =
          parts.size() == 3 ? absl::StripAsciiWhitespace(parts[2]) : "1";
      const bool factor = absl::ConsumePrefix(&step_text, "x");
      absl::StatusOr<double> step = Level(flag, text, step_text, false);
      if (!step.ok()) return step.status();
      if (factor && *step <= 1) {
        return LevelError(flag, text, "a factor must be above 1");
      }
      // A little slack so that 0.1-steps reach END despite rounding.
      const double limit = *end * (1 + 1e-9);
      for (double next = factor ? *start * *step : *start + *step;
           next <= limit && levels.size() <= kMaxLevels;
           next = factor ? next * *step : next + *step) {
        const double level = integer ? std::round(next) : next;
        // x1.5 from 1 gives 1.5 -> 2 and 2.25 -> 2: keep one of each.
        if (level != levels.back()) levels.push_back(level);
      }
    }
  }
  if (levels.size() > kMaxLevels) {
    return LevelError(flag, text,
                      absl::StrCat("more than ", kMaxLevels, " levels"));
  }
  return levels;
}

}  // namespace attnserve::client
