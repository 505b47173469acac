#ifndef ATTNSERVE_TESTS_UTIL_SHM_OBJECT_H_
#define ATTNSERVE_TESTS_UTIL_SHM_OBJECT_H_

// A POSIX shared-memory object for one test, as a same-host client makes one
// for attnserve's --shared_memory: created under the default prefix
// "attnserve_", mapped read-write here, unmapped and unlinked at the end.
// Header-only.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace attnserve::testing {

class ShmObject {
 public:
  // "/attnserve_test_<pid>_<n>" of `size` bytes (zeros).
  explicit ShmObject(int64_t size) : size_(size) {
    static std::atomic<int> counter{0};
    key_ = absl::StrCat("attnserve_test_", getpid(), "_", counter++);
    const int fd =
        shm_open(("/" + key_).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << "shm_open /" << key_;
    EXPECT_EQ(ftruncate(fd, size), 0);
    void* data = mmap(nullptr, static_cast<size_t>(size),
                      PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(data, MAP_FAILED);
    data_ = static_cast<char*>(data);
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, static_cast<size_t>(size_));
    shm_unlink(("/" + key_).c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  // The name for shm_open without its "/", as RegisterSharedMemoryRequest.key.
  const std::string& key() const { return key_; }
  // This process's mapping of the first size() bytes.
  char* data() const { return data_; }

  // ftruncate to `size` bytes, as a client may do at any moment (this
  // process's own mapping past the new end is then unusable too).
  void Truncate(int64_t size) const {
    const int fd = shm_open(("/" + key_).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, size), 0);
    close(fd);
  }

 private:
  std::string key_;
  int64_t size_;
  char* data_ = nullptr;
};

}  // namespace attnserve::testing

#endif  // ATTNSERVE_TESTS_UTIL_SHM_OBJECT_H_
