#include "client/shared_region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/rpc_status.h"

namespace attnserve::client {
namespace {

// The object being set up, for the signal handler: a SIGINT or SIGTERM
// before the server has mapped it would otherwise leave it in /dev/shm.
char g_pending[256];
struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGINT, SIGTERM};

void UnlinkPendingAndDie(int signal) {
  if (g_pending[0] != '\0') shm_unlink(g_pending);
  ::signal(signal, SIG_DFL);
  raise(signal);
}

void GuardPending(const std::string& path) {
  std::strncpy(g_pending, path.c_str(), sizeof(g_pending) - 1);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = UnlinkPendingAndDie;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &action, &g_previous[i]);
}

void UnguardPending() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_pending[0] = '\0';
}

absl::Status LocalError(absl::string_view step, const std::string& path) {
  return absl::InternalError(absl::StrCat("shared memory: ", step, " \"", path,
                                          "\": ", std::strerror(errno)));
}

}  // namespace

absl::Status SharedMemoryRpcError(absl::string_view step,
                                  const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("shared memory: ", step, ": ",
                                   StatusCodeName(status.error_code()), ": ",
                                   status.error_message()));
}

absl::StatusOr<std::unique_ptr<RegisteredRegion>> RegisteredRegion::Create(
    const std::shared_ptr<grpc::Channel>& channel,
    const ConnectionOptions& connection, int64_t size) {
  std::unique_ptr<RegisteredRegion> p(new RegisteredRegion());
  p->connection_ = connection;
  p->stub_ = v1::SharedMemoryService::NewStub(channel);
  v1::SharedMemoryStatusResponse server;
  {
    grpc::ClientContext context;
    PrepareContext(connection, &context);
    const grpc::Status status =
        p->stub_->Status(&context, v1::SharedMemoryStatusRequest(), &server);
    if (!status.ok()) return SharedMemoryRpcError("Status", status);
  }
  static std::atomic<int> counter{0};
  p->name_ = absl::StrCat(server.prefix(), "attnctl_", getpid(), "_",
                          counter.fetch_add(1));

  const std::string path = "/" + p->name_;
  GuardPending(path);
  const int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    UnguardPending();
    return LocalError("shm_open", path);
  }
  // From here on the name exists: every way out unlinks it.
  auto fail = [&](absl::Status status) {
    close(fd);
    shm_unlink(path.c_str());
    UnguardPending();
    return status;
  };
  if (ftruncate(fd, size) != 0) return fail(LocalError("ftruncate", path));
  void* data = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail(LocalError("mmap", path));
  close(fd);
  p->data_ = static_cast<char*>(data);
  p->size_ = size;

  // The lease has no deadline: it lasts as long as the region.
  ConnectionOptions lease_options = connection;
  lease_options.timeout = absl::InfiniteDuration();
  p->lease_context_ = std::make_unique<grpc::ClientContext>();
  PrepareContext(lease_options, p->lease_context_.get());
  v1::RegisterSharedMemoryRequest registration;
  registration.set_name(p->name_);
  registration.set_key(p->name_);
  registration.set_byte_size(size);
  p->lease_ = p->stub_->Register(p->lease_context_.get(), registration);
  v1::SharedMemoryLease lease;
  const bool registered = p->lease_->Read(&lease);
  // Mapped by the server, or refused: the name has done its job either way
  // (the destructor unmaps).
  shm_unlink(path.c_str());
  UnguardPending();
  if (!registered) {
    const grpc::Status status = p->lease_->Finish();
    p->lease_.reset();
    return SharedMemoryRpcError("Register", status);
  }
  return p;
}

RegisteredRegion::~RegisteredRegion() {
  if (lease_ != nullptr) {
    grpc::ClientContext context;
    PrepareContext(connection_, &context);
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name_);
    v1::UnregisterSharedMemoryResponse response;
    if (!stub_->Unregister(&context, request, &response).ok()) {
      lease_context_->TryCancel();
    }
    lease_->Finish();
  }
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
}

}  // namespace attnserve::client
