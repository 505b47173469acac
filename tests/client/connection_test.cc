#include "client/connection.h"

#include <limits>
#include <string>
#include <vector>

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
  EXPECT_EQ(*ParseLayout("layout", "BLHD"), v1::BLHD);
  EXPECT_FALSE(ParseLayout("layout", "bhdl").ok());
  EXPECT_EQ(*ParseAlignment("alignment", "bottom_right"), v1::BOTTOM_RIGHT);
  EXPECT_FALSE(ParseAlignment("alignment", "center").ok());
  EXPECT_EQ(LayoutName(v1::LAYOUT_UNSPECIFIED), "bhld");
  EXPECT_EQ(AlignmentName(v1::BOTTOM_RIGHT), "bottom_right");
}

}  // namespace
}  // namespace attnserve::client
