#include "client/shared_memory.h"

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
#include "wire/dtype.h"

namespace attnserve::client {
namespace {

constexpr int64_t kAlignment = 64;

int64_t AlignUp(int64_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

int64_t Elements(const v1::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape()) n *= d;
  return n;
}

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

absl::Status RpcError(absl::string_view step, const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("shared memory: ", step, ": ",
                                   StatusCodeName(status.error_code()), ": ",
                                   status.error_message()));
}

absl::Status LocalError(absl::string_view step, const std::string& path) {
  return absl::InternalError(absl::StrCat("shared memory: ", step, " \"", path,
                                          "\": ", std::strerror(errno)));
}

// Bytes of the output and of the weights the server will write: [B, Hq, Lq,
// Dv] of the output dtype and [B, Hq, Lq, Lk] of f32 (query rows from the
// query, Dv and Lk from the value, in either layout). 0 when the request's
// shapes are not rank 4: the server then refuses it with the reason.
std::pair<int64_t, int64_t> OutputBytes(const v1::AttendRequest& request) {
  const v1::Tensor& q = request.query();
  const v1::Tensor& v = request.value();
  if (q.shape_size() != 4 || v.shape_size() != 4 || q.shape(3) <= 0) {
    return {0, 0};
  }
  const int64_t rows = Elements(q) / q.shape(3);
  const int64_t keys = request.layout() == v1::BLHD ? v.shape(1) : v.shape(2);
  const v1::DataType out_dtype =
      request.output_dtype() == v1::DATA_TYPE_UNSPECIFIED
          ? q.dtype()
          : request.output_dtype();
  return {
      rows * v.shape(3) * static_cast<int64_t>(wire::ElementSize(out_dtype)),
      request.return_weights() ? rows * keys * 4 : 0};
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryPlacement>>
SharedMemoryPlacement::Create(const std::shared_ptr<grpc::Channel>& channel,
                              const ConnectionOptions& connection,
                              v1::AttendRequest* request) {
  std::unique_ptr<SharedMemoryPlacement> p(new SharedMemoryPlacement());
  p->connection_ = connection;
  p->stub_ = v1::SharedMemoryService::NewStub(channel);
  v1::SharedMemoryStatusResponse server;
  {
    grpc::ClientContext context;
    PrepareContext(connection, &context);
    const grpc::Status status =
        p->stub_->Status(&context, v1::SharedMemoryStatusRequest(), &server);
    if (!status.ok()) return RpcError("Status", status);
  }
  static std::atomic<int> counter{0};
  p->name_ = absl::StrCat(server.prefix(), "attnctl_", getpid(), "_",
                          counter.fetch_add(1));

  v1::Tensor* inputs[] = {request->mutable_query(), request->mutable_key(),
                          request->mutable_value()};
  const bool present[] = {request->has_query(), request->has_key(),
                          request->has_value()};
  int64_t offsets[3] = {0, 0, 0};
  int64_t size = 0;
  for (int i = 0; i < 3; ++i) {
    if (!present[i]) continue;
    offsets[i] = size;
    size = AlignUp(size + static_cast<int64_t>(inputs[i]->data().size()));
  }
  const auto [output_bytes, weights_bytes] = OutputBytes(*request);
  const int64_t output_offset = size;
  size = AlignUp(size + output_bytes);
  const int64_t weights_offset = size;
  size = AlignUp(size + weights_bytes);
  size = std::max<int64_t>(size, kAlignment);

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
  auto fail_mapped = [&](absl::Status status) {
    shm_unlink(path.c_str());
    UnguardPending();
    return status;  // the destructor unmaps
  };

  for (int i = 0; i < 3; ++i) {
    if (!present[i]) continue;
    v1::Tensor* t = inputs[i];
    std::memcpy(p->data_ + offsets[i], t->data().data(), t->data().size());
    v1::SharedMemoryRef* ref = t->mutable_shared_memory();
    ref->set_region(p->name_);
    ref->set_offset(offsets[i]);
    ref->set_byte_size(static_cast<int64_t>(t->data().size()));
    t->clear_data();
  }
  if (output_bytes > 0) {
    v1::SharedMemoryRef* ref = request->mutable_output_shared_memory();
    ref->set_region(p->name_);
    ref->set_offset(output_offset);
    ref->set_byte_size(output_bytes);
  }
  if (weights_bytes > 0) {
    v1::SharedMemoryRef* ref = request->mutable_weights_shared_memory();
    ref->set_region(p->name_);
    ref->set_offset(weights_offset);
    ref->set_byte_size(weights_bytes);
  }

  // The lease has no deadline: it lasts as long as the placement.
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
  if (!p->lease_->Read(&lease)) {
    const grpc::Status status = p->lease_->Finish();
    p->lease_.reset();
    return fail_mapped(RpcError("Register", status));
  }
  // Mapped by the server: the name has done its job.
  shm_unlink(path.c_str());
  UnguardPending();
  return p;
}

SharedMemoryPlacement::~SharedMemoryPlacement() {
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

absl::Status SharedMemoryPlacement::CopyOut(absl::string_view name,
                                            v1::Tensor* tensor) const {
  if (!tensor->has_shared_memory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: the response carries the ", name,
        "'s bytes instead of a reference to region \"", name_, "\""));
  }
  const v1::SharedMemoryRef& ref = tensor->shared_memory();
  if (ref.region() != name_ || ref.offset() < 0 || ref.byte_size() < 0 ||
      ref.offset() > size_ || ref.byte_size() > size_ - ref.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: the response refers to bytes [", ref.offset(), ", +",
        ref.byte_size(), ") of region \"", ref.region(),
        "\", not a span of attnctl's \"", name_, "\""));
  }
  tensor->set_data(data_ + ref.offset(), static_cast<size_t>(ref.byte_size()));
  tensor->clear_shared_memory();
  return absl::OkStatus();
}

absl::Status SharedMemoryPlacement::CollectOutputs(
    v1::AttendResponse* response) const {
  if (absl::Status s = CopyOut("output", response->mutable_output()); !s.ok()) {
    return s;
  }
  if (!response->has_weights()) return absl::OkStatus();
  return CopyOut("weights", response->mutable_weights());
}

}  // namespace attnserve::client
