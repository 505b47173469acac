#ifndef ATTNSERVE_KVCACHE_SESSION_STORE_H_
#define ATTNSERVE_KVCACHE_SESSION_STORE_H_

// The server's KV-cache sessions: ids, idle TTLs, the block budget, LRU
// eviction, fork, truncate, close, and the record of how recent sessions
// ended (so a NOT_FOUND says why). Thread-safe: calls on different sessions
// run in parallel; calls on one session are serialized in the order they
// take its lock (the order the server received them). The locks are std::mutex
// so that ThreadSanitizer sees them (tests/kvcache runs under it).
//
// Lock order: a session's lock may be held while taking the table's (an
// append evicting), never the reverse.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "kvcache/block_index.h"
#include "kvcache/block_pool.h"
#include "kvcache/session_cache.h"
#include "kvcache/session_snapshot.h"

namespace attnserve::kvcache {

struct StoreOptions {
  // The KV-cache budget in bytes (--kv_cache_bytes; default 1 GiB).
  int64_t budget_bytes = int64_t{1} << 30;
  // Tokens per block (--kv_block_tokens; default 128, in [1, 4096]): the
  // decode kernel takes one block per key tile, and smaller tiles cost more
  // calls (docs/benchmarks.md, "Sessions").
  int block_tokens = 128;
  // When the budget is full: false (default) refuses the tokens
  // (ResourceExhausted); true evicts idle sessions, least recently used first.
  bool evict_lru = false;
  // The idle TTL of a session created without one (default 10 min) and the
  // longest a client may ask for (default 24 h).
  absl::Duration default_ttl = absl::Minutes(10);
  absl::Duration max_ttl = absl::Hours(24);
  // Live sessions at most (default 65536).
  int64_t max_sessions = 65536;
  // How often a background thread expires idle sessions (default 1 s; zero =
  // no thread: the owner calls Sweep).
  absl::Duration sweep_interval = absl::Seconds(1);
  // How many ended sessions are remembered for NOT_FOUND messages.
  int64_t remembered_endings = 65536;
  // Sessions hold one copy of the full blocks whose bytes are equal
  // (--kv_share_blocks; default true; BlockIndex).
  bool share_blocks = true;
};

// Why a session is no longer there.
// kMoved: exported with `remove` (handed to another server).
enum class EndReason { kClosed, kExpired, kEvicted, kMoved };
absl::string_view EndReasonName(EndReason reason);  // "closed", ...

struct SessionInfo {
  std::string id;
  SessionShape shape;
  std::vector<int64_t> layer_tokens;
  // Bytes of the blocks the session references (blocks shared with a fork
  // count for both).
  int64_t bytes = 0;
  absl::Duration ttl;
  absl::Time created;
  absl::Time last_use;
  // CreateSession / ForkSession: false when the id already existed with this
  // shape (an idempotent retry).
  bool created_now = false;
  // ForkSession: the parent's id.
  std::string parent;
};

struct StoreStats {
  int64_t budget_bytes = 0;
  int64_t used_bytes = 0;
  int64_t sessions = 0;
  int64_t tokens_appended = 0;
  // Full blocks swapped for an equal one another session holds.
  int64_t blocks_shared = 0;
  int64_t ended_closed = 0;
  int64_t ended_expired = 0;
  int64_t ended_evicted = 0;
  int64_t ended_moved = 0;
  int64_t imported = 0;
};

// One session's part of an attention call: optionally new keys and values to
// append first, then the layer pinned.
struct AttendPart {
  std::string session_id;
  std::optional<int64_t> position;
  std::optional<TensorView> keys;
  std::optional<TensorView> values;
};

struct PinnedPart {
  PinnedLayer layer;
  SessionShape shape;
};

// What a part will be once its keys and values are appended: for the caller's
// own checks (shapes across sessions, response size, work) before anything is
// appended.
struct PartPlan {
  SessionShape shape;
  int64_t tokens_after = 0;
};

// The errors of PlanAppend and CommitAppend that concern one part carry its
// index (their messages name the part's own arguments: "session_id",
// "key.shape", "position", ...); the caller says where that part came from.
std::optional<int> FailedPart(const absl::Status& status);

class SessionStore {
  struct Session;

