#include "wire/attend_call.h"

#include <cstdint>
#include <memory>
#include <string>

#include "wire/transport.h"

namespace attnserve::wire {

grpc::Status CallAttend(v1::AttentionService::StubInterface& stub,
                        grpc::ClientContext* context,
                        const v1::AttendRequest& request,
                        v1::AttendResponse* response) {
  if (static_cast<int64_t>(request.ByteSizeLong()) <= kRequestPieceBytes) {
    return stub.Attend(context, request, response);
  }
  return CallAttendInPieces(stub, context, request.SerializeAsString(),
                            response);
}

v1::RequestPiece PieceAt(absl::string_view request_bytes, size_t at) {
  v1::RequestPiece piece;
  if (at == 0) {
    piece.set_request_bytes(static_cast<int64_t>(request_bytes.size()));
  }
  const absl::string_view data =
      request_bytes.substr(at, static_cast<size_t>(kRequestPieceBytes));
  piece.set_data(data.data(), data.size());
  return piece;
}

grpc::Status CallAttendInPieces(v1::AttentionService::StubInterface& stub,
                                grpc::ClientContext* context,
                                absl::string_view bytes,
                                v1::AttendResponse* response) {
  std::unique_ptr<grpc::ClientWriterInterface<v1::RequestPiece>> writer =
      stub.AttendPieces(context, response);
  for (size_t at = 0; at < bytes.size();
       at += static_cast<size_t>(kRequestPieceBytes)) {
    // A refused call (the server answered early) takes no more pieces.
    if (!writer->Write(PieceAt(bytes, at))) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace attnserve::wire
