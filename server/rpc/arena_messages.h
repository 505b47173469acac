#ifndef ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_
#define ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_

// Unary calls' messages on one protobuf arena per call. Parsing a request
// allocates every sub-message, shape and string object separately on the
// heap, and answering allocates the response's; on the call's arena they are
// carved from a block that comes with the call's message holder and are
// freed at once when gRPC releases the holder, after the call's OnDone (a
// tiny Attend call's mallocs 69.5 -> 45.7, docs/benchmarks.md "Per-call
// instructions"). Tensor bytes (std::string buffers) stay on the heap.
//
// Handlers see ordinary messages; only assigning or swapping whole messages
// between the arena and the heap would copy (protobuf's rule), and no
// handler does that with these.

#include <cstddef>

#include "google/protobuf/arena.h"
#include "grpcpp/support/message_allocator.h"

namespace attnserve::server {

// A protobuf arena whose first block is part of the object: a call's
// messages as the gRPC thread that made it parses the request and, for a
// call run inline, fills the response, fit in it. Protobuf's arena keeps a
// block per thread: a worker's first allocation (the response of a queued
// call) takes a new one, as do larger messages (many shapes, long ids).
class CallArena {
 public:
  CallArena() : arena_(first_block_, kFirstBlockBytes) {}
  CallArena(const CallArena&) = delete;
  CallArena& operator=(const CallArena&) = delete;

  template <typename Message>
  Message* Create() {
    return google::protobuf::Arena::CreateMessage<Message>(&arena_);
  }

 private:
  static constexpr size_t kFirstBlockBytes = 4096;
  // Declared before the arena: constructed first, destroyed after it.
  alignas(std::max_align_t) char first_block_[kFirstBlockBytes];
  google::protobuf::Arena arena_;
};

// The allocator of a callback method whose handler needs nothing beside its
// messages (SetMessageAllocatorFor_<Method>).
template <typename Request, typename Response>
class ArenaMessageAllocator : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder();
  }

 private:
  class Holder : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() {
      this->set_request(arena_.Create<Request>());
      this->set_response(arena_.Create<Response>());
    }
    void Release() override { delete this; }

   private:
    CallArena arena_;
  };
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_RPC_ARENA_MESSAGES_H_