 public:
  // InvalidArgument for block_tokens outside [1, 4096], a negative budget or
  // non-positive TTLs.
  static absl::StatusOr<std::unique_ptr<SessionStore>> Create(
      const StoreOptions& options);
  // Stops the sweeper; blocks still pinned by calls stay valid.
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A session of `shape` with idle TTL `ttl` (zero = the default). An empty
  // `id` gets a fresh server id. An id that exists with the same shape returns
  // the existing session (created_now false; an idempotent retry);
  // AlreadyExists when its shape differs (both shapes named). InvalidArgument
  // for a bad id (1-128 of [A-Za-z0-9._:-]), shape or TTL; ResourceExhausted
  // beyond max_sessions.
  absl::StatusOr<SessionInfo> CreateSession(const std::string& id,
                                            const SessionShape& shape,
                                            absl::Duration ttl);

  // SessionCache::Append on the session. NotFound (see NotFoundError) for a
  // session that is not live; the budget's ResourceExhausted (with the
  // session, layer and tokens) unless eviction frees enough.
  absl::StatusOr<SessionInfo> Append(const std::string& id, int layer,
                                     std::optional<int64_t> position,
                                     const TensorView& keys,
                                     const TensorView& values);

  // An attention call over `layer` in two phases, so that the caller can
  // admit it (its own limits, its memory budget) between them:
  //  - PlanAppend checks every part (a session named twice, sessions that are
  //    not live, the layer, keys and values against each session) and appends
  //    nothing; the plan keeps its sessions in use (never evicted or expired)
  //    until it is committed or dropped.
  //  - CommitAppend appends each part's keys and values in order and pins the
  //    layer. Each append is atomic on its own: one that fails (the budget, or
  //    a call on the same session between the phases) leaves the earlier
  //    parts' appends in place.
  // Errors about one part carry its index (FailedPart).
  class AppendPlan {
   public:
    AppendPlan(AppendPlan&&) = default;
    AppendPlan& operator=(AppendPlan&&) = default;
    // One per part, in order.
    absl::Span<const PartPlan> parts() const { return plans_; }

   private:
    friend class SessionStore;
    AppendPlan() = default;
    int layer_ = 0;
    std::vector<std::shared_ptr<Session>> sessions_;
    std::vector<PartPlan> plans_;
  };
  absl::StatusOr<AppendPlan> PlanAppend(int layer,
                                        const std::vector<AttendPart>& parts);
  // `parts` must be the ones the plan was made from.
  absl::StatusOr<std::vector<PinnedPart>> CommitAppend(
      AppendPlan plan, const std::vector<AttendPart>& parts);
  // Both phases at once (no admission between them).
  absl::StatusOr<std::vector<PinnedPart>> AppendAndPin(
      int layer, const std::vector<AttendPart>& parts);

  // A child sharing every block of `parent_id` (copy-on-write), with its own
  // TTL (zero = the parent's). `child_id` as CreateSession's id; an existing
  // child id is AlreadyExists.
  absl::StatusOr<SessionInfo> Fork(const std::string& parent_id,
                                   const std::string& child_id,
                                   absl::Duration ttl);

  // Keeps the first `tokens` tokens of every layer. InvalidArgument when
  // `tokens` is negative or beyond the longest layer.
  absl::StatusOr<SessionInfo> Truncate(const std::string& id, int64_t tokens);

  // Ends the session; its blocks are freed once no call pins them.
  absl::StatusOr<SessionInfo> Close(const std::string& id);

  // The session as it is; not a use (its idle time and TTL run on).
  absl::StatusOr<SessionInfo> Get(const std::string& id);

  // Expires the sessions idle for longer than their TTL at `now` (sessions in
  // use are not idle). Returns how many.
  int64_t Sweep(absl::Time now);

