#include "kvcache/session_store.h"

#include <algorithm>
#include <random>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace attnserve::kvcache {
namespace {

constexpr int kMaxIdBytes = 128;

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' || c == '-';
}

constexpr absl::string_view kRecreate =
    "; create it again and re-send its keys and values";

// Where FailedPart finds the index of the part an error concerns.
constexpr absl::string_view kPartPayload = "attnserve.kvcache/part";

absl::Status PartError(size_t part, absl::Status status) {
  status.SetPayload(kPartPayload, absl::Cord(absl::StrCat(part)));
  return status;
}

}  // namespace

std::optional<int> FailedPart(const absl::Status& status) {
  const auto payload = status.GetPayload(kPartPayload);
  int part = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &part)) {
    return std::nullopt;
  }
  return part;
}

absl::string_view EndReasonName(EndReason reason) {
  switch (reason) {
    case EndReason::kClosed:
      return "closed";
    case EndReason::kExpired:
      return "expired";
    case EndReason::kEvicted:
      return "evicted";
    case EndReason::kMoved:
      return "moved";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<SessionStore>> SessionStore::Create(
    const StoreOptions& options) {
  if (options.block_tokens < 1 || options.block_tokens > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_block_tokens: ", options.block_tokens, " is outside [1, 4096]"));
  }
  if (options.budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache_bytes: ", options.budget_bytes, " is negative"));
  }
  if (options.default_ttl <= absl::ZeroDuration() ||
      options.max_ttl < options.default_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_session_ttl: ", absl::FormatDuration(options.default_ttl),
        " must be > 0 and at most the longest TTL ",
        absl::FormatDuration(options.max_ttl)));
  }
  if (options.max_sessions < 1) {
    return absl::InvalidArgumentError("kv_max_sessions: must be >= 1");
  }
  return std::unique_ptr<SessionStore>(new SessionStore(options));
}

SessionStore::SessionStore(const StoreOptions& options)
    : options_(options), pool_(options.budget_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  next_id_ = std::random_device{}();
  next_id_ = (next_id_ << 32) ^ std::random_device{}();
  if (options_.sweep_interval > absl::ZeroDuration()) {
    sweeper_ = std::thread(&SessionStore::SweeperLoop, this);
  }
}

SessionStore::~SessionStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

void SessionStore::SweeperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_.wait_for(lock, absl::ToChronoNanoseconds(options_.sweep_interval),
                   [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    Sweep(absl::Now());
    lock.lock();
  }
}

void SessionStore::Touch(Session& s) {
  s.last_use_ns.store(absl::ToUnixNanos(absl::Now()));
}

SessionInfo SessionStore::InfoOf(const Session& s) {
  SessionInfo info;
  info.id = s.id;
  info.parent = s.parent;
  info.shape = s.cache.shape();
  info.layer_tokens = s.cache.LayerTokens();
  info.bytes = s.cache.Bytes();
  info.ttl = s.ttl;
  info.created = s.created;
  info.last_use = absl::FromUnixNanos(s.last_use_ns.load());
  return info;
}

absl::Status SessionStore::CheckHere(const Session& s) {
  if (!s.moved) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "session \"", s.id,
      "\" was handed to another server while this one "
      "drains; retry (a balancer routes the retry to its new server)"));
}

absl::Status SessionStore::NotFoundError(const std::string& id) {
  const auto arriving = arriving_.find(id);
  if (arriving != arriving_.end() && absl::Now() < arriving->second) {
    return absl::UnavailableError(
        absl::StrCat("session \"", id,
                     "\" is arriving from a server that drains; retry "
                     "in a moment"));
  }
  auto it = endings_.find(id);
  if (it == endings_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "session \"", id,
        "\" is unknown here (never created on this server, ended too long "
        "ago to be remembered, or lost in a restart: sessions do not survive "
        "one)",
        kRecreate));
  }
  const Ending& e = it->second;
  switch (e.reason) {
    case EndReason::kClosed:
      return absl::NotFoundError(absl::StrCat(
          "session \"", id, "\" was closed at ", TimeText(e.when), kRecreate));
    case EndReason::kExpired:
      return absl::NotFoundError(
          absl::StrCat("session \"", id, "\" expired at ", TimeText(e.when),
                       ", idle for longer than its TTL of ",
                       absl::FormatDuration(e.ttl), kRecreate));
    case EndReason::kEvicted:
      return absl::NotFoundError(absl::StrCat(
          "session \"", id, "\" was evicted at ", TimeText(e.when),
          " to free KV-cache memory (--kv_eviction=lru)", kRecreate));
    case EndReason::kMoved:
      return absl::UnavailableError(absl::StrCat(
          "session \"", id, "\" was handed to another server at ",
          TimeText(e.when),
          " while this one drains; retry (a balancer routes the retry to its "
          "new server)"));
  }
  return absl::NotFoundError(absl::StrCat("session \"", id, "\""));
}

