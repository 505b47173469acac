#include "wire/step_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::wire {
namespace {

// The header's fields (docs/api.md "StepChannel").
constexpr int64_t kMagic = 0;
constexpr int64_t kVersion = 4;
constexpr int64_t kRequestCapacity = 8;
constexpr int64_t kResponseCapacity = 12;
constexpr int64_t kRequestOffset = 16;
constexpr int64_t kResponseOffset = 20;
constexpr int64_t kRequestSeq = 64;
constexpr int64_t kRequestBytes = 68;
constexpr int64_t kServerSleeping = 72;
constexpr int64_t kHangup = 76;
constexpr int64_t kResponseSeq = 128;
constexpr int64_t kResponseBytes = 132;
constexpr int64_t kClientSleeping = 136;
constexpr int64_t kClosed = 140;
constexpr int64_t kAlign = 64;

uint32_t Load(const uint32_t* field,
              std::memory_order order = std::memory_order_acquire) {
  return __atomic_load_n(field, static_cast<int>(order));
}

void Store(uint32_t* field, uint32_t value,
           std::memory_order order = std::memory_order_release) {
  __atomic_store_n(field, value, static_cast<int>(order));
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Sleeps while *field == expected, for at most `limit` (shared futex: the
// peer is another process).
void FutexWait(uint32_t* field, uint32_t expected, absl::Duration limit) {
  const timespec timeout = absl::ToTimespec(limit);
  syscall(SYS_futex, field, FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void FutexWake(uint32_t* field) {
  syscall(SYS_futex, field, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

using Clock = std::chrono::steady_clock;

// Polls `ready` for `spin`, then sleeps on `doorbell` (announcing it in
// `sleeping`) in slices until `ready` or `give_up`; true when ready.
template <typename Ready, typename GiveUp>
bool Await(uint32_t* doorbell, uint32_t* sleeping, absl::Duration spin,
           Ready ready, GiveUp give_up) {
  const Clock::time_point spin_end =
      Clock::now() + absl::ToChronoNanoseconds(spin);
  for (int polls = 0;; ++polls) {
    if (ready()) return true;
    if (polls % 64 == 63) {
      if (give_up()) return false;
      if (Clock::now() >= spin_end) break;
    }
    CpuRelax();
  }
  for (;;) {
    const uint32_t seen = Load(doorbell);
    Store(sleeping, 1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready() || give_up()) {
      Store(sleeping, 0);
      return ready();
    }
    FutexWait(doorbell, seen, kWaitSlice);
    Store(sleeping, 0);
    if (ready()) return true;
  }
}

}  // namespace

StepRing::StepRing(char* base, int64_t request_capacity,
                   int64_t response_capacity)
    : base_(base),
      request_capacity_(request_capacity),
      response_capacity_(response_capacity),
      response_offset_(kStepRingHeaderBytes + request_capacity) {}

uint32_t* StepRing::Field(int64_t offset) const {
  return reinterpret_cast<uint32_t*>(base_ + offset);
}

absl::StatusOr<StepRing> StepRing::Create(char* base, int64_t size) {
  if (reinterpret_cast<uintptr_t>(base) % kAlign != 0) {
    return absl::InvalidArgumentError(
        "the step channel's region does not start 64-byte aligned");
  }
  if (size < kStepRingMinBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("region: ", size, " bytes; a step channel needs at least ",
                     kStepRingMinBytes));
  }
  const int64_t slots = size - kStepRingHeaderBytes;
  const int64_t request =
      std::min(slots / 2 / kAlign * kAlign, kStepRingMaxSlotBytes);
  const int64_t response =
      std::min((slots - request) / kAlign * kAlign, kStepRingMaxSlotBytes);
  std::memset(base, 0, kStepRingHeaderBytes);
  StepRing ring(base, request, response);
  Store(ring.Field(kVersion), kStepRingVersion, std::memory_order_relaxed);
  Store(ring.Field(kRequestCapacity), static_cast<uint32_t>(request),
        std::memory_order_relaxed);
  Store(ring.Field(kResponseCapacity), static_cast<uint32_t>(response),
        std::memory_order_relaxed);
  Store(ring.Field(kRequestOffset), kStepRingHeaderBytes,
        std::memory_order_relaxed);
  Store(ring.Field(kResponseOffset),
        static_cast<uint32_t>(ring.response_offset_),
        std::memory_order_relaxed);
  Store(ring.Field(kMagic), kStepRingMagic, std::memory_order_seq_cst);
  return ring;
}

absl::StatusOr<StepRing> StepRing::Attach(char* base, int64_t size) {
  if (size < kStepRingHeaderBytes ||
      reinterpret_cast<uintptr_t>(base) % kAlign != 0) {
    return absl::InvalidArgumentError("not a step channel's ring");
  }
  StepRing probe(base, 0, 0);
  const uint32_t magic = Load(probe.Field(kMagic));
  const uint32_t version = Load(probe.Field(kVersion));
  const int64_t request = Load(probe.Field(kRequestCapacity));
  const int64_t response = Load(probe.Field(kResponseCapacity));
  const int64_t request_offset = Load(probe.Field(kRequestOffset));
  const int64_t response_offset = Load(probe.Field(kResponseOffset));
  if (magic != kStepRingMagic || version != kStepRingVersion ||
      request_offset != kStepRingHeaderBytes ||
      response_offset != kStepRingHeaderBytes + request ||
      response_offset + response > size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a step channel's ring of version ", kStepRingVersion, " (magic 0x",
        absl::Hex(magic), ", version ", version, ")"));
  }
  return StepRing(base, request, response);
}

bool StepRing::WaitForRequest(absl::Duration spin,
                              const std::function<bool()>& stop) {
  const uint32_t answered = Load(Field(kResponseSeq));
  uint32_t* request_seq = Field(kRequestSeq);
  return Await(
      request_seq, Field(kServerSleeping), spin,
      [&] { return Load(request_seq) != answered; },
      [&] { return hung_up() || stop(); });
}

bool StepRing::hung_up() const { return Load(Field(kHangup)) != 0; }

absl::Status StepRing::TakeRequest(std::string* request) {
  const int64_t bytes = Load(Field(kRequestBytes));
  if (bytes > request_capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_bytes: ", bytes, " exceed the request slot's ",
                     request_capacity_));
  }
  request->assign(base_ + kStepRingHeaderBytes, bytes);
  return absl::OkStatus();
}

void StepRing::Respond(absl::string_view response) {
  std::memcpy(base_ + response_offset_, response.data(), response.size());
  Store(Field(kResponseBytes), static_cast<uint32_t>(response.size()),
        std::memory_order_relaxed);
  Store(Field(kResponseSeq), Load(Field(kRequestSeq)));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Load(Field(kClientSleeping)) != 0) FutexWake(Field(kResponseSeq));
}

