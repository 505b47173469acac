#!/usr/bin/env bash
# Runs the libFuzzer target for a bounded time on the committed seed corpus and
# regression inputs (`make test-fuzz` calls it).
#
#   run_fuzz.sh FUZZER SCRATCH_DIR SECONDS
#
# First every committed input (tests/fuzz/corpus/, tests/fuzz/regressions/) is
# run once on its own; then libFuzzer mutates from them for SECONDS. New inputs
# and any crash, timeout or OOM input go to SCRATCH_DIR, never into the
# repository. Exits non-zero on a crash, sanitizer report, timeout (one input
# over 10 s), OOM (2 GiB RSS) or leak, and when the fuzzer is missing.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 FUZZER SCRATCH_DIR SECONDS" >&2
  exit 2
fi
fuzzer=$1
scratch=$2
seconds=$3
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus
regressions=$here/regressions

if [ ! -x "$fuzzer" ]; then
  echo "run_fuzz: $fuzzer is missing (build it with make test-fuzz)" >&2
  exit 1
fi
if [ -z "$(ls -A "$corpus" 2>/dev/null)" ]; then
  echo "run_fuzz: the seed corpus $corpus is empty or missing" >&2
  exit 1
fi
inputs=("$corpus")
if [ -n "$(ls -A "$regressions" 2>/dev/null)" ]; then
  inputs+=("$regressions")
fi

rm -rf "$scratch"
mkdir -p "$scratch/new" "$scratch/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# libFuzzer's exit codes are its own (crash 77, timeout 70, OOM and leaks as a
# crash); anything but 0 fails the run.
options=(
  -timeout=10 -rss_limit_mb=2048 -max_len=4096
  -dict="$here/attnserve.dict"
  -artifact_prefix="$scratch/artifacts/"
  -error_exitcode=77 -timeout_exitcode=70
  -print_final_stats=1
)

echo "run_fuzz: replaying $(find "${inputs[@]}" -type f | wc -l) committed inputs"
"$fuzzer" "${options[@]}" -runs=0 "${inputs[@]}" \
  >"$scratch/replay.log" 2>&1 || {
  status=$?
  tail -n 60 "$scratch/replay.log" >&2
  echo "run_fuzz: FAILED replaying the committed inputs (exit $status)" >&2
  exit 1
}

echo "run_fuzz: fuzzing for ${seconds} s (new inputs in $scratch/new)"
status=0
"$fuzzer" "${options[@]}" -max_total_time="$seconds" \
  "$scratch/new" "${inputs[@]}" >"$scratch/fuzz.log" 2>&1 || status=$?
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|stat::' "$scratch/fuzz.log" || true
if [ "$status" -ne 0 ]; then
  tail -n 80 "$scratch/fuzz.log" >&2
  echo "run_fuzz: FAILED (exit $status); the input is in $scratch/artifacts/:" >&2
  ls -l "$scratch/artifacts" >&2
  exit 1
fi
echo "run_fuzz: no failure in ${seconds} s; $(ls "$scratch/new" | wc -l) new inputs kept in $scratch/new"