absl::StatusOr<std::shared_ptr<SessionStore::Session>> SessionStore::Find(
    const std::string& id, bool touch) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotFoundError(id);
  if (touch) Touch(*it->second);
  return it->second;
}

absl::Status SessionStore::CheckNewId(const std::string& id, std::string* out) {
  if (id.empty()) {
    do {
      *out = absl::StrFormat("s-%016x", next_id_++);
    } while (sessions_.count(*out) > 0);
    return absl::OkStatus();
  }
  if (id.size() > kMaxIdBytes || !std::all_of(id.begin(), id.end(), IdChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_id: \"", absl::CHexEscape(id.substr(0, kMaxIdBytes)),
        id.size() > kMaxIdBytes ? "...\"" : "\"",
        " must be 1 to 128 characters of A-Z a-z 0-9 . _ : -"));
  }
  *out = id;
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> SessionStore::ResolveTtl(
    absl::Duration ttl, absl::Duration fallback) const {
  if (ttl == absl::ZeroDuration()) return fallback;
  if (ttl < absl::ZeroDuration() || ttl > options_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl: ", absl::FormatDuration(ttl), " is outside (0, ",
        absl::FormatDuration(options_.max_ttl), "] (0 = the server's ",
        absl::FormatDuration(options_.default_ttl), ")"));
  }
  return ttl;
}

absl::StatusOr<SessionInfo> SessionStore::CreateSession(
    const std::string& id, const SessionShape& shape, absl::Duration ttl) {
  RETURN_IF_ERROR(ValidateShape(shape));
  ASSIGN_OR_RETURN(const absl::Duration resolved_ttl,
                   ResolveTtl(ttl, options_.default_ttl));
  std::shared_ptr<Session> existing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string new_id;
    RETURN_IF_ERROR(CheckNewId(id, &new_id));
    auto it = sessions_.find(new_id);
    if (it != sessions_.end()) {
      existing = it->second;
    } else {
      if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "sessions: ", sessions_.size(), " are live, the server's limit (",
            options_.max_sessions, "); close some first"));
      }
      auto session = std::make_shared<Session>(
          new_id, SessionCache(shape, options_.block_tokens));
      session->ttl = resolved_ttl;
      session->created = absl::Now();
      Touch(*session);
      // Not yet shared, so read without its lock: taking a session's lock
      // while holding the table's would invert the lock order.
      SessionInfo info = InfoOf(*session);
      info.created_now = true;
      sessions_[new_id] = std::move(session);
      endings_.erase(new_id);
      return info;
    }
  }
  // Outside mu_: a session's lock is never taken while holding the table's.
  std::lock_guard<std::mutex> session_lock(existing->mu);
  if (existing->cache.shape() != shape) {
    return absl::AlreadyExistsError(
        absl::StrCat("session \"", existing->id, "\" exists with shape ",
                     ShapeText(existing->cache.shape()),
                     "; this request asks for ", ShapeText(shape)));
  }
  Touch(*existing);
  return InfoOf(*existing);
}

absl::StatusOr<std::shared_ptr<Block>> SessionStore::Allocate(
    int64_t bytes, const Session& requester, int layer) {
  while (true) {
    absl::StatusOr<std::shared_ptr<Block>> block = pool_.Allocate(bytes);
    if (block.ok() ||
        block.status().code() != absl::StatusCode::kResourceExhausted) {
      return block;
    }
    if (!options_.evict_lru || !EvictOne(requester)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KV cache full for session \"", requester.id, "\" layer ", layer,
          ": ", block.status().message(),
          options_.evict_lru ? "; no idle session is left to evict"
                             : "; close sessions or start the server with "
                               "--kv_eviction=lru"));
    }
  }
}

