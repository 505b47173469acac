#include "client/load/bench_report.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace attnserve::client {
namespace {

using ::testing::HasSubstr;

// A level with `ok` answers at 1, 2, ... ms (spread over two channels) and
// `unavailable` failures, 2 s long.
LoadResult MakeResult(int ok, int unavailable) {
  LoadTally tally(2);
  const absl::Time start = absl::UnixEpoch();
  for (int i = 1; i <= ok; ++i) {
    tally.RecordOk(i % 2, start, start + absl::Milliseconds(i),
                   absl::Microseconds(10), absl::Microseconds(500), 1e9, 1000);
  }
  for (int i = 0; i < unavailable; ++i) {
    tally.RecordError("UNAVAILABLE", i == 0 ? "first" : "later", start,
                      start + absl::Seconds(2));
  }
  return tally.Snapshot();
}

BenchReport MakeReport(std::vector<int> concurrency) {
  BenchReport report;
  report.targets = {"a:1", "b:2"};
  report.request_bytes = 3000;
  report.request_flops = 1e9;
  report.warmup = absl::Seconds(1);
  report.duration = absl::Seconds(2);
  report.request_text = "f32 bhld q [1, 8, 128, 64]";
  for (int c : concurrency) {
    LevelReport level;
    level.concurrency = c;
    level.result = MakeResult(100 * c, c);
    report.levels.push_back(level);
  }
  return report;
}

TEST(BenchReportTest, TallyCountsEveryRequest) {
  const LoadResult r = MakeResult(100, 3);
  EXPECT_EQ(r.requests, 103);
  EXPECT_EQ(r.ok, 100);
  EXPECT_EQ(r.error_total(), 3);
  EXPECT_EQ(r.errors.at("UNAVAILABLE").first_message, "first");
  EXPECT_EQ(r.elapsed, absl::Seconds(2));
  EXPECT_DOUBLE_EQ(r.throughput_rps(), 50);
  EXPECT_EQ(r.response_bytes, 100000);
  EXPECT_EQ(r.ok_per_channel, (std::vector<int64_t>{50, 50}));
}

TEST(BenchReportTest, FiguresFollowFromTheCounts) {
  const BenchReport report = MakeReport({1});
  const LevelFigures f = Figures(report, report.levels[0].result);
  EXPECT_DOUBLE_EQ(f.throughput_rps, 50);
  EXPECT_DOUBLE_EQ(f.gflops, 50);  // 100 requests of 1 GFLOP in 2 s
  // (100 requests of 3000 bytes + 100 answers of 1000 bytes) / 2 s.
  EXPECT_DOUBLE_EQ(f.mb_per_s, 0.2);
}

TEST(BenchReportTest, JsonHasTheDocumentedKeys) {
  const BenchReport report = MakeReport({2});
  const auto j =
      nlohmann::json::parse(FormatReport(report, OutputFormat::kJson));
  EXPECT_EQ(j["mode"], "closed_loop");
  EXPECT_EQ(j["method"], "Attend");
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_EQ(j["requests"], 202);
  EXPECT_EQ(j["ok"], 200);
  EXPECT_EQ(j["errors"]["UNAVAILABLE"], 2);
  EXPECT_EQ(j["error_messages"]["UNAVAILABLE"], "first");
  EXPECT_DOUBLE_EQ(j["throughput_rps"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(j["gflops"].get<double>(), 100);
  for (const char* key : {"p50", "p90", "p95", "p99", "p999", "max"}) {
    EXPECT_TRUE(j["latency_us"].contains(key)) << key;
  }
  EXPECT_NEAR(j["latency_us"]["p50"].get<double>(), 100000, 800);
  EXPECT_DOUBLE_EQ(j["latency_us"]["max"].get<double>(), 200000);
  EXPECT_EQ(j["targets"]["a:1"], 100);
  EXPECT_EQ(j["targets"]["b:2"], 100);
  EXPECT_NEAR(j["server_us"]["compute_p50"].get<double>(), 500, 4);
  EXPECT_FALSE(j.contains("levels"));
}

TEST(BenchReportTest, ASweepHasOneObjectPerLevelAndTheTotals) {
  const BenchReport report = MakeReport({1, 2, 4});
  const auto j =
      nlohmann::json::parse(FormatReport(report, OutputFormat::kJson));
  ASSERT_EQ(j["levels"].size(), 3u);
  EXPECT_EQ(j["levels"][2]["concurrency"], 4);
  EXPECT_EQ(j["levels"][2]["ok"], 400);
  EXPECT_EQ(j["levels"][0]["errors"]["UNAVAILABLE"], 1);
  EXPECT_EQ(j["requests"], 707);
  EXPECT_EQ(j["errors"]["UNAVAILABLE"], 7);
  EXPECT_FALSE(j.contains("concurrency"));
}

TEST(BenchReportTest, OpenLoopLevelsAreRates) {
  BenchReport report = MakeReport({1});
  report.open_loop = true;
  report.arrival = "poisson";
  report.levels[0].rate = 25.5;
  const auto j =
      nlohmann::json::parse(FormatReport(report, OutputFormat::kJson));
  EXPECT_EQ(j["mode"], "open_loop");
  EXPECT_EQ(j["arrival"], "poisson");
  EXPECT_DOUBLE_EQ(j["rate"].get<double>(), 25.5);
  EXPECT_EQ(j["late_sends"], 0);
  const std::string csv = FormatReport(report, OutputFormat::kCsv);
  EXPECT_THAT(csv, ::testing::StartsWith("rate,requests,ok,errors,"));
  EXPECT_THAT(csv, HasSubstr("\n25.5,101,100,1,"));
}

TEST(BenchReportTest, CsvHasAHeaderAndARowPerLevel) {
  const std::string csv = FormatReport(MakeReport({1, 2}), OutputFormat::kCsv);
  const std::vector<std::string> lines =
      absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << csv;
  EXPECT_EQ(lines[0],
            "concurrency,requests,ok,errors,throughput_rps,gflops,mb_per_s,"
            "p50_us,p90_us,p95_us,p99_us,p999_us,max_us,server_queue_p50_us,"
            "server_compute_p50_us");
  EXPECT_THAT(lines[2], ::testing::StartsWith("2,202,200,2,100.000,100.000,"));
}

TEST(BenchReportTest, TableShowsCountsErrorsAndPercentiles) {
  const std::string one = FormatReport(MakeReport({2}), OutputFormat::kTable);
  EXPECT_THAT(one, HasSubstr("requests    202 (ok 200, errors 2)\n"));
  EXPECT_THAT(one, HasSubstr("UNAVAILABLE 2 (first: first)"));
  EXPECT_THAT(one, HasSubstr("100.0 req/s, 100.000 GFLOP/s"));
  EXPECT_THAT(one, HasSubstr("p99.9 "));
  EXPECT_THAT(one, HasSubstr("ok by target a:1 100, b:2 100"));
  const std::string sweep =
      FormatReport(MakeReport({1, 2}), OutputFormat::kTable);
  EXPECT_THAT(sweep, HasSubstr("closed loop, 2 levels"));
  EXPECT_THAT(sweep, HasSubstr("concurrency  requests"));
}

TEST(BenchReportTest, UnknownFormatIsAUsageError) {
  EXPECT_EQ(ParseOutputFormat("JSON").value(), OutputFormat::kJson);
  EXPECT_EQ(ParseOutputFormat("xml").status().message(),
            "--output_format \"xml\" is not table, csv or json");
}

}  // namespace
}  // namespace attnserve::client
