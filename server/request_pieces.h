#ifndef ATTNSERVE_SERVER_REQUEST_PIECES_H_
#define ATTNSERVE_SERVER_REQUEST_PIECES_H_

// The pieces of one AttendPieces call put back together: the first piece
// announces the request's size (1 to --max_request_bytes), every piece's
// data is kept in order, and once the stream ends the pieces are parsed into
// the AttendRequest, each freed as the parser leaves it (so the pieces and
// the request together hold little more than the request). Errors are
// InvalidArgument naming what is wrong. Not thread-safe; one per call.

#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "attnserve/v1/attention.pb.h"

namespace attnserve::server {

class RequestPieces {
 public:
  explicit RequestPieces(int64_t max_request_bytes)
      : max_request_bytes_(max_request_bytes) {}

  // Checks `piece` and keeps its data (moved out of it).
  absl::Status Add(v1::RequestPiece& piece);
  // The stream ended: every announced byte has come and they parse as an
  // AttendRequest, into `request`. The pieces are gone afterwards.
  absl::Status Parse(v1::AttendRequest* request);

  // The size the first piece announced; 0 before it.
  int64_t request_bytes() const { return request_bytes_; }
  int64_t received_bytes() const { return received_bytes_; }

 private:
  const int64_t max_request_bytes_;
  std::deque<std::string> pieces_;
  int64_t pieces_added_ = 0;
  int64_t request_bytes_ = 0;
  int64_t received_bytes_ = 0;
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_REQUEST_PIECES_H_