bool SessionStore::EvictOne(const Session& requester) {
  std::lock_guard<std::mutex> lock(mu_);
  auto victim = sessions_.end();
  int64_t oldest = 0;
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    // In use: some call holds it (this table's reference is the only other).
    if (it->second.get() == &requester || it->second.use_count() > 1) continue;
    const int64_t last = it->second->last_use_ns.load();
    if (victim == sessions_.end() || last < oldest) {
      victim = it;
      oldest = last;
    }
  }
  if (victim == sessions_.end()) return false;
  const std::string id = victim->first;
  EndLocked(id, EndReason::kEvicted, absl::Now());
  return true;
}

void SessionStore::EndLocked(const std::string& id, EndReason reason,
                             absl::Time when) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  endings_[id] = Ending{reason, when, it->second->ttl};
  ending_order_.emplace_back(id, when);
  while (static_cast<int64_t>(ending_order_.size()) >
         options_.remembered_endings) {
    const auto& [old_id, old_when] = ending_order_.front();
    auto e = endings_.find(old_id);
    // A later ending of the same id keeps its entry.
    if (e != endings_.end() && e->second.when == old_when) endings_.erase(e);
    ending_order_.pop_front();
  }
  ++ended_[static_cast<int>(reason)];
  sessions_.erase(it);
}

absl::StatusOr<SessionInfo> SessionStore::Append(
    const std::string& id, int layer, std::optional<int64_t> position,
    const TensorView& keys, const TensorView& values) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(id));
  std::lock_guard<std::mutex> lock(s->mu);
  RETURN_IF_ERROR(CheckHere(*s));
  auto allocate = [&](int64_t bytes) { return Allocate(bytes, *s, layer); };
  RETURN_IF_ERROR(
      s->cache.Append(layer, position, keys, values, allocate, Index())
          .status());
  tokens_appended_.fetch_add(keys.shape[0]);
  Touch(*s);
  return InfoOf(*s);
}

absl::StatusOr<SessionStore::AppendPlan> SessionStore::PlanAppend(
    int layer, const std::vector<AttendPart>& parts) {
  AppendPlan plan;
  plan.layer_ = layer;
  plan.sessions_.reserve(parts.size());
  std::unordered_map<std::string_view, size_t> seen;  // id -> first part
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto [first, inserted] = seen.emplace(parts[i].session_id, i);
    if (!inserted) {
      return PartError(
          i, absl::InvalidArgumentError(absl::StrCat(
                 "session_id: \"", parts[i].session_id, "\" is also part ",
                 first->second, "'s (a session may appear once per call)")));
    }
    absl::StatusOr<std::shared_ptr<Session>> s = Find(parts[i].session_id);
    if (!s.ok()) {
      return PartError(
          i, absl::Status(s.status().code(),
                          absl::StrCat("session_id: ", s.status().message())));
    }
    plan.sessions_.push_back(*std::move(s));
  }
  plan.plans_.resize(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttendPart& part = parts[i];
    std::lock_guard<std::mutex> lock(plan.sessions_[i]->mu);
    const SessionCache& cache = plan.sessions_[i]->cache;
    plan.plans_[i].shape = cache.shape();
    if (layer < 0 || layer >= cache.shape().num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer: ", layer, " is outside [0, ", cache.shape().num_layers,
          ") (session \"", part.session_id, "\" has ", cache.shape().num_layers,
          " layers)"));
    }
    if (part.keys.has_value() != part.values.has_value()) {
      return PartError(i, absl::InvalidArgumentError(
                              part.keys ? "value: missing (key and value come "
                                          "together)"
                                        : "key: missing (key and value come "
                                          "together)"));
    }
    if (part.keys) {
      const absl::Status checked =
          cache.CheckAppend(layer, part.position, *part.keys, *part.values);
      if (!checked.ok()) return PartError(i, checked);
    } else if (part.position) {
      return PartError(
          i, absl::InvalidArgumentError("position: set without key and value"));
    }
    plan.plans_[i].tokens_after =
        cache.Tokens(layer) + (part.keys ? part.keys->shape[0] : 0);
  }
  return plan;
}

