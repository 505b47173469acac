#include "client/connection.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/rpc_status.h"
#include "client/tensors/wire_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseTargetsTest, SplitsACommaList) {
  EXPECT_THAT(*ParseTargets("localhost:50051"), ElementsAre("localhost:50051"));
  EXPECT_THAT(*ParseTargets(" a:1 ,b:2"), ElementsAre("a:1", "b:2"));
  EXPECT_THAT(ParseTargets("").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has an empty entry")));
  EXPECT_THAT(ParseTargets("a:1,,b:2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--target \"a:1,,b:2\" has an empty entry")));
}

TEST(ValidateConnectionOptionsTest, AcceptsTheDefaults) {
  EXPECT_TRUE(ValidateConnectionOptions(ConnectionOptions()).ok());
}

TEST(ValidateConnectionOptionsTest, RejectsBadValuesNamingTheFlag) {
  ConnectionOptions options;
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(ValidateConnectionOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--timeout must be positive, got 0")));
  options = ConnectionOptions();
  options.max_message_bytes = int64_t{1} << 31;
  EXPECT_THAT(ValidateConnectionOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--max_message_bytes must be in [1, "
                                 "2147483647], got 2147483648")));
  options.max_message_bytes = 0;
  EXPECT_FALSE(ValidateConnectionOptions(options).ok());
  options = ConnectionOptions();
  options.ca_file = "ca.pem";
  EXPECT_THAT(ValidateConnectionOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--ca needs --tls")));
  options.targets.clear();
  options.tls = true;
  EXPECT_THAT(
      ValidateConnectionOptions(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no server")));
}

TEST(CreateChannelsTest, OneChannelPerTarget) {
  ConnectionOptions options;
  options.targets = {"127.0.0.1:1", "127.0.0.1:2"};
  auto channels = CreateChannels(options);
  ASSERT_TRUE(channels.ok()) << channels.status();
  EXPECT_EQ(channels->size(), 2u);
}

TEST(CreateChannelsTest, ConnectionsTakeTurnsOverTheTargets) {
  ConnectionOptions options;
  options.targets = {"127.0.0.1:1", "127.0.0.1:2"};
  auto channels = CreateChannels(options, 3);
  ASSERT_TRUE(channels.ok()) << channels.status();
  EXPECT_EQ(channels->size(), 6u);
}

TEST(CreateChannelsTest, RejectsACountOutsideTheRange) {
  ConnectionOptions options;
  EXPECT_THAT(CreateChannels(options, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--connections must be in [1, 256], got 0")));
  EXPECT_THAT(CreateChannels(options, kMaxConnections + 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("257")));
}

TEST(ParseConnectionsTest, TakesAutoOrACount) {
  EXPECT_EQ(*ParseConnections("auto"), kAutoConnections);
  EXPECT_EQ(*ParseConnections("AUTO"), kAutoConnections);
  EXPECT_EQ(*ParseConnections("1"), 1);
  EXPECT_EQ(*ParseConnections("256"), 256);
  for (const char* bad :
       {"0", "-1", "257", "99999999999999999999", "", "2x", "many", "1.5"}) {
    EXPECT_THAT(
        ParseConnections(bad).status(),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("--connections must be auto or a "
                                        "count in [1, 256], got \"",
                                        bad, "\""))))
        << bad;
  }
}

TEST(ConnectionsForTest, AutoIsTheConcurrencyUpToEight) {
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 1), 1);
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 3), 3);
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 8), 8);
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 9), 8);
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 64), kMaxAutoConnections);
  EXPECT_EQ(ConnectionsFor(kAutoConnections, 0), 1);
  EXPECT_EQ(ConnectionsFor(2, 64), 2);
  EXPECT_EQ(ConnectionsFor(8, 1), 8);
}

TEST(CreateChannelsTest, AMissingCaFileIsNotFound) {
  ConnectionOptions options;
  options.tls = true;
  options.ca_file = ::testing::TempDir() + "no-such-ca.pem";
  EXPECT_THAT(CreateChannels(options).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("no-such-ca.pem: cannot open")));
}

TEST(RpcErrorLineTest, NamesTheCode) {
  EXPECT_EQ(RpcErrorLine(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")),
            "error: UNAVAILABLE: down");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::INVALID_ARGUMENT),
            "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED),
            "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED),
            "UNAUTHENTICATED");
}

TEST(WireNamesTest, ParsesAndPrintsTheEnums) {
  EXPECT_EQ(*ParseFloatDataType("dtype", "bf16"), v1::BFLOAT16);
  EXPECT_EQ(*ParseFloatDataType("dtype", "F16"), v1::FLOAT16);
  EXPECT_EQ(*ParseFloatDataType("dtype", "float32"), v1::FLOAT32);
  EXPECT_THAT(ParseFloatDataType("output_dtype", "bool").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--output_dtype: unknown value \"bool\" "
                                 "(expected f32, bf16 or f16)")));
  EXPECT_FALSE(ParseFloatDataType("dtype", "int8").ok());
  EXPECT_EQ(*ParseStorageDataType("storage_dtype", "INT8"), v1::INT8);
  EXPECT_EQ(*ParseStorageDataType("storage_dtype", "bf16"), v1::BFLOAT16);
  EXPECT_THAT(ParseStorageDataType("storage_dtype", "int4").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--storage_dtype: unknown value \"int4\" "
                                 "(expected f32, bf16, f16 or int8)")));
  EXPECT_EQ(*ParseLayout("layout", "BLHD"), v1::BLHD);
  EXPECT_FALSE(ParseLayout("layout", "bhdl").ok());
  EXPECT_EQ(*ParseAlignment("alignment", "bottom_right"), v1::BOTTOM_RIGHT);
  EXPECT_FALSE(ParseAlignment("alignment", "center").ok());
  EXPECT_EQ(LayoutName(v1::LAYOUT_UNSPECIFIED), "bhld");
  EXPECT_EQ(AlignmentName(v1::BOTTOM_RIGHT), "bottom_right");
}

}  // namespace
}  // namespace attnserve::client
