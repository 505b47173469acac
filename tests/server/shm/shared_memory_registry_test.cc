// The registry of shared-memory regions (server/shm/shared_memory_registry.h):
// registering, finding and unregistering, every malformed option, name, key,
// size and offset with its code and message, the limits, and a region that
// shrinks before and during use (the SIGBUS guard).

#include "server/shm/shared_memory_registry.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shm_object.h"
#include "tests/util/status_matchers.h"

namespace attnserve::server {
namespace {

using ::attnserve::testing::ShmObject;
using ::attnserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<SharedMemoryRegistry> MakeRegistry(
    SharedMemoryOptions options = {}) {
  options.enabled = true;
  auto registry = SharedMemoryRegistry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

TEST(SharedMemoryRegistryTest, RegistersFindsAndUnregisters) {
  ShmObject object(8192);
  auto registry = MakeRegistry();
  auto region = registry->Register("r", object.key(), 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->size(), 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*region)->data()) % 4096, 0u);
  EXPECT_TRUE((*region)->Check().ok());
  auto found = registry->Find("r");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->get(), region->get());
  EXPECT_EQ(registry->Stats().regions, 1);
  EXPECT_EQ(registry->Stats().bytes, 4096);
  ASSERT_TRUE(registry->Unregister("r").ok());
  EXPECT_THAT(registry->Find("r").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"r\"")));
  EXPECT_EQ(registry->Stats().regions, 0);
  EXPECT_EQ(registry->Stats().bytes, 0);
  // A call that still holds the region keeps it mapped.
  (*region)->data()[0] = 7;
  EXPECT_EQ((*region)->data()[0], 7);
}

TEST(SharedMemoryRegistryTest, OffRefusesEverythingNamingTheFlag) {
  auto registry = SharedMemoryRegistry::Create(SharedMemoryOptions());
  ASSERT_TRUE(registry.ok());
  const auto off = StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("--shared_memory"));
  EXPECT_THAT((*registry)->Register("r", "attnserve_x", 1).status(), off);
  EXPECT_THAT((*registry)->Unregister("r").status(), off);
  EXPECT_THAT((*registry)->Find("r").status(), off);
  EXPECT_THAT((*registry)->CheckEnabled(), off);
}

TEST(SharedMemoryRegistryTest, RefusesBadOptions) {
  for (const char* prefix : {"", "a/b", "..x", "x y"}) {
    SharedMemoryOptions options;
    options.prefix = prefix;
    EXPECT_THAT(SharedMemoryRegistry::Create(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("--shared_memory_prefix")))
        << prefix;
  }
  for (int regions : {0, 1025}) {
    SharedMemoryOptions options;
    options.max_regions = regions;
    EXPECT_THAT(SharedMemoryRegistry::Create(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("--shared_memory_max_regions")));
  }
  SharedMemoryOptions options;
  options.max_bytes = 0;
  EXPECT_THAT(SharedMemoryRegistry::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--shared_memory_max_bytes")));
}

TEST(SharedMemoryRegistryTest, RefusesBadNames) {
  ShmObject object(4096);
  auto registry = MakeRegistry();
  for (const std::string& name :
       {std::string(), std::string(65, 'a'), std::string("a/b"),
        std::string("a b"), std::string("é")}) {
    EXPECT_THAT(
        registry->Register(name, object.key(), 4096).status(),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name: ")))
        << name;
  }
}

TEST(SharedMemoryRegistryTest, RefusesKeysOutsideThePrefixAndPathTricks) {
  ShmObject object(4096);
  auto registry = MakeRegistry();
  EXPECT_THAT(registry->Register("r", "other_region", 4096).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("does not start with the server's "
                                       "prefix \"attnserve_\""),
                             HasSubstr("--shared_memory_prefix"))));
  for (const std::string& key :
       {std::string("attnserve_/../etc/passwd"), std::string("attnserve_.."),
        std::string("/" + object.key()), std::string("attnserve_a/b"),
        std::string(""), std::string("attnserve_") + std::string(250, 'a')}) {
    EXPECT_THAT(registry->Register("r", key, 4096).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("is not a shared-memory object name")))
        << key;
  }
}

TEST(SharedMemoryRegistryTest, RefusesMissingSmallAndBadSizes) {
  ShmObject object(4096);
  auto registry = MakeRegistry();
  EXPECT_THAT(
      registry->Register("r", "attnserve_no_such_object", 4096).status(),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("/attnserve_no_such_object")));
  EXPECT_THAT(registry->Register("r", object.key(), 4097).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("byte_size: 4097 exceeds the 4096 bytes")));
  for (int64_t size : {int64_t{0}, int64_t{-1}}) {
    EXPECT_THAT(registry->Register("r", object.key(), size).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("byte_size: must be >= 1")));
  }
  EXPECT_EQ(registry->Stats().regions, 0);
}