absl::StatusOr<std::vector<PinnedPart>> SessionStore::CommitAppend(
    AppendPlan plan, const std::vector<AttendPart>& parts) {
  const int layer = plan.layer_;
  std::vector<PinnedPart> pinned(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttendPart& part = parts[i];
    Session& s = *plan.sessions_[i];
    std::lock_guard<std::mutex> lock(s.mu);
    if (absl::Status here = CheckHere(s); !here.ok()) {
      return PartError(
          i, absl::Status(here.code(),
                          absl::StrCat("session_id: ", here.message())));
    }
    if (part.keys) {
      auto allocate = [&](int64_t bytes) { return Allocate(bytes, s, layer); };
      absl::StatusOr<int64_t> appended = s.cache.Append(
          layer, part.position, *part.keys, *part.values, allocate, Index());
      if (!appended.ok()) return PartError(i, appended.status());
      tokens_appended_.fetch_add(part.keys->shape[0]);
    }
    pinned[i].layer = s.cache.Pin(layer);
    pinned[i].shape = s.cache.shape();
    Touch(s);
  }
  return pinned;
}

absl::StatusOr<std::vector<PinnedPart>> SessionStore::AppendAndPin(
    int layer, const std::vector<AttendPart>& parts) {
  ASSIGN_OR_RETURN(AppendPlan plan, PlanAppend(layer, parts));
  return CommitAppend(std::move(plan), parts);
}

absl::StatusOr<SessionInfo> SessionStore::Fork(const std::string& parent_id,
                                               const std::string& child_id,
                                               absl::Duration ttl) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> parent, Find(parent_id));
  std::lock_guard<std::mutex> parent_lock(parent->mu);
  RETURN_IF_ERROR(CheckHere(*parent));
  ASSIGN_OR_RETURN(const absl::Duration resolved_ttl,
                   ResolveTtl(ttl, parent->ttl));
  auto child = std::make_shared<Session>("", parent->cache.Fork());
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string id;
    RETURN_IF_ERROR(CheckNewId(child_id, &id));
    if (sessions_.count(id) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "child_id: session \"", id, "\" exists; fork into a new id"));
    }
    if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "sessions: ", sessions_.size(), " are live, the server's limit (",
          options_.max_sessions, "); close some first"));
    }
    child->id = id;
    child->parent = parent->id;
    child->ttl = resolved_ttl;
    child->created = absl::Now();
    Touch(*child);
    sessions_[id] = child;
    endings_.erase(id);
  }
  Touch(*parent);
  std::lock_guard<std::mutex> child_lock(child->mu);
  SessionInfo info = InfoOf(*child);
  info.created_now = true;
  return info;
}

absl::StatusOr<SessionInfo> SessionStore::Truncate(const std::string& id,
                                                   int64_t tokens) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(id));
  std::lock_guard<std::mutex> lock(s->mu);
  RETURN_IF_ERROR(CheckHere(*s));
  const int64_t longest = s->cache.MaxTokens();
  if (tokens < 0 || tokens > longest) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens: ", tokens, " is outside [0, ", longest,
                     "] (session \"", id, "\" holds at most ", longest,
                     " tokens in a layer; truncate only "
                     "shortens)"));
  }
  RETURN_IF_ERROR(s->cache.CheckTruncate(tokens));
  s->cache.Truncate(tokens);
  Touch(*s);
  return InfoOf(*s);
}

absl::StatusOr<SessionInfo> SessionStore::Close(const std::string& id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(id));
  SessionInfo info;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    info = InfoOf(*s);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  // Another call may have ended it between Find and here.
  if (it == sessions_.end() || it->second != s) return NotFoundError(id);
  EndLocked(id, EndReason::kClosed, absl::Now());
  return info;
}

absl::StatusOr<SessionInfo> SessionStore::Get(const std::string& id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> s, Find(id, /*touch=*/false));
  std::lock_guard<std::mutex> lock(s->mu);
  return InfoOf(*s);
}

int64_t SessionStore::Sweep(absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> expired;
  const int64_t now_ns = absl::ToUnixNanos(now);
  for (const auto& [id, s] : sessions_) {
    if (s.use_count() > 1) continue;
    if (now_ns - s->last_use_ns.load() > absl::ToInt64Nanoseconds(s->ttl)) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    EndLocked(id, EndReason::kExpired, now);
  }
  return static_cast<int64_t>(expired.size());
}

