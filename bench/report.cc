#include "bench/report.h"

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace attnserve::bench {
namespace {

std::string OrDash(const Json& v, const absl::FormatSpec<double>& fmt) {
  return v.is_null() ? "-" : absl::StrFormat(fmt, v.get<double>());
}

}  // namespace

void Reporter::Emit(const Json& r) {
  if (json_) {
    std::printf("%s\n", r.dump().c_str());
  } else if (r.at("case") == "run_info") {
    std::printf("oneDNN %s, isa %s, bf16 GEMMs %s, %s\n\n",
                r.at("onednn").get<std::string>().c_str(),
                r.at("isa").get<std::string>().c_str(),
                r.at("bf16_gemm").get<bool>() ? "yes" : "no",
                r.at("cpu").get<std::string>().c_str());
    std::printf("%-42s %3s %11s %8s %8s %6s %11s %8s  %s\n", "case", "thr",
                "median_us", "GFLOP/s", "gemm", "ratio", "unfused_us",
                "speedup", "more");
  } else if (r.at("case") == "run_check") {
    std::printf("\nGEMM GFLOP/s at first use -> at the end:");
    for (const Json& g : r.at("gemm")) {
      std::printf(
          " %s/%dt %.1f -> %.1f;", g.at("dtype").get<std::string>().c_str(),
          g.at("threads").get<int>(), g.at("gflops_first").get<double>(),
          g.at("gflops_end").get<double>());
    }
    std::printf(
        " other processes' CPU share %.1f%%: %s\n",
        100 * r.at("other_processes_cpu_share").get<double>(),
        r.at("stable").get<bool>() ? "quiet run" : "NOT QUIET, do not keep");
  } else if (absl::StartsWith(r.at("case").get<std::string>(), "summary_")) {
    if (!summary_header_) {
      std::printf("\n%-52s %9s %12s  %s\n", "summary", "value", "target",
                  "met");
      summary_header_ = true;
    }
    std::printf(
        "%-52s %9.3f %2s %9.3f  %s\n", r.at("case").get<std::string>().c_str(),
        r.at("value").get<double>(), r.at("at_least").get<bool>() ? ">=" : "<=",
        r.at("target").get<double>(), r.at("met").get<bool>() ? "yes" : "NO");
  } else {
    std::string more;
    if (r.contains("kv_gbps")) {
      more = absl::StrFormat("kv %.1f GB/s, copy %.1f GB/s, ratio %.3f",
                             r.at("kv_gbps").get<double>(),
                             r.at("copy_gbps").get<double>(),
                             r.at("ratio_to_copy").get<double>());
    } else if (r.contains("extra_rss_mib")) {
      more = absl::StrFormat("extra RSS %.2f MiB (first run %.2f)",
                             r.at("extra_rss_mib").get<double>(),
                             r.at("first_run_extra_rss_mib").get<double>());
    } else if (!r.at("unfused_us").is_null()) {
      more = absl::StrFormat("|diff vs unfused| %.2g",
                             r.at("max_abs_diff_vs_unfused").get<double>());
    }
    std::printf("%-42s %3d %11.1f %8.1f %8.1f %6.3f %11s %8s  %s\n",
                r.at("case").get<std::string>().c_str(),
                r.at("threads").get<int>(), r.at("median_us").get<double>(),
                r.at("gflops").get<double>(), r.at("gemm_gflops").get<double>(),
                r.at("ratio_to_gemm").get<double>(),
                OrDash(r.at("unfused_us"), "%.1f").c_str(),
                OrDash(r.at("unfused_speedup"), "%.2fx").c_str(), more.c_str());
  }
  std::fflush(stdout);
}

}  // namespace attnserve::bench
