#include "server/shm/shared_memory_registry.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

constexpr int kMaxRegions = 1024;
constexpr size_t kMaxNameLength = 64;
// NAME_MAX of /dev/shm, less the leading "/".
constexpr size_t kMaxKeyLength = 254;

// The SIGBUS handler's view of the mapped regions: [begin, end) and whether a
// fault hit it. Lock-free, because the handler may run on any thread at any
// moment; slots are taken and given back under g_slots_mu.
struct GuardSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
  bool used = false;  // under g_slots_mu
};
GuardSlot g_slots[kMaxRegions];
std::mutex g_slots_mu;
struct sigaction g_previous_sigbus;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (begin != 0 && begin <= address && address < end) {
      // Zero pages in place of the whole region: the faulting access is
      // retried and succeeds; the call sees the mark afterwards. mmap is a
      // plain system call here, safe in a handler.
      mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      slot.faulted.store(true, std::memory_order_release);
      return;
    }
  }
  // Not a region's: what would have happened without us.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 &&
      g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL &&
      g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  // The access is retried and faults again, now fatally.
  ::signal(SIGBUS, SIG_DFL);
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

// A free slot, or -1.
int TakeSlot(char* data, int64_t size) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  for (int i = 0; i < kMaxRegions; ++i) {
    GuardSlot& slot = g_slots[i];
    if (slot.used) continue;
    slot.used = true;
    slot.faulted.store(false, std::memory_order_relaxed);
    slot.end.store(
        reinterpret_cast<uintptr_t>(data) + static_cast<size_t>(size),
        std::memory_order_release);
    slot.begin.store(reinterpret_cast<uintptr_t>(data),
                     std::memory_order_release);
    return i;
  }
  return -1;
}

void GiveBackSlot(int index) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  GuardSlot& slot = g_slots[index];
  slot.begin.store(0, std::memory_order_release);
  slot.end.store(0, std::memory_order_release);
  slot.used = false;
}

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '.' || c == '-';
}

bool AllNameChars(absl::string_view text) {
  for (char c : text) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", text, "\"");
}

absl::Status CheckName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || !AllNameChars(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", Quoted(name), " is not 1 to ", kMaxNameLength,
                     " characters of [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

absl::Status CheckKey(absl::string_view key, absl::string_view prefix) {
  if (key.empty() || key.size() > kMaxKeyLength || !AllNameChars(key) ||
      absl::StrContains(key, "..")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: ", Quoted(key), " is not a shared-memory object name (1 to ",
        kMaxKeyLength,
        " characters of [A-Za-z0-9_.-], no \"..\", no \"/\": the name given "
        "to shm_open without its leading \"/\")"));
  }
  if (!absl::StartsWith(key, prefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: ", Quoted(key), " does not start with the server's prefix ",
        Quoted(prefix), " (--shared_memory_prefix)"));
  }
  return absl::OkStatus();
}

absl::Status OpenError(absl::string_view key, int error) {
  const std::string what = absl::StrCat("key: cannot open shared memory \"/",
                                        key, "\": ", std::strerror(error));
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(
          absl::StrCat(what, " (create it with shm_open before registering)"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(
          absl::StrCat(what, " (the server's user needs read-write access)"));
    default:
      return absl::InvalidArgumentError(what);
  }
}

}  // namespace

SharedRegion::SharedRegion(std::string name, std::string key, int fd,
                           char* mapping, int64_t mapping_size, int64_t offset,
                           int64_t size, int guard_slot)
    : name_(std::move(name)),
      key_(std::move(key)),
      fd_(fd),
      mapping_(mapping),
      mapping_size_(mapping_size),
      offset_(offset),
      data_(mapping + (mapping_size - size)),
      size_(size),
      guard_slot_(guard_slot) {}

SharedRegion::~SharedRegion() {
  // Out of the handler's table before the addresses can be reused.
  GiveBackSlot(guard_slot_);
  munmap(mapping_, static_cast<size_t>(mapping_size_));
  close(fd_);
}

absl::Status SharedRegion::Check() const {
  if (g_slots[guard_slot_].faulted.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory region ", Quoted(name_), " (\"/", key_,
        "\") shrank below its registered ", size_,
        " bytes during a call (its pages now read as zeros); unregister it"));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory region ", Quoted(name_),
                     ": fstat failed: ", std::strerror(errno)));
  }
  if (st.st_size - offset_ < size_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory region ", Quoted(name_), " (\"/", key_, "\") holds ",
        st.st_size, " bytes, less than its registered ", offset_ + size_,
        " (the object was truncated); unregister it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SharedMemoryRegistry>>
SharedMemoryRegistry::Create(const SharedMemoryOptions& options) {
  if (options.prefix.empty() || options.prefix.size() > kMaxKeyLength ||
      !AllNameChars(options.prefix) ||
      absl::StrContains(options.prefix, "..")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared_memory_prefix: ", Quoted(options.prefix), " is not 1 to ",
        kMaxKeyLength, " characters of [A-Za-z0-9_.-] without \"..\""));
  }
  if (options.max_regions < 1 || options.max_regions > kMaxRegions) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared_memory_max_regions must be in [1, ", kMaxRegions,
                     "], got ", options.max_regions));
  }
  if (options.max_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared_memory_max_bytes must be >= 1, got ", options.max_bytes));
  }
  if (options.enabled) InstallSigbusGuard();
  return std::unique_ptr<SharedMemoryRegistry>(
      new SharedMemoryRegistry(options));
}

