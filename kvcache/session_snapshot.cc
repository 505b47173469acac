#include "kvcache/session_snapshot.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace attnserve::kvcache {
namespace {

constexpr absl::string_view kMagic = "ATTNSNAP";
// Magic, version, header bytes.
constexpr size_t kPreambleBytes = 16;
// The largest header a valid snapshot has: an id of 128 bytes and 1024
// layers' token counts and held_from, with room to spare.
constexpr uint32_t kMaxHeaderBytes = 32 * 1024;
// A sink + window layer holds past its held_from at most its window and the
// last call's new tokens: a snapshot claiming more is corrupted.
constexpr int64_t kMaxHeldSlack = kMaxSessionTokens;

// The storage dtypes' codes in a snapshot (its own table: stable across
// versions of core's enum).
struct DTypeCode {
  DType dtype;
  uint32_t code;
};
constexpr DTypeCode kDTypeCodes[] = {{DType::kFloat32, 1},
                                     {DType::kBFloat16, 2},
                                     {DType::kFloat16, 3},
                                     {DType::kInt8, 4}};

uint32_t CodeOf(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.dtype == dtype) return c.code;
  }
  return 0;
}

std::optional<DType> DTypeOf(uint32_t code) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.code == code) return c.dtype;
  }
  return std::nullopt;
}

// Adler-32 (zlib's): five times CRC-32's rate here (3 against 0.6 GB/s), and
// a snapshot's size and layout are checked on their own. zlib takes at most
// UINT_MAX bytes at a time; pieces here are far smaller.
uint32_t Checksum(uint32_t sum, absl::string_view bytes) {
  return static_cast<uint32_t>(
      adler32(sum, reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(bytes.size())));
}