void StepRing::Close() {
  Store(Field(kClosed), 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  FutexWake(Field(kResponseSeq));
}

void StepRing::Interrupt() { FutexWake(Field(kRequestSeq)); }

void StepRing::Hangup() {
  Store(Field(kHangup), 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  FutexWake(Field(kRequestSeq));
}

absl::Status StepRing::Call(absl::string_view request, std::string* response,
                            absl::Duration spin, absl::Time deadline) {
  if (static_cast<int64_t>(request.size()) > request_capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request (", request.size(),
                     " bytes) does not fit the step channel's request slot (",
                     request_capacity_, " bytes)"));
  }
  uint32_t* closed = Field(kClosed);
  if (Load(closed) != 0) {
    return absl::UnavailableError("the server closed the step channel");
  }
  uint32_t* response_seq = Field(kResponseSeq);
  const uint32_t seq = Load(response_seq) + 1;
  std::memcpy(base_ + kStepRingHeaderBytes, request.data(), request.size());
  Store(Field(kRequestBytes), static_cast<uint32_t>(request.size()),
        std::memory_order_relaxed);
  Store(Field(kRequestSeq), seq);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Load(Field(kServerSleeping)) != 0) FutexWake(Field(kRequestSeq));

  const bool answered = Await(
      response_seq, Field(kClientSleeping), spin,
      [&] { return Load(response_seq) == seq; },
      [&] { return Load(closed) != 0 || absl::Now() >= deadline; });
  if (!answered) {
    return Load(closed) != 0
               ? absl::UnavailableError("the server closed the step channel")
               : absl::DeadlineExceededError(
                     "the step channel's answer did not come in time");
  }
  const int64_t bytes = Load(Field(kResponseBytes));
  if (bytes > response_capacity_) {
    return absl::InternalError(absl::StrCat("response_bytes: ", bytes,
                                            " exceed the response slot's ",
                                            response_capacity_));
  }
  response->assign(base_ + response_offset_, bytes);
  return absl::OkStatus();
}

}  // namespace attnserve::wire
