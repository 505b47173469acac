#ifndef ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_
#define ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_

// A gRPC message allocator that puts a unary callback method's request and
// response on one protobuf arena per call (SetMessageAllocatorFor_<Method>).
// Parsing a request allocates every sub-message, shape and string object
// separately on the heap, and answering allocates the response's; on the
// arena they are carved from a block that comes with the call's holder and
// are freed at once when gRPC releases the holder, after the call's OnDone
// (a tiny Attend call's mallocs 69.5 -> 45.7, docs/benchmarks.md "Per-call
// instructions"). Tensor bytes (std::string buffers) stay on the heap.
//
// Handlers see ordinary messages; only assigning or swapping whole messages
// between this arena and the heap would copy (protobuf's rule), and no
// handler does that with these.

#include <cstddef>

#include "google/protobuf/arena.h"
#include "grpcpp/support/message_allocator.h"

namespace attnserve::server {

template <typename Request, typename Response>
class ArenaMessageAllocator : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder();
  }

 private:
  // The first block, inside the holder: enough for an Attend or AttendModel
  // call's messages as the gRPC thread that made the arena parses the
  // request and, for a call run inline, fills the response. Protobuf's arena
  // keeps a block per thread: a worker's first allocation (the response of
  // a queued call) takes a new one, as do larger messages (many shapes, long
  // ids).
  static constexpr size_t kInitialBlockBytes = 4096;

  class Holder : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() : arena_(initial_block_, kInitialBlockBytes) {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    // Declared before the arena: constructed first, destroyed after it.
    alignas(std::max_align_t) char initial_block_[kInitialBlockBytes];
    google::protobuf::Arena arena_;
  };
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_
