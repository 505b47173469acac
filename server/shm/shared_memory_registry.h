#ifndef ATTNSERVE_SERVER_SHM_SHARED_MEMORY_REGISTRY_H_
#define ATTNSERVE_SERVER_SHM_SHARED_MEMORY_REGISTRY_H_

// POSIX shared-memory regions registered by same-host clients (docs/api.md
// "Shared memory"): each is a shm_open object under the configured prefix,
// mapped read-write once, registered under a client-chosen name, and used by
// Attend calls in place of message bytes.
//
// A region is the client's memory, and the client can shrink the object
// (ftruncate) at any moment; touching a mapped page past the new end raises
// SIGBUS, which would kill the server. Two defences: Check() compares the
// object's size (fstat) with the mapped size at every use, so that a region
// that shrank before a call is refused with a clear error; and a process-wide
// SIGBUS handler, installed by the first registry, catches the race of a
// region that shrinks during a call: it replaces the whole mapping of the
// faulting region with zero pages (the kernel then reads zeros and its writes
// go nowhere), marks the region, and the call fails afterwards with
// FAILED_PRECONDITION (Check() reports it). A fault outside every region goes
// to the previous handler, or kills the process as before.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace attnserve::server {

struct SharedMemoryOptions {
  // Off (default): the server refuses every shared-memory call and reference
  // with FAILED_PRECONDITION naming --shared_memory.
  bool enabled = false;
  // Objects a client may register must be named with this prefix (non-empty,
  // [A-Za-z0-9_.-]). Default "attnserve_".
  std::string prefix = "attnserve_";
  // Regions registered at once, in [1, 1024]. Default 64.
  int max_regions = 64;
  // Bytes of all registered regions together, >= 1. Default 64 GiB (address
  // space: the pages are the clients').
  int64_t max_bytes = int64_t{64} << 30;
};

// One mapped region. Immutable after creation but for its call count and
// its SIGBUS mark; shared by the registry and every call using it, unmapped
// when the last of them lets go. Thread-safe.
class SharedRegion {
 public:
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  // Where the region starts in the object (0 for attnserve.v1's; the Open
  // Inference Protocol's registrations may start anywhere).
  int64_t offset() const { return offset_; }
  int64_t size() const { return size_; }
  // The region's first byte (byte offset() of the object), read-write.
  // Page-aligned when offset() is a multiple of the page size.
  char* data() const { return data_; }

  // OK while the object still holds offset() + size() bytes and no SIGBUS
  // hit the
  // region; FailedPrecondition naming the region and its sizes otherwise (it
  // is unusable from then on: unregister it).
  absl::Status Check() const;

  void CountCall() { calls_.fetch_add(1, std::memory_order_relaxed); }
  int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  friend class SharedMemoryRegistry;
  SharedRegion(std::string name, std::string key, int fd, char* mapping,
               int64_t mapping_size, int64_t offset, int64_t size,
               int guard_slot);

  const std::string name_;
  const std::string key_;
  const int fd_;
  // mmap's offset must be page-aligned: the mapping starts at the page that
  // holds byte offset_ and data_ points into it.
  char* const mapping_;
  const int64_t mapping_size_;
  const int64_t offset_;
  char* const data_;
  const int64_t size_;
  // Its entry in the SIGBUS handler's table.
  const int guard_slot_;
  std::atomic<int64_t> calls_{0};
};

struct SharedMemoryStats {
  int64_t regions = 0;
  int64_t bytes = 0;
  // Attend calls served through shared memory since start.
  int64_t calls = 0;
};

// The registered regions by name. Thread-safe.
class SharedMemoryRegistry {
 public:
  // InvalidArgument naming the flag for options out of range. Installs the
  // SIGBUS handler (once per process) when enabled.
  static absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>> Create(
      const SharedMemoryOptions& options);
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  const SharedMemoryOptions& options() const { return options_; }

  // Opens the object "/<key>" (never creating it), checks it holds at least
  // `offset` + `byte_size` bytes and maps the `byte_size` from `offset`.
  // The limits count byte_size. Errors: FailedPrecondition naming
  // --shared_memory when off; InvalidArgument for a bad name, a key outside
  // the prefix or with other characters, byte_size < 1, a negative offset,
  // or an object smaller than offset + byte_size; NotFound when no such
  // object exists; PermissionDenied when the server may not open it;
  // AlreadyExists when `name` is registered; ResourceExhausted past
  // max_regions or max_bytes. Both protocols' registrations go through here,
  // so the limits bound them together.
  absl::StatusOr<std::shared_ptr<SharedRegion>> Register(absl::string_view name,
                                                         absl::string_view key,
                                                         int64_t byte_size,
                                                         int64_t offset = 0);

  // Removes `name`; calls holding the region keep it until they finish.
  // NotFound when not registered; FailedPrecondition when off.
  absl::StatusOr<std::shared_ptr<SharedRegion>> Unregister(
      absl::string_view name);

  // Removes `region` if it is still the one registered under its name (a
  // lease that ended after an Unregister must not remove a newer
  // registration of the same name).
  void Remove(const SharedRegion* region);

  // NotFound naming the region when not registered; FailedPrecondition when
  // off.
  absl::StatusOr<std::shared_ptr<SharedRegion>> Find(
      absl::string_view name) const;

  // Every registered region, by name.
  std::vector<std::shared_ptr<SharedRegion>> List() const;

  void CountCall() { calls_.fetch_add(1, std::memory_order_relaxed); }
  SharedMemoryStats Stats() const;

  // FailedPrecondition naming --shared_memory when off, else OK.
  absl::Status CheckEnabled() const;

 private:
  explicit SharedMemoryRegistry(const SharedMemoryOptions& options)
      : options_(options) {}

  const SharedMemoryOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<SharedRegion>, std::less<>> regions_
      ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> calls_{0};
};

}  // namespace attnserve::server

#endif  // ATTNSERVE_SERVER_SHM_SHARED_MEMORY_REGISTRY_H_