absl::Status SharedMemoryRegistry::CheckEnabled() const {
  if (options_.enabled) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "shared memory is off on this server (start it with --shared_memory)");
}

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedMemoryRegistry::Register(
    absl::string_view name, absl::string_view key, int64_t byte_size,
    int64_t offset) {
  if (absl::Status enabled = CheckEnabled(); !enabled.ok()) return enabled;
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (absl::Status s = CheckKey(key, options_.prefix); !s.ok()) return s;
  if (byte_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size: must be >= 1, got ", byte_size));
  }
  if (offset < 0 || offset > std::numeric_limits<int64_t>::max() - byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offset: ", offset, " is negative or puts the region's end",
        " past 2^63 - 1 bytes"));
  }
  {
    // Cheap refusals before any system call.
    absl::MutexLock lock(&mu_);
    if (regions_.count(name) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "name: region ", Quoted(name),
          " is already registered (unregister it first, or pick another "
          "name)"));
    }
    if (static_cast<int>(regions_.size()) >= options_.max_regions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "name: ", regions_.size(), " regions are registered, the limit (",
          "--shared_memory_max_regions=", options_.max_regions, ")"));
    }
    if (byte_size > options_.max_bytes - bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "byte_size: ", byte_size, " bytes more than the ", bytes_,
          " registered exceed --shared_memory_max_bytes=", options_.max_bytes));
    }
  }
  const std::string path = absl::StrCat("/", key);
  const int fd = shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return OpenError(key, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("key: \"", path, "\" is not a shared-memory object"));
  }
  if (st.st_size - offset < byte_size) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size: ",
                     offset == 0 ? "" : absl::StrCat("offset ", offset, " + "),
                     byte_size, " exceeds the ", st.st_size, " bytes of \"",
                     path, "\" (ftruncate it to the size first)"));
  }
  // From the page holding `offset`: mmap takes page-aligned offsets only.
  static const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_offset = offset - offset % page;
  const int64_t map_size = byte_size + (offset - map_offset);
  void* data = mmap(nullptr, static_cast<size_t>(map_size),
                    PROT_READ | PROT_WRITE, MAP_SHARED, fd, map_offset);
  if (data == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("byte_size: cannot map ", byte_size, " bytes of \"", path,
                     "\": ", std::strerror(error)));
  }
  const int slot = TakeSlot(static_cast<char*>(data), map_size);
  if (slot < 0) {
    munmap(data, static_cast<size_t>(map_size));
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: the process maps ", kMaxRegions, " regions already"));
  }
  std::shared_ptr<SharedRegion> region(new SharedRegion(
      std::string(name), std::string(key), fd, static_cast<char*>(data),
      map_size, offset, byte_size, slot));
  absl::MutexLock lock(&mu_);
  // Checked again: another registration may have come in meanwhile (the
  // region just made is then unmapped as it goes).
  if (regions_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: region ", Quoted(name), " is already registered"));
  }
  if (static_cast<int>(regions_.size()) >= options_.max_regions ||
      byte_size > options_.max_bytes - bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: the registered regions reached --shared_memory_max_regions=",
        options_.max_regions,
        " or --shared_memory_max_bytes=", options_.max_bytes));
  }
  regions_.emplace(std::string(name), region);
  bytes_ += byte_size;
  return region;
}

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedMemoryRegistry::Unregister(
    absl::string_view name) {
  if (absl::Status enabled = CheckEnabled(); !enabled.ok()) return enabled;
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("name: no shared memory region ",
                                            Quoted(name), " is registered"));
  }
  std::shared_ptr<SharedRegion> region = std::move(it->second);
  regions_.erase(it);
  bytes_ -= region->size();
  return region;
}

void SharedMemoryRegistry::Remove(const SharedRegion* region) {
  std::shared_ptr<SharedRegion> removed;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region->name());
  if (it == regions_.end() || it->second.get() != region) return;
  removed = std::move(it->second);
  regions_.erase(it);
  bytes_ -= region->size();
}

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedMemoryRegistry::Find(
    absl::string_view name) const {
  if (absl::Status enabled = CheckEnabled(); !enabled.ok()) return enabled;
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("no shared memory region ",
                                            Quoted(name), " is registered"));
  }
  return it->second;
}

std::vector<std::shared_ptr<SharedRegion>> SharedMemoryRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<SharedRegion>> out;
  out.reserve(regions_.size());
  for (const auto& [name, region] : regions_) out.push_back(region);
  return out;
}

SharedMemoryStats SharedMemoryRegistry::Stats() const {
  SharedMemoryStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats.regions = static_cast<int64_t>(regions_.size());
    stats.bytes = bytes_;
  }
  stats.calls = calls_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace attnserve::server
