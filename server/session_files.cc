#include "server/session_files.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kvcache/session_snapshot.h"

namespace attnserve::server {
namespace {

constexpr absl::string_view kSuffix = ".snap";
constexpr size_t kPieceBytes = size_t{1} << 20;

absl::Status FileError(const std::string& path, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// One file's snapshots into `store`; the sessions imported are counted in
// `result` whatever happens later in the file.
absl::Status RestoreFile(kvcache::SessionStore& store, const std::string& path,
                         SessionFileResult& result) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileError(path, "cannot open");
  kvcache::SnapshotReader reader = store.NewReader();
  std::string piece(kPieceBytes, '\0');
  absl::Status status;
  while (status.ok() && in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    const size_t n = static_cast<size_t>(in.gcount());
    if (n == 0) break;
    result.bytes += static_cast<int64_t>(n);
    status = reader.Feed(absl::string_view(piece.data(), n));
    while (std::optional<kvcache::SnapshotReader::Session> s =
               reader.TakeCompleted()) {
      absl::StatusOr<kvcache::SessionInfo> imported =
          store.Import(*std::move(s));
      if (!imported.ok()) {
        // A session live already (restored from another file) is kept.
        if (imported.status().code() != absl::StatusCode::kAlreadyExists) {
          return imported.status();
        }
        continue;
      }
      ++result.sessions;
    }
  }
  if (status.ok() && in.bad()) return FileError(path, "cannot read");
  if (status.ok()) status = reader.Finish();
  return status;
}

}  // namespace

absl::StatusOr<SessionFileResult> WriteSessionFile(kvcache::SessionStore& store,
                                                   const std::string& dir) {
  SessionFileResult result;
  absl::StatusOr<std::vector<kvcache::ExportedSession>> exported =
      store.Export({}, /*remove=*/true);
  if (!exported.ok()) return exported.status();
  if (exported->empty()) return result;
  const std::string name =
      absl::StrCat(dir, "/sessions-", absl::ToUnixNanos(absl::Now()));
  const std::string partial = name + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) return FileError(partial, "cannot create");
    std::string piece;
    for (kvcache::ExportedSession& e : *exported) {
      kvcache::SnapshotWriter writer(std::move(e));
      while (!writer.done() && out) {
        piece.clear();
        writer.Next(kPieceBytes, &piece);
        out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
        result.bytes += static_cast<int64_t>(piece.size());
      }
      ++result.sessions;
    }
    out.flush();
    if (!out) {
      const absl::Status error = FileError(partial, "cannot write");
      std::remove(partial.c_str());
      return error;
    }
  }
  const std::string final_name = name + std::string(kSuffix);
  if (std::rename(partial.c_str(), final_name.c_str()) != 0) {
    const absl::Status error = FileError(final_name, "cannot rename");
    std::remove(partial.c_str());
    return error;
  }
  result.files = 1;
  return result;
}

absl::StatusOr<SessionFileResult> RestoreSessionFiles(
    kvcache::SessionStore& store, const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.is_regular_file() && absl::EndsWith(path, kSuffix)) {
      files.push_back(path);
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--session_snapshot_dir: cannot list \"", dir, "\": ", ec.message()));
  }
  // The names hold the time they were written: oldest first.
  std::sort(files.begin(), files.end());
  SessionFileResult result;
  for (const std::string& path : files) {
    const absl::Status restored = RestoreFile(store, path, result);
    if (restored.ok()) {
      std::remove(path.c_str());
      ++result.files;
      continue;
    }
    const std::string bad = path + ".bad";
    std::rename(path.c_str(), bad.c_str());
    result.refused.push_back(
        absl::StrCat(path, " (renamed ", bad, "): ", restored.message()));
  }
  return result;
}

}  // namespace attnserve::server
