#ifndef ATTNSERVE_SERVER_SESSION_FILES_H_
#define ATTNSERVE_SERVER_SESSION_FILES_H_

// Sessions kept across a restart of one server (--session_snapshot_dir): a
// draining server writes its live sessions to a snapshot file in the
// directory (kvcache/session_snapshot.h's format, written to a temporary name
// and renamed when complete), and a starting server restores every snapshot
// file it finds there, then deletes it. A file that cannot be read whole
// (truncated, corrupted, another version) is renamed with ".bad" appended,
// the sessions before the damage are kept, and the server starts anyway.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvcache/session_store.h"

namespace attnserve::server {

struct SessionFileResult {
  int64_t sessions = 0;
  int64_t bytes = 0;
  int64_t files = 0;
  // Restore: the files renamed ".bad", each with why.
  std::vector<std::string> refused;
};

// Moves every live session of `store` into one new snapshot file in `dir`
// (each session ends here as moved). Errors name the file; on error the
// sessions are lost (they were ending with the server) and no partial file is
// left under a snapshot name.
absl::StatusOr<SessionFileResult> WriteSessionFile(kvcache::SessionStore& store,
                                                   const std::string& dir);

// Imports the sessions of every "*.snap" file in `dir`, oldest first, and
// deletes each file read whole. An error only when `dir` cannot be listed.
absl::StatusOr<SessionFileResult> RestoreSessionFiles(
    kvcache::SessionStore& store, const std::string& dir);

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SESSION_FILES_H_
