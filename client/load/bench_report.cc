#include "client/load/bench_report.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace attnserve::client {
namespace {

using Json = nlohmann::ordered_json;

// The percentiles every format reports, with their JSON/CSV key and table
// label.
struct PercentileColumn {
  double p;
  const char* key;
  const char* label;
};
constexpr PercentileColumn kPercentiles[] = {
    {50, "p50", "p50"}, {90, "p90", "p90"},      {95, "p95", "p95"},
    {99, "p99", "p99"}, {99.9, "p999", "p99.9"},
};

double Micros(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

std::string LevelName(const BenchReport& report) {
  return report.open_loop ? "rate" : "concurrency";
}

std::string LevelValue(const BenchReport& report, const LevelReport& level) {
  return report.open_loop ? absl::StrFormat("%g", level.rate)
                          : absl::StrCat(level.concurrency);
}

// "Attend", "AttendStream", "AttendPieces", "AttendModel",
// "AttendModelStream", "ModelInfer" or "ModelStreamInfer".
std::string MethodName(const BenchReport& report) {
  if (report.v2) return report.stream ? "ModelStreamInfer" : "ModelInfer";
  if (report.pieces) return "AttendPieces";
  return absl::StrCat("Attend", report.model.empty() ? "" : "Model",
                      report.stream ? "Stream" : "");
}

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%g s", absl::ToDoubleSeconds(d));
}

Json LevelJson(const BenchReport& report, const LoadResult& r) {
  const LevelFigures f = Figures(report, r);
  Json j;
  j["requests"] = f.requests;
  j["ok"] = f.ok;
  Json errors = Json::object();
  Json messages = Json::object();
  for (const auto& [code, e] : r.errors) {
    errors[code] = e.count;
    messages[code] = e.first_message;
  }
  j["errors"] = errors;
  j["error_messages"] = messages;
  j["throughput_rps"] = f.throughput_rps;
  j["gflops"] = f.gflops;
  j["mb_per_s"] = f.mb_per_s;
  j["elapsed_s"] = absl::ToDoubleSeconds(r.elapsed);
  Json latency;
  for (const PercentileColumn& c : kPercentiles) {
    latency[c.key] = Micros(r.latency.Percentile(c.p));
  }
  latency["max"] = Micros(r.latency.max());
  latency["min"] = Micros(r.latency.min());
  latency["mean"] = Micros(r.latency.mean());
  j["latency_us"] = latency;
  j["server_us"] = {{"queue_p50", Micros(r.server_queue.Percentile(50))},
                    {"queue_p99", Micros(r.server_queue.Percentile(99))},
                    {"compute_p50", Micros(r.server_compute.Percentile(50))},
                    {"compute_p99", Micros(r.server_compute.Percentile(99))}};
  Json targets = Json::object();
  const std::vector<int64_t> per_target = OkPerTarget(report, r);
  for (size_t t = 0; t < report.targets.size(); ++t) {
    targets[report.targets[t]] = per_target[t];
  }
  j["targets"] = targets;
  j["ok_per_connection"] = r.ok_per_channel;
  if (report.open_loop) j["late_sends"] = r.late_sends;
  if (!r.stopped_early.empty()) j["stopped_early"] = r.stopped_early;
  return j;
}

// The first calls of new connections (--new_connections), when made.
void AppendFirstCallsJson(const BenchReport& report, Json* j) {
  const LatencyHistogram& calls = report.first_calls;
  if (calls.count() == 0) return;
  (*j)["new_connections"] = {
      {"count", calls.count()},
      {"first_call_p50_us", Micros(calls.Percentile(50))},
      {"first_call_max_us", Micros(calls.max())},
      {"ratio_to_p50", FirstCallRatio(report)}};
}

void AppendFirstCallsLine(const BenchReport& report, std::string* text) {
  const LatencyHistogram& calls = report.first_calls;
  if (calls.count() == 0) return;
  absl::StrAppendFormat(
      text,
      "%-11s %d first calls, each on a new connection: p50 %.1f max %.1f "
      "(us), %.2fx the p50 of %s %s\n",
      "new conns", calls.count(), Micros(calls.Percentile(50)),
      Micros(calls.max()), FirstCallRatio(report), LevelName(report),
      LevelValue(report, report.levels.front()));
}

std::string FormatJson(const BenchReport& report) {
  Json j;
  j["mode"] = report.open_loop ? "open_loop" : "closed_loop";
  j["method"] = MethodName(report);
  if (!report.model.empty()) j["model"] = report.model;
  if (report.open_loop) j["arrival"] = report.arrival;
  j["connections_per_target"] = report.connections_per_target;
  j["connections_auto"] = report.connections_auto;
  j["warmup_s"] = absl::ToDoubleSeconds(report.warmup);
  j["duration_s"] = absl::ToDoubleSeconds(report.duration);
  j["request"] = {{"description", report.request_text},
                  {"bytes", report.request_bytes},
                  {"flops", report.request_flops}};
  if (report.levels.size() == 1) {
    const LevelReport& level = report.levels.front();
    if (report.open_loop) {
      j["rate"] = level.rate;
    } else {
      j["concurrency"] = level.concurrency;
    }
  }
  j.update(LevelJson(report, Total(report)));
  if (report.levels.size() > 1) {
    Json levels = Json::array();
    for (const LevelReport& level : report.levels) {
      Json l;
      if (report.open_loop) {
        l["rate"] = level.rate;
      } else {
        l["concurrency"] = level.concurrency;
      }
      l.update(LevelJson(report, level.result));
      levels.push_back(std::move(l));
    }
    j["levels"] = std::move(levels);
  }
  AppendFirstCallsJson(report, &j);
  return j.dump(2) + "\n";
}

std::string FormatCsv(const BenchReport& report) {
  std::vector<std::string> header = {
      LevelName(report), "requests", "ok",      "errors",
      "throughput_rps",  "gflops",   "mb_per_s"};
  for (const PercentileColumn& c : kPercentiles) {
    header.push_back(absl::StrCat(c.key, "_us"));
  }
  header.insert(header.end(),
                {"max_us", "server_queue_p50_us", "server_compute_p50_us"});
  std::string text = absl::StrCat(absl::StrJoin(header, ","), "\n");
  for (const LevelReport& level : report.levels) {
    const LoadResult& r = level.result;
    const LevelFigures f = Figures(report, r);
    std::vector<std::string> row = {LevelValue(report, level),
                                    absl::StrCat(f.requests),
                                    absl::StrCat(f.ok),
                                    absl::StrCat(r.error_total()),
                                    absl::StrFormat("%.3f", f.throughput_rps),
                                    absl::StrFormat("%.3f", f.gflops),
                                    absl::StrFormat("%.3f", f.mb_per_s)};
    for (const PercentileColumn& c : kPercentiles) {
      row.push_back(absl::StrFormat("%.1f", Micros(r.latency.Percentile(c.p))));
    }
    row.push_back(absl::StrFormat("%.1f", Micros(r.latency.max())));
    row.push_back(
        absl::StrFormat("%.1f", Micros(r.server_queue.Percentile(50))));
    row.push_back(
        absl::StrFormat("%.1f", Micros(r.server_compute.Percentile(50))));
    absl::StrAppend(&text, absl::StrJoin(row, ","), "\n");
  }
  return text;
}

void AppendErrors(const LoadResult& r, absl::string_view indent,
                  std::string* text) {
  for (const auto& [code, e] : r.errors) {
    absl::StrAppendFormat(text, "%s%s %d (first: %s)\n", indent, code, e.count,
                          e.first_message);
  }
  if (!r.stopped_early.empty()) {
    absl::StrAppend(text, indent, "stopped early: ", r.stopped_early, "\n");
  }
  if (r.late_sends > 0) {
    absl::StrAppend(text, indent, r.late_sends,
                    " sends left more than 1 ms late (latency still counts "
                    "from the scheduled time)\n");
  }
}

std::string FormatTable(const BenchReport& report) {
  std::string text;
  std::string load =
      report.open_loop
          ? absl::StrCat("open loop, ", report.arrival, " arrivals")
          : std::string("closed loop");
  if (report.levels.size() == 1) {
    absl::StrAppend(&load, ", ", LevelName(report), " ",
                    LevelValue(report, report.levels.front()),
                    report.open_loop ? " req/s" : "");
  } else {
    absl::StrAppend(&load, ", ", report.levels.size(), " levels");
  }
  absl::StrAppendFormat(
      &text, "%-11s %s, %s, %s measured after %s warm-up\n", "load", load,
      report.stream ? absl::StrCat(MethodName(report), " messages")
                    : absl::StrCat("unary ", MethodName(report)),
      Seconds(report.duration), Seconds(report.warmup));
  absl::StrAppendFormat(&text, "%-11s %s (%d connection%s each%s)\n", "targets",
                        absl::StrJoin(report.targets, ", "),
                        report.connections_per_target,
                        report.connections_per_target == 1 ? "" : "s",
                        report.connections_auto ? ", auto" : "");
  absl::StrAppendFormat(&text, "%-11s %s; %.1f KB, %.4g MFLOP\n", "request",
                        report.request_text, report.request_bytes / 1e3,
                        report.request_flops / 1e6);
  if (report.levels.size() == 1) {
    const LoadResult& r = report.levels.front().result;
    const LevelFigures f = Figures(report, r);
    absl::StrAppendFormat(&text, "%-11s %d (ok %d, errors %d)\n", "requests",
                          f.requests, f.ok, r.error_total());
    AppendErrors(r, "            ", &text);
    absl::StrAppendFormat(
        &text, "%-11s %.1f req/s, %.3f GFLOP/s, %.1f MB/s over %s\n",
        "throughput", f.throughput_rps, f.gflops, f.mb_per_s,
        absl::StrFormat("%.3f s", absl::ToDoubleSeconds(r.elapsed)));
    std::string latency;
    for (const PercentileColumn& c : kPercentiles) {
      absl::StrAppendFormat(&latency, "%s %.1f  ", c.label,
                            Micros(r.latency.Percentile(c.p)));
    }
    absl::StrAppendFormat(&text, "%-11s %smax %.1f (us)\n", "latency", latency,
                          Micros(r.latency.max()));
    absl::StrAppendFormat(
        &text,
        "%-11s queue p50 %.1f p99 %.1f, compute p50 %.1f p99 %.1f (us)\n",
        "server", Micros(r.server_queue.Percentile(50)),
        Micros(r.server_queue.Percentile(99)),
        Micros(r.server_compute.Percentile(50)),
        Micros(r.server_compute.Percentile(99)));
    if (report.targets.size() > 1) {
      const std::vector<int64_t> per_target = OkPerTarget(report, r);
      std::vector<std::string> parts;
      for (size_t t = 0; t < report.targets.size(); ++t) {
        parts.push_back(absl::StrCat(report.targets[t], " ", per_target[t]));
      }
      absl::StrAppendFormat(&text, "%-11s %s\n", "ok by target",
                            absl::StrJoin(parts, ", "));
    }
    AppendFirstCallsLine(report, &text);
    return text;
  }
  absl::StrAppendFormat(&text, "\n%11s %9s %9s %7s %10s %9s %9s",
                        LevelName(report), "requests", "ok", "errors", "req/s",
                        "GFLOP/s", "MB/s");
  for (const PercentileColumn& c : kPercentiles) {
    absl::StrAppendFormat(&text, " %9s", absl::StrCat(c.label, "_us"));
  }
  absl::StrAppendFormat(&text, " %9s\n", "max_us");
  for (const LevelReport& level : report.levels) {
    const LoadResult& r = level.result;
    const LevelFigures f = Figures(report, r);
    absl::StrAppendFormat(&text, "%11s %9d %9d %7d %10.1f %9.3f %9.1f",
                          LevelValue(report, level), f.requests, f.ok,
                          r.error_total(), f.throughput_rps, f.gflops,
                          f.mb_per_s);
    for (const PercentileColumn& c : kPercentiles) {
      absl::StrAppendFormat(&text, " %9.1f", Micros(r.latency.Percentile(c.p)));
    }
    absl::StrAppendFormat(&text, " %9.1f\n", Micros(r.latency.max()));
    AppendErrors(r, "            ", &text);
  }
  AppendFirstCallsLine(report, &text);
  return text;
}

}  // namespace

