// Runs inputs of the libFuzzer target once each, in any build (GCC's, the
// ASan+UBSan tree's), and says what became of each: the committed seeds and
// regression inputs are tests in every tree, not only in the fuzz build.
//
//   attnserve_fuzz_replay [--expect_names] FILE_OR_DIR...
//
// Exits 1 on a broken promise (codec_checks.h) or an unreadable file. With
// --expect_names, a file whose name has "refused" in it must be refused and
// every other one computed (a seed that no longer reaches compute, or no
// longer tests its refusal, fails).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.h"

namespace attnserve::fuzz {
namespace {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kUnparsed:
      return "unparsed";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kDecoded:
      return "decoded";
    case Outcome::kComputed:
      return "computed";
  }
  return "?";
}

int Main(int argc, char** argv) {
  bool expect_names = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--expect_names") {
      expect_names = true;
      continue;
    }
    std::error_code error;
    if (std::filesystem::is_directory(arg, error)) {
      std::vector<std::string> in_dir;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) in_dir.push_back(entry.path().string());
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr,
                 "usage: attnserve_fuzz_replay [--expect_names] "
                 "FILE_OR_DIR... (no input found)\n");
    return 2;
  }
  int failures = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    if (!in && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read\n", path.c_str());
      ++failures;
      continue;
    }
    const absl::StatusOr<Verdict> verdict =
        RunInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (!verdict.ok()) {
      std::printf("%s: BROKEN PROMISE: %s\n", path.c_str(),
                  verdict.status().ToString().c_str());
      ++failures;
      continue;
    }
    std::printf(
        "%s: %s%s%s\n", path.c_str(), OutcomeName(verdict->outcome),
        verdict->refusal.ok() ? "" : ": ",
        verdict->refusal.ok() ? "" : verdict->refusal.ToString().c_str());
    if (expect_names) {
      const std::string name = std::filesystem::path(path).filename();
      const Outcome expected = name.find("refused") != std::string::npos
                                   ? Outcome::kRefused
                                   : Outcome::kComputed;
      if (verdict->outcome != expected) {
        std::printf("%s: expected %s by its name\n", path.c_str(),
                    OutcomeName(expected));
        ++failures;
      }
    }
  }
  std::printf("attnserve_fuzz_replay: %zu inputs, %d failed\n", files.size(),
              failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace attnserve::fuzz

int main(int argc, char** argv) { return attnserve::fuzz::Main(argc, argv); }
