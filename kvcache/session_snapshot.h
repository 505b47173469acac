#ifndef ATTNSERVE_KVCACHE_SESSION_SNAPSHOT_H_
#define ATTNSERVE_KVCACHE_SESSION_SNAPSHOT_H_

// A session as bytes, to move it to another server (a handoff while this one
// drains) or to keep it in a file: its id, shape, idle TTL, tokens per layer
// and every cached row in its storage dtype (int8 rows with their scales), so
// that the copy holds exactly what the original held. The layout does not
// depend on either server's block size. Format (little-endian;
// docs/sessions.md, "Moving sessions"):
//
//   "ATTNSNAP"  u32 version  u32 header bytes H
//   header (H bytes): u32 id bytes, id, u32 layers, u32 kv heads, u32
//     head_dim, u32 value_dim, u32 storage dtype (1 f32, 2 bf16, 3 f16,
//     4 int8), i64 max_tokens, i64 ttl (ns), then
//     version 1: i64 tokens of each layer;
//     version 2 (a sink + window session): i64 window_tokens, i64
//       sink_tokens, and of each layer i64 tokens and i64 held_from
//   rows: layer by layer, token by token (the held ones: [0, sink_tokens)
//     and [held_from, tokens)), kv head by kv head: the key, its scale (int8
//     only, f32), the value, its scale (int8 only)
//   u32 Adler-32 (zlib's) of everything before it
//
// A session that keeps every token is written as version 1, which every
// reader takes.
//
// Snapshots are read one after another from a stream of bytes in pieces of
// any size (SnapshotReader), so a transfer needs no buffer of its own: rows go
// straight into blocks of the receiving store.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kvcache/session_cache.h"

namespace attnserve::kvcache {

// The newest version written and read.
inline constexpr uint32_t kSnapshotVersion = 2;

// What a snapshot says of its session besides the rows.
struct SnapshotHeader {
  std::string id;
  SessionShape shape;
  absl::Duration ttl;
  std::vector<int64_t> layer_tokens;
  // SessionCache::HeldFrom of each layer (a sink + window session), or empty.
  std::vector<int64_t> layer_held_from;

  // The tokens of `layer` a snapshot holds a row of: [0, sink_tokens) and
  // [held_from, tokens).
  int64_t HeldFrom(size_t layer) const {
    return layer_held_from.empty() ? 0 : layer_held_from[layer];
  }
  int64_t HeldRows(size_t layer) const;
};

// A session as it was when exported: its header and a copy of its cache that
// shares every block (the blocks stay alive and unchanged while it lives).
struct ExportedSession {
  SnapshotHeader header;
  std::shared_ptr<const SessionCache> cache;
};

// The bytes of one session's snapshot, produced in order.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(ExportedSession session);

  // Every byte of the snapshot.
  int64_t total_bytes() const { return total_; }
  bool done() const { return written_ == total_; }
  // Appends the next bytes, at most `max` of them, to `out`.
  void Next(int64_t max, std::string* out);

 private:
  ExportedSession session_;
  std::string head_;  // preamble and header
  int64_t rows_ = 0;
  int64_t total_ = 0;
  int64_t written_ = 0;
  uint32_t sum_ = 0;
  // The token row being written, read from the cache when the writer reaches
  // it, and the row after it.
  std::string row_;
  int next_layer_ = 0;
  int64_t next_token_ = 0;
};

// A snapshot as one string (tests, small sessions).
std::string SnapshotBytes(ExportedSession session);

// Reads snapshots back to back from pieces of bytes; each complete one
// becomes a session cache of this store's block size, its blocks from
// `allocate`.
class SnapshotReader {
 public:
  using Allocate =
      std::function<absl::StatusOr<std::shared_ptr<Block>>(int64_t bytes)>;
  struct Session {
    SnapshotHeader header;
    SessionCache cache;
  };

  SnapshotReader(int block_tokens, Allocate allocate);

  // Consumes `bytes`. DataLoss for bytes that are not a snapshot (wrong magic,
  // a corrupted header, a checksum that does not match), FailedPrecondition for
  // another version, InvalidArgument for a header out of the server's limits,
  // `allocate`'s errors; the reader is then unusable.
  absl::Status Feed(absl::string_view bytes);
  // The sessions completed so far, oldest first.
  std::optional<Session> TakeCompleted();
  // OK when the bytes fed end at a snapshot's end; DataLoss (truncated) when
  // they stop inside one.
  absl::Status Finish() const;

 private:
  enum class State { kPreamble, kHeader, kRows, kTrailer, kFailed };

  absl::Status ParseHeader();
  absl::Status TakeRows(absl::string_view* bytes);
  absl::Status Fail(absl::Status status);

  const int block_tokens_;
  Allocate allocate_;
  State state_ = State::kPreamble;
  uint32_t version_ = 0;  // of the snapshot being read
  std::string buffer_;    // a preamble, header, partial row or trailer
  size_t need_ = 0;       // bytes buffer_ must reach
  uint32_t sum_ = 0;
  int64_t snapshot_bytes_ = 0;  // of the current snapshot so far
  SnapshotHeader header_;
  std::optional<SessionCache> cache_;
  int layer_ = 0;
  int64_t row_bytes_ = 0;
  std::deque<Session> completed_;
};

}  // namespace attnserve::kvcache

#endif  // ATTNSERVE_KVCACHE_SESSION_SNAPSHOT_H_