  // Moving sessions to another store (docs/sessions.md, "Moving sessions"):
  //  - Export: the sessions `ids` (empty = every live one) as they are now,
  //    each sharing its blocks with the copy returned (no K/V is copied). With
  //    `remove`, they end here as moved: later calls on them get Unavailable
  //    (retry: the caller's balancer routes the retry to the new owner).
  //    NotFound for an id that is not live, before anything is exported.
  //  - Announce: calls on `ids` that are not (yet) here get Unavailable
  //    "arriving" instead of NotFound until `until`, or until they are
  //    imported or EndArrivals(ids).
  //  - NewReader, Import: sessions read from snapshots, their blocks from this
  //    store's budget (no eviction for them). AlreadyExists for a live id,
  //    ResourceExhausted beyond max_sessions; the TTL is capped at max_ttl.
  std::vector<std::string> LiveIds() const;
  absl::StatusOr<std::vector<ExportedSession>> Export(
      const std::vector<std::string>& ids, bool remove);
  void Announce(const std::vector<std::string>& ids, absl::Time until);
  void EndArrivals(const std::vector<std::string>& ids);
  SnapshotReader NewReader();
  absl::StatusOr<SessionInfo> Import(SnapshotReader::Session session);

  // Ends every session (shutdown). Returns how many.
  int64_t CloseAll();

  StoreStats Stats() const;
  const StoreOptions& options() const { return options_; }

 private:
  struct Session {
    Session(std::string i, SessionCache c)
        : id(std::move(i)), cache(std::move(c)) {}

    std::string id;
    std::string parent;
    absl::Duration ttl;
    absl::Time created;
    // Read without `mu` by eviction and expiry.
    std::atomic<int64_t> last_use_ns{0};
    std::mutex mu;
    SessionCache cache;  // guarded by mu
    // Exported with `remove`: what is appended now would be lost. Guarded by
    // mu.
    bool moved = false;
  };
  struct Ending {
    EndReason reason;
    absl::Time when;
    absl::Duration ttl;
  };

  explicit SessionStore(const StoreOptions& options);

  // The live session, touched (its last use is now) unless `touch` is false;
  // NotFoundError otherwise.
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& id,
                                                bool touch = true);
  // mu_ held by the caller for the next three.
  absl::Status NotFoundError(const std::string& id);
  // Unavailable for a session moved away (s.mu held).
  static absl::Status CheckHere(const Session& s);
  absl::Status CheckNewId(const std::string& id, std::string* out);
  void EndLocked(const std::string& id, EndReason reason, absl::Time when);
  absl::StatusOr<absl::Duration> ResolveTtl(absl::Duration ttl,
                                            absl::Duration fallback) const;
  // A block for `requester`'s layer, evicting idle sessions when allowed.
  // requester.mu held, mu_ not.
  absl::StatusOr<std::shared_ptr<Block>> Allocate(int64_t bytes,
                                                  const Session& requester,
                                                  int layer);
  bool EvictOne(const Session& requester);
  // The index appends share full blocks through, or null.
  BlockIndex* Index() { return options_.share_blocks ? &index_ : nullptr; }
  // s.mu held, or s not yet shared.
  static SessionInfo InfoOf(const Session& s);
  static void Touch(Session& s);
  void SweeperLoop();

  const StoreOptions options_;
  BlockPool pool_;
  BlockIndex index_;
  std::atomic<int64_t> tokens_appended_{0};

  // Guards everything below but the sweeper thread itself. A session is in
  // use while a call holds a copy of its shared_ptr: only the table's copy
  // left (use_count() == 1, read under mu_, where copies are made) = idle.
  mutable std::mutex mu_;
  std::condition_variable stop_;
  std::unordered_map<std::string, std::shared_ptr<Session>> sessions_;
  std::unordered_map<std::string, Ending> endings_;
  std::deque<std::pair<std::string, absl::Time>> ending_order_;
  int64_t ended_[4] = {0, 0, 0, 0};
  int64_t imported_ = 0;
  // Announced sessions not yet imported, and until when.
  std::unordered_map<std::string, absl::Time> arriving_;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread sweeper_;
};

}  // namespace attnserve::kvcache

#endif  // ATTNSERVE_KVCACHE_SESSION_STORE_H_