std::vector<std::string> SessionStore::LiveIds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> ids;
  ids.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<ExportedSession>> SessionStore::Export(
    const std::vector<std::string>& ids, bool remove) {
  const std::vector<std::string> wanted = ids.empty() ? LiveIds() : ids;
  std::vector<std::shared_ptr<Session>> sessions;
  sessions.reserve(wanted.size());
  for (const std::string& id : wanted) {
    // Sessions that end meanwhile (every live one asked for) are left out.
    absl::StatusOr<std::shared_ptr<Session>> s = Find(id, /*touch=*/false);
    if (s.ok()) {
      sessions.push_back(*std::move(s));
    } else if (!ids.empty()) {
      return s.status();
    }
  }
  std::vector<ExportedSession> exported;
  exported.reserve(sessions.size());
  for (const std::shared_ptr<Session>& s : sessions) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->moved) continue;  // another export took it
      ExportedSession e;
      e.header.id = s->id;
      e.header.shape = s->cache.shape();
      e.header.ttl = s->ttl;
      e.header.layer_tokens = s->cache.LayerTokens();
      if (e.header.shape.window_tokens > 0) {
        for (int l = 0; l < e.header.shape.num_layers; ++l) {
          e.header.layer_held_from.push_back(s->cache.HeldFrom(l));
        }
      }
      e.cache = std::make_shared<const SessionCache>(s->cache.Fork());
      exported.push_back(std::move(e));
      s->moved = remove;
    }
    if (remove) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sessions_.find(s->id);
      if (it != sessions_.end() && it->second == s) {
        EndLocked(s->id, EndReason::kMoved, absl::Now());
      }
    }
  }
  return exported;
}

void SessionStore::Announce(const std::vector<std::string>& ids,
                            absl::Time until) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : ids) {
    if (sessions_.count(id) == 0) arriving_[id] = until;
  }
}

void SessionStore::EndArrivals(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : ids) arriving_.erase(id);
}

SnapshotReader SessionStore::NewReader() {
  return SnapshotReader(options_.block_tokens, [this](int64_t bytes) {
    absl::StatusOr<std::shared_ptr<Block>> block = pool_.Allocate(bytes);
    if (!block.ok() &&
        block.status().code() == absl::StatusCode::kResourceExhausted) {
      return absl::StatusOr<std::shared_ptr<Block>>(
          absl::ResourceExhaustedError(
              absl::StrCat("KV cache full for an imported session: ",
                           block.status().message())));
    }
    return block;
  });
}

absl::StatusOr<SessionInfo> SessionStore::Import(
    SnapshotReader::Session imported) {
  const std::string id = imported.header.id;
  if (id.empty()) {
    return absl::InvalidArgumentError(
        "session snapshot: the session id is empty");
  }
  auto session = std::make_shared<Session>(id, std::move(imported.cache));
  session->ttl = std::min(imported.header.ttl, options_.max_ttl);
  if (session->ttl <= absl::ZeroDuration()) session->ttl = options_.default_ttl;
  session->created = absl::Now();
  Touch(*session);
  std::lock_guard<std::mutex> lock(mu_);
  std::string checked;
  RETURN_IF_ERROR(CheckNewId(id, &checked));
  if (sessions_.count(id) > 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "session \"", id, "\" is already live here; it was not imported"));
  }
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sessions: ", sessions_.size(), " are live, the server's limit (",
        options_.max_sessions, "); session \"", id, "\" was not imported"));
  }
  // Not yet shared: read without its lock (lock order).
  SessionInfo info = InfoOf(*session);
  info.created_now = true;
  sessions_[id] = std::move(session);
  endings_.erase(id);
  arriving_.erase(id);
  ++imported_;
  return info;
}

int64_t SessionStore::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t n = static_cast<int64_t>(sessions_.size());
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  for (const std::string& id : ids) {
    EndLocked(id, EndReason::kClosed, absl::Now());
  }
  return n;
}

StoreStats SessionStore::Stats() const {
  StoreStats stats;
  stats.budget_bytes = pool_.budget_bytes();
  stats.used_bytes = pool_.used_bytes();
  stats.tokens_appended = tokens_appended_.load();
  stats.blocks_shared = index_.shared();
  std::lock_guard<std::mutex> lock(mu_);
  stats.sessions = static_cast<int64_t>(sessions_.size());
  stats.ended_closed = ended_[0];
  stats.ended_expired = ended_[1];
  stats.ended_evicted = ended_[2];
  stats.ended_moved = ended_[3];
  stats.imported = imported_;
  return stats;
}

}  // namespace attnserve::kvcache
