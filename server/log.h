#ifndef ATTNSERVE_SERVER_LOG_H_
#define ATTNSERVE_SERVER_LOG_H_

// One-line logs to stderr: "2026-11-29T14:00:00.123Z I message". Abseil
// 20220623 has no logging library; this is all the server needs.

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace attnserve::server {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning", "error" (InvalidArgument otherwise).
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void WriteLog(LogLevel level, absl::string_view message);

}  // namespace attnserve::server

// Formats only when the level is enabled.
#define ATTNSERVE_LOG(level, ...)                                        \
  do {                                                                   \
    if (::attnserve::server::LogEnabled(level)) {                        \
      ::attnserve::server::WriteLog(level, ::absl::StrCat(__VA_ARGS__)); \
    }                                                                    \
  } while (0)

#endif  // ATTNSERVE_SERVER_LOG_H_
