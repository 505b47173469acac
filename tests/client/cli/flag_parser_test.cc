#include "client/cli/flag_parser.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

ABSL_FLAG(int, fp_count, 3, "how many");
ABSL_FLAG(double, fp_scale, 1.0, "a number");
ABSL_FLAG(bool, fp_verbose, false, "talk more");
ABSL_FLAG(std::string, fp_name, "", "a name");
ABSL_FLAG(absl::Duration, fp_wait, absl::Seconds(1), "how long");
ABSL_FLAG(int, fp_other, 0, "a flag of another subcommand");

namespace attnserve::client {
namespace {

using ::attnserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<absl::string_view> kAllowed = {
    "fp_count", "fp_scale", "fp_verbose", "fp_name", "fp_wait"};

class FlagParserTest : public ::testing::Test {
 protected:
  absl::StatusOr<ParsedFlags> Parse(std::vector<std::string> args) {
    args_ = std::move(args);
    argv_.clear();
    for (std::string& a : args_) argv_.push_back(a.data());
    return ParseFlags(argv_, kAllowed);
  }

 private:
  absl::FlagSaver saver_;
  std::vector<std::string> args_;
  std::vector<char*> argv_;
};

TEST_F(FlagParserTest, AcceptsEveryForm) {
  auto parsed = Parse({"--fp_count=5", "--fp_scale", "-0.5", "-fp_name=x",
                       "--fp_verbose", "--fp_wait", "250ms"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->help);
  EXPECT_EQ(absl::GetFlag(FLAGS_fp_count), 5);
  EXPECT_EQ(absl::GetFlag(FLAGS_fp_scale), -0.5);
  EXPECT_EQ(absl::GetFlag(FLAGS_fp_name), "x");
  EXPECT_TRUE(absl::GetFlag(FLAGS_fp_verbose));
  EXPECT_EQ(absl::GetFlag(FLAGS_fp_wait), absl::Milliseconds(250));
  EXPECT_THAT(parsed->specified, ElementsAre("fp_count", "fp_name", "fp_scale",
                                             "fp_verbose", "fp_wait"));
  EXPECT_TRUE(parsed->Specified("fp_scale"));
  EXPECT_FALSE(parsed->Specified("fp_other"));
}

TEST_F(FlagParserTest, BoolFlagsTakeNoOrAnInlineValue) {
  ASSERT_TRUE(Parse({"--fp_verbose"}).ok());
  ASSERT_TRUE(Parse({"--nofp_verbose"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_fp_verbose));
  ASSERT_TRUE(Parse({"--fp_verbose=true"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_fp_verbose));
  EXPECT_THAT(Parse({"--nofp_verbose=true"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--nofp_verbose takes no value")));
  // A bool flag does not swallow the next argument.
  EXPECT_THAT(Parse({"--fp_verbose", "true"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unexpected argument \"true\"")));
}

TEST_F(FlagParserTest, HelpAnywhereWins) {
  auto parsed = Parse({"--fp_count=oops", "--help"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->help);
  EXPECT_TRUE(Parse({"-h"})->help);
}

TEST_F(FlagParserTest, RejectsWhatItCannotUse) {
  EXPECT_THAT(Parse({"--nope=1"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown flag \"--nope=1\"")));
  // Defined in the binary, but not one of this subcommand's.
  EXPECT_THAT(Parse({"--fp_other=1"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown flag \"--fp_other=1\"")));
  EXPECT_THAT(Parse({"--fp_count"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --fp_count needs a value")));
  EXPECT_THAT(Parse({"--fp_count=many"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad value \"many\" for --fp_count")));
  EXPECT_THAT(Parse({"--fp_wait=3"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad value \"3\" for --fp_wait")));
  EXPECT_THAT(Parse({"extra"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unexpected argument \"extra\"")));
  EXPECT_THAT(Parse({"--", "--fp_count=1"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unexpected argument \"--\"")));
}

TEST(FlagsHelpTest, ListsDefaultsAndWrappedHelp) {
  const std::string help = FlagsHelp({"fp_count", "fp_name"});
  EXPECT_THAT(help, HasSubstr("  --fp_count=3\n      how many\n"));
  EXPECT_THAT(help, HasSubstr("  --fp_name=\"\"\n      a name\n"));
  for (absl::string_view line : absl::StrSplit(FlagsHelp({"fp_wait"}), '\n')) {
    EXPECT_LE(line.size(), 80u);
  }
}

}  // namespace
}  // namespace attnserve::client