template <typename T>
void Put(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

// Reads the fields of a header in order; past its end every read fails.
class HeaderCursor {
 public:
  explicit HeaderCursor(absl::string_view bytes) : rest_(bytes) {}
  template <typename T>
  bool Get(T* value) {
    if (rest_.size() < sizeof(T)) return false;
    std::memcpy(value, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetBytes(size_t n, std::string* out) {
    if (rest_.size() < n) return false;
    out->assign(rest_.data(), n);
    rest_.remove_prefix(n);
    return true;
  }
  bool empty() const { return rest_.empty(); }

 private:
  absl::string_view rest_;
};

// Version 2 for a sink + window session, else 1.
uint32_t VersionOf(const SnapshotHeader& h) {
  return h.shape.window_tokens > 0 ? 2 : 1;
}

std::string HeaderBytes(const SnapshotHeader& h) {
  std::string out;
  Put<uint32_t>(static_cast<uint32_t>(h.id.size()), &out);
  out += h.id;
  Put<uint32_t>(static_cast<uint32_t>(h.shape.num_layers), &out);
  Put<uint32_t>(static_cast<uint32_t>(h.shape.num_kv_heads), &out);
  Put<uint32_t>(static_cast<uint32_t>(h.shape.head_dim), &out);
  Put<uint32_t>(static_cast<uint32_t>(h.shape.value_dim), &out);
  Put<uint32_t>(CodeOf(h.shape.dtype), &out);
  Put<int64_t>(h.shape.max_tokens, &out);
  Put<int64_t>(absl::ToInt64Nanoseconds(h.ttl), &out);
  if (VersionOf(h) == 1) {
    for (int64_t tokens : h.layer_tokens) Put<int64_t>(tokens, &out);
    return out;
  }
  Put<int64_t>(h.shape.window_tokens, &out);
  Put<int64_t>(h.shape.sink_tokens, &out);
  for (size_t i = 0; i < h.layer_tokens.size(); ++i) {
    Put<int64_t>(h.layer_tokens[i], &out);
    Put<int64_t>(h.HeldFrom(i), &out);
  }
  return out;
}

}  // namespace

int64_t SnapshotHeader::HeldRows(size_t layer) const {
  const int64_t tokens = layer_tokens[layer];
  const int64_t sinks = std::min(shape.sink_tokens, tokens);
  return sinks +
         std::max<int64_t>(0, tokens - std::max(HeldFrom(layer), sinks));
}

SnapshotWriter::SnapshotWriter(ExportedSession session)
    : session_(std::move(session)) {
  const std::string header = HeaderBytes(session_.header);
  head_.append(kMagic.data(), kMagic.size());
  Put<uint32_t>(VersionOf(session_.header), &head_);
  Put<uint32_t>(static_cast<uint32_t>(header.size()), &head_);
  head_ += header;
  int64_t rows = 0;
  for (size_t i = 0; i < session_.header.layer_tokens.size(); ++i) {
    rows += session_.header.HeldRows(i);
  }
  rows_ = rows * BytesPerToken(session_.header.shape);
  total_ = static_cast<int64_t>(head_.size()) + rows_ + 4;
  sum_ = Checksum(0, {});
}

void SnapshotWriter::Next(int64_t max, std::string* out) {
  const int64_t head = static_cast<int64_t>(head_.size());
  const int64_t row_bytes = BytesPerToken(session_.header.shape);
  while (max > 0 && written_ < total_) {
    absl::string_view piece;
    if (written_ < head) {
      piece = absl::string_view(head_).substr(static_cast<size_t>(written_));
    } else if (written_ < head + rows_) {
      // Rows are written in order: the next one is read when the last one
      // is used up (layers without tokens skipped, and a sink + window
      // session's dropped tokens).
      if ((written_ - head) % row_bytes == 0) {
        const SnapshotHeader& h = session_.header;
        while (true) {
          const size_t layer = static_cast<size_t>(next_layer_);
          if (next_token_ >= h.shape.sink_tokens &&
              next_token_ < h.HeldFrom(layer)) {
            next_token_ = h.HeldFrom(layer);
          }
          if (next_token_ < h.layer_tokens[layer]) break;
          ++next_layer_;
          next_token_ = 0;
        }
        row_.resize(static_cast<size_t>(row_bytes));
        session_.cache->ReadRow(next_layer_, next_token_++, row_.data());
      }
      piece = absl::string_view(row_).substr(
          static_cast<size_t>((written_ - head) % row_bytes));
    } else {
      char trailer[4];
      std::memcpy(trailer, &sum_, sizeof trailer);
      piece = absl::string_view(trailer, 4)
                  .substr(static_cast<size_t>(written_ - head - rows_));
      piece = piece.substr(0, static_cast<size_t>(max));
      out->append(piece.data(), piece.size());
      written_ += static_cast<int64_t>(piece.size());
      max -= static_cast<int64_t>(piece.size());
      continue;
    }
    piece = piece.substr(0, static_cast<size_t>(max));
    out->append(piece.data(), piece.size());
    sum_ = Checksum(sum_, piece);
    written_ += static_cast<int64_t>(piece.size());
    max -= static_cast<int64_t>(piece.size());
  }
}

std::string SnapshotBytes(ExportedSession session) {
  SnapshotWriter writer(std::move(session));
  std::string out;
  writer.Next(writer.total_bytes(), &out);
  return out;
}

SnapshotReader::SnapshotReader(int block_tokens, Allocate allocate)
    : block_tokens_(block_tokens), allocate_(std::move(allocate)) {
  need_ = kPreambleBytes;
  sum_ = Checksum(0, {});
}

absl::Status SnapshotReader::Fail(absl::Status status) {
  state_ = State::kFailed;
  cache_.reset();
  buffer_.clear();
  return status;
}

absl::Status SnapshotReader::ParseHeader() {
  HeaderCursor in(buffer_);
  SnapshotHeader h;
  uint32_t id_bytes = 0, layers = 0, heads = 0, d = 0, dv = 0, code = 0;
  int64_t ttl_ns = 0;
  const auto corrupt = [](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("session snapshot: the header is corrupted (", what, ")"));
  };
  if (!in.Get(&id_bytes) || id_bytes > kMaxHeaderBytes ||
      !in.GetBytes(id_bytes, &h.id)) {
    return corrupt("the session id");
  }
  if (!in.Get(&layers) || !in.Get(&heads) || !in.Get(&d) || !in.Get(&dv) ||
      !in.Get(&code) || !in.Get(&h.shape.max_tokens) || !in.Get(&ttl_ns)) {
    return corrupt("the shape");
  }
  const std::optional<DType> dtype = DTypeOf(code);
  if (!dtype) return corrupt(absl::StrCat("storage dtype code ", code));
  // Bounded before anything is sized by them; ValidateShape then checks the
  // server's own limits.
  if (layers > static_cast<uint32_t>(kMaxLayers) ||
      heads > static_cast<uint32_t>(kMaxKvHeads) ||
      d > static_cast<uint32_t>(kMaxHeadDim) ||
      dv > static_cast<uint32_t>(kMaxValueDim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session snapshot \"", absl::CHexEscape(h.id), "\": layers ", layers,
        ", kv heads ", heads, ", head_dim ", d, ", value_dim ", dv,
        " are beyond this server's limits"));
  }
  h.shape.num_layers = static_cast<int>(layers);
  h.shape.num_kv_heads = static_cast<int>(heads);
  h.shape.head_dim = static_cast<int>(d);
  h.shape.value_dim = static_cast<int>(dv);
  h.shape.dtype = *dtype;
  h.ttl = absl::Nanoseconds(ttl_ns);
  if (version_ == 2 &&
      (!in.Get(&h.shape.window_tokens) || !in.Get(&h.shape.sink_tokens) ||
       h.shape.window_tokens <= 0)) {
    return corrupt("the window");
  }
  const absl::Status shape = ValidateShape(h.shape);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("session snapshot \"",
                                                   absl::CHexEscape(h.id),
                                                   "\": ", shape.message()));
  }
  h.layer_tokens.resize(layers);
  if (version_ == 2) h.layer_held_from.resize(layers);
  for (uint32_t i = 0; i < layers; ++i) {
    int64_t& tokens = h.layer_tokens[i];
    if (!in.Get(&tokens)) return corrupt("the tokens of each layer");
    if (tokens < 0 || tokens > h.shape.max_tokens) {
      return corrupt(absl::StrCat("a layer of ", tokens,
                                  " tokens against max_tokens ",
                                  h.shape.max_tokens));
    }
    if (version_ == 1) continue;
    // Held from the sinks' end at the earliest, and at most the window's
    // tokens past it.
    int64_t& held_from = h.layer_held_from[i];
    const int64_t sinks = h.shape.sink_tokens;
    if (!in.Get(&held_from) || held_from < sinks ||
        held_from > std::max(sinks, tokens) ||
        tokens - held_from > h.shape.window_tokens + kMaxHeldSlack) {
      return corrupt("the held tokens of each layer");
    }
  }
  if (!in.empty()) return corrupt("bytes after the last field");
  header_ = std::move(h);
  cache_.emplace(header_.shape, block_tokens_);
  layer_ = 0;
  row_bytes_ = BytesPerToken(header_.shape);
  return absl::OkStatus();
}