double FirstCallRatio(const BenchReport& report) {
  if (report.levels.empty()) return 0;
  const absl::Duration p50 =
      report.levels.front().result.latency.Percentile(50);
  if (p50 <= absl::ZeroDuration()) return 0;
  return absl::FDivDuration(report.first_calls.Percentile(50), p50);
}

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "table") return OutputFormat::kTable;
  if (lower == "csv") return OutputFormat::kCsv;
  if (lower == "json") return OutputFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--output_format \"", text, "\" is not table, csv or json"));
}

LevelFigures Figures(const BenchReport& report, const LoadResult& result) {
  LevelFigures f;
  f.requests = result.requests;
  f.ok = result.ok;
  f.throughput_rps = result.throughput_rps();
  const double seconds = absl::ToDoubleSeconds(result.elapsed);
  if (seconds > 0) {
    f.gflops = result.server_flops / seconds / 1e9;
    f.mb_per_s = (result.ok * static_cast<double>(report.request_bytes) +
                  static_cast<double>(result.response_bytes)) /
                 seconds / 1e6;
  }
  return f;
}

LoadResult Total(const BenchReport& report) {
  LoadResult total;
  for (const LevelReport& level : report.levels) {
    const LoadResult& r = level.result;
    total.requests += r.requests;
    total.ok += r.ok;
    total.response_bytes += r.response_bytes;
    total.server_flops += r.server_flops;
    for (const auto& [code, e] : r.errors) {
      ErrorCount& sum = total.errors[code];
      if (sum.count == 0) sum.first_message = e.first_message;
      sum.count += e.count;
    }
    if (total.ok_per_channel.size() < r.ok_per_channel.size()) {
      total.ok_per_channel.resize(r.ok_per_channel.size(), 0);
    }
    for (size_t i = 0; i < r.ok_per_channel.size(); ++i) {
      total.ok_per_channel[i] += r.ok_per_channel[i];
    }
    total.latency.Merge(r.latency);
    total.server_queue.Merge(r.server_queue);
    total.server_compute.Merge(r.server_compute);
    total.elapsed += r.elapsed;
    total.late_sends += r.late_sends;
    if (total.stopped_early.empty()) total.stopped_early = r.stopped_early;
  }
  return total;
}

std::vector<int64_t> OkPerTarget(const BenchReport& report,
                                 const LoadResult& result) {
  std::vector<int64_t> per_target(report.targets.size(), 0);
  if (per_target.empty()) return per_target;
  for (size_t i = 0; i < result.ok_per_channel.size(); ++i) {
    per_target[i % per_target.size()] += result.ok_per_channel[i];
  }
  return per_target;
}

std::string FormatReport(const BenchReport& report, OutputFormat format) {
  switch (format) {
    case OutputFormat::kCsv:
      return FormatCsv(report);
    case OutputFormat::kJson:
      return FormatJson(report);
    case OutputFormat::kTable:
      break;
  }
  return FormatTable(report);
}

}  // namespace attnserve::client
