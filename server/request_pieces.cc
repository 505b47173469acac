#include "server/request_pieces.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace attnserve::server {
namespace {

// The pieces in order as one input for the protobuf parser; each piece is
// freed once the parser has moved past it.
class PiecesInput final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit PiecesInput(std::deque<std::string>* pieces) : pieces_(pieces) {}

  bool Next(const void** data, int* size) override {
    if (backed_up_ > 0) {  // the tail of the current piece again
      const std::string& piece = pieces_->front();
      *data = piece.data() + piece.size() - backed_up_;
      *size = static_cast<int>(backed_up_);
      count_ += backed_up_;
      backed_up_ = 0;
      return true;
    }
    if (started_) pieces_->pop_front();  // the parser is done with it
    while (!pieces_->empty() && pieces_->front().empty()) pieces_->pop_front();
    if (pieces_->empty()) return false;
    started_ = true;
    *data = pieces_->front().data();
    *size = static_cast<int>(pieces_->front().size());
    count_ += *size;
    return true;
  }
  void BackUp(int count) override {
    backed_up_ += count;
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) {
        BackUp(size - count);
        return true;
      }
      count -= size;
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  std::deque<std::string>* const pieces_;
  bool started_ = false;
  int64_t backed_up_ = 0;
  int64_t count_ = 0;
};

}  // namespace

absl::Status RequestPieces::Add(v1::RequestPiece& piece) {
  const int64_t announced = piece.request_bytes();
  if (pieces_added_ == 0) {
    if (announced < 1 || announced > max_request_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AttendPieces: the first piece's request_bytes must be between 1 "
          "and --max_request_bytes = ",
          max_request_bytes_, ", got ", announced));
    }
    request_bytes_ = announced;
  } else if (announced != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AttendPieces: request_bytes is set in piece ", pieces_added_,
        "; only the first piece announces the size"));
  }
  const int64_t size = static_cast<int64_t>(piece.data().size());
  if (size > request_bytes_ - received_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AttendPieces: the pieces carry more than the ", request_bytes_,
        " bytes that the first piece announced (request_bytes)"));
  }
  received_bytes_ += size;
  ++pieces_added_;
  pieces_.push_back(std::move(*piece.mutable_data()));
  return absl::OkStatus();
}

absl::Status RequestPieces::Parse(v1::AttendRequest* request) {
  if (request_bytes_ == 0 || received_bytes_ != request_bytes_) {
    pieces_.clear();
    return absl::InvalidArgumentError(
        absl::StrCat("AttendPieces: the pieces ended after ", received_bytes_,
                     " bytes of the ", request_bytes_,
                     " that the first piece announced (request_bytes)"));
  }
  PiecesInput input(&pieces_);
  const bool parsed = request->ParseFromZeroCopyStream(&input);
  pieces_.clear();
  if (!parsed) {
    return absl::InvalidArgumentError(
        "AttendPieces: the pieces are not a serialized AttendRequest");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::server