absl::Status SnapshotReader::TakeRows(absl::string_view* bytes) {
  const auto allocate = [this](int64_t n) { return allocate_(n); };
  while (layer_ < header_.shape.num_layers) {
    const size_t layer = static_cast<size_t>(layer_);
    if (cache_->Tokens(layer_) == header_.shape.sink_tokens &&
        header_.HeldFrom(layer) > header_.shape.sink_tokens) {
      // A sink + window session's dropped tokens: its window's rows follow.
      RETURN_IF_ERROR(cache_->SkipTo(layer_, header_.HeldFrom(layer)));
    }
    // Rows up to the layer's end, or first up to its sinks' end when the
    // tokens after them were dropped.
    int64_t end = header_.layer_tokens[layer];
    if (header_.HeldFrom(layer) > header_.shape.sink_tokens &&
        cache_->Tokens(layer_) < header_.shape.sink_tokens) {
      end = std::min(end, header_.shape.sink_tokens);
    }
    const int64_t left = end - cache_->Tokens(layer_);
    if (left == 0) {
      ++layer_;
      continue;
    }
    if (!buffer_.empty() || static_cast<int64_t>(bytes->size()) < row_bytes_) {
      // A row split across pieces: gathered first.
      const size_t take = std::min(
          bytes->size(), static_cast<size_t>(row_bytes_) - buffer_.size());
      buffer_.append(bytes->data(), take);
      bytes->remove_prefix(take);
      if (static_cast<int64_t>(buffer_.size()) < row_bytes_) {
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(
          cache_->AppendStoredRows(layer_, buffer_.data(), 1, allocate));
      buffer_.clear();
      continue;
    }
    const int64_t whole =
        std::min(left, static_cast<int64_t>(bytes->size()) / row_bytes_);
    RETURN_IF_ERROR(
        cache_->AppendStoredRows(layer_, bytes->data(), whole, allocate));
    bytes->remove_prefix(static_cast<size_t>(whole * row_bytes_));
  }
  return absl::OkStatus();
}

absl::Status SnapshotReader::Feed(absl::string_view bytes) {
  if (state_ == State::kFailed) {
    return absl::FailedPreconditionError(
        "session snapshot: reading stopped at an earlier error");
  }
  while (!bytes.empty()) {
    if (state_ == State::kRows) {
      const size_t before = bytes.size();
      const absl::string_view start = bytes;
      const absl::Status taken = TakeRows(&bytes);
      sum_ = Checksum(sum_, start.substr(0, before - bytes.size()));
      snapshot_bytes_ += static_cast<int64_t>(before - bytes.size());
      if (!taken.ok()) {
        return Fail(absl::Status(
            taken.code(),
            absl::StrCat("session snapshot \"", absl::CHexEscape(header_.id),
                         "\": ", taken.message())));
      }
      if (layer_ == header_.shape.num_layers) {
        state_ = State::kTrailer;
        need_ = 4;
      }
      continue;
    }
    const size_t take = std::min(bytes.size(), need_ - buffer_.size());
    buffer_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    if (buffer_.size() < need_) break;
    if (state_ == State::kTrailer) {
      uint32_t stored = 0;
      std::memcpy(&stored, buffer_.data(), sizeof stored);
      if (stored != sum_) {
        return Fail(absl::DataLossError(absl::StrCat(
            "session snapshot \"", absl::CHexEscape(header_.id),
            "\": its checksum does not match its ", snapshot_bytes_,
            " bytes (corrupted in transit or on disk)")));
      }
      completed_.push_back(Session{std::move(header_), std::move(*cache_)});
      header_ = SnapshotHeader();
      cache_.reset();
      buffer_.clear();
      sum_ = Checksum(0, {});
      snapshot_bytes_ = 0;
      state_ = State::kPreamble;
      need_ = kPreambleBytes;
      continue;
    }
    sum_ = Checksum(sum_, buffer_);
    snapshot_bytes_ += static_cast<int64_t>(buffer_.size());
    if (state_ == State::kPreamble) {
      if (absl::string_view(buffer_).substr(0, kMagic.size()) != kMagic) {
        return Fail(absl::DataLossError(
            "session snapshot: these bytes are not one (no \"ATTNSNAP\" at "
            "the start)"));
      }
      uint32_t version = 0, header_bytes = 0;
      std::memcpy(&version, buffer_.data() + 8, 4);
      std::memcpy(&header_bytes, buffer_.data() + 12, 4);
      if (version < 1 || version > kSnapshotVersion) {
        return Fail(absl::FailedPreconditionError(absl::StrCat(
            "session snapshot: version ", version,
            "; this server reads versions 1 to ", kSnapshotVersion)));
      }
      version_ = version;
      if (header_bytes > kMaxHeaderBytes) {
        return Fail(absl::DataLossError(absl::StrCat(
            "session snapshot: a header of ", header_bytes,
            " bytes is corrupted (at most ", kMaxHeaderBytes, ")")));
      }
      state_ = State::kHeader;
      need_ = header_bytes;
      buffer_.clear();
      continue;
    }
    // kHeader
    const absl::Status parsed = ParseHeader();
    buffer_.clear();
    if (!parsed.ok()) return Fail(parsed);
    state_ = State::kRows;
  }
  return absl::OkStatus();
}

std::optional<SnapshotReader::Session> SnapshotReader::TakeCompleted() {
  if (completed_.empty()) return std::nullopt;
  Session s = std::move(completed_.front());
  completed_.pop_front();
  return s;
}

absl::Status SnapshotReader::Finish() const {
  if (state_ == State::kFailed) {
    return absl::FailedPreconditionError(
        "session snapshot: reading stopped at an earlier error");
  }
  if (state_ == State::kPreamble && buffer_.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "session snapshot",
      header_.id.empty()
          ? std::string()
          : absl::StrCat(" \"", absl::CHexEscape(header_.id), "\""),
      ": truncated, the bytes end after ",
      snapshot_bytes_ +
          (state_ == State::kRows ? 0 : static_cast<int64_t>(buffer_.size())),
      " bytes of it"));
}

}  // namespace attnserve::kvcache