// The Open Inference Protocol's registrations start anywhere in the object:
// the region's bytes are the object's from the offset, the limits count the
// region's size only, and a shrink below offset + size is caught.
TEST(SharedMemoryRegistryTest, RegistersFromAnOffsetOfTheObject) {
  ShmObject object(3 * 4096);
  for (int i = 0; i < 3 * 4096; ++i) object.data()[i] = static_cast<char>(i);
  auto registry = MakeRegistry();
  constexpr int64_t kOffset = 4096 + 100;
  auto region = registry->Register("r", object.key(), 4096, kOffset);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->offset(), kOffset);
  EXPECT_EQ((*region)->size(), 4096);
  EXPECT_EQ(std::memcmp((*region)->data(), object.data() + kOffset, 4096), 0);
  EXPECT_EQ(registry->Stats().bytes, 4096);
  // Writes reach the object (the mapping is shared).
  (*region)->data()[4095] = 42;
  EXPECT_EQ(object.data()[kOffset + 4095], 42);
  EXPECT_TRUE((*region)->Check().ok());
  object.Truncate(kOffset + 4000);
  EXPECT_THAT((*region)->Check(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("holds 8196 bytes, less than its registered "
                                 "8292")));
}

TEST(SharedMemoryRegistryTest, RefusesOffsetsPastTheObjectOrNegative) {
  ShmObject object(8192);
  auto registry = MakeRegistry();
  EXPECT_THAT(registry->Register("r", object.key(), 4096, 4097).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("byte_size: offset 4097 + 4096 exceeds the "
                                 "8192 bytes")));
  EXPECT_THAT(registry->Register("r", object.key(), 16, -1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("offset: -1 is negative")));
  EXPECT_THAT(
      registry
          ->Register("r", object.key(), 16,
                     std::numeric_limits<int64_t>::max() - 8)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offset: ")));
  EXPECT_EQ(registry->Stats().regions, 0);
}

TEST(SharedMemoryRegistryTest, RefusesDuplicatesAndLimits) {
  ShmObject object(8192);
  SharedMemoryOptions options;
  options.max_regions = 2;
  options.max_bytes = 8192;
  auto registry = MakeRegistry(options);
  ASSERT_TRUE(registry->Register("a", object.key(), 4096).ok());
  EXPECT_THAT(registry->Register("a", object.key(), 1).status(),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("\"a\" is already registered")));
  EXPECT_THAT(registry->Register("b", object.key(), 4097).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--shared_memory_max_bytes=8192")));
  ASSERT_TRUE(registry->Register("b", object.key(), 4096).ok());
  EXPECT_THAT(registry->Register("c", object.key(), 1).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--shared_memory_max_regions=2")));
  EXPECT_THAT(registry->Unregister("zzz").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"zzz\"")));
}

TEST(SharedMemoryRegistryTest, RemoveLeavesANewerRegistrationOfTheName) {
  ShmObject object(4096);
  auto registry = MakeRegistry();
  auto old_region = registry->Register("r", object.key(), 4096);
  ASSERT_TRUE(old_region.ok());
  ASSERT_TRUE(registry->Unregister("r").ok());
  auto new_region = registry->Register("r", object.key(), 4096);
  ASSERT_TRUE(new_region.ok());
  registry->Remove(old_region->get());  // the old lease ends late
  EXPECT_TRUE(registry->Find("r").ok());
  registry->Remove(new_region->get());
  EXPECT_FALSE(registry->Find("r").ok());
}

TEST(SharedMemoryRegistryTest, RegionTruncatedBeforeUseIsRefused) {
  ShmObject object(8192);
  auto registry = MakeRegistry();
  auto region = registry->Register("r", object.key(), 8192);
  ASSERT_TRUE(region.ok());
  object.Truncate(4096);
  EXPECT_THAT((*region)->Check(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("holds 4096 bytes, less than its "
                                       "registered 8192"),
                             HasSubstr("truncated"))));
}

// The race the SIGBUS guard is for: the object shrinks after the check, while
// a kernel reads and writes the mapping. The process survives, reads zeros,
// and the region reports it.
TEST(SharedMemoryRegistryTest, RegionShrinkingDuringUseIsCaughtNotFatal) {
  ShmObject object(3 * 4096);
  auto registry = MakeRegistry();
  auto region = registry->Register("r", object.key(), 3 * 4096);
  ASSERT_TRUE(region.ok());
  char* data = (*region)->data();
  std::memset(data, 1, 3 * 4096);
  ASSERT_TRUE((*region)->Check().ok());
  object.Truncate(0);
  volatile char* bytes = data;
  EXPECT_EQ(bytes[2 * 4096 + 5], 0);  // would be SIGBUS
  bytes[4096] = 3;                    // lands in the zero pages
  EXPECT_THAT((*region)->Check(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shrank below its registered 12288 bytes "
                                 "during a call")));
  // Another region is unaffected.
  ShmObject other(4096);
  auto fine = registry->Register("s", other.key(), 4096);
  ASSERT_TRUE(fine.ok());
  EXPECT_TRUE((*fine)->Check().ok());
}

}  // namespace
}  // namespace attnserve::server
