#!/usr/bin/env bash
# The soak test of `make test` (tests/server/e2e/e2e_fault_test.cc,
# E2eSoakTest): a real attnserve at 70% of the capacity measured just before,
# over a mix of shapes, for as long as asked. It fails on any failed or changed
# answer, a median 10 s window whose p99 is past twice the first window's (or
# any window past four times it), or resident memory that grows by more than
# 2 MiB in the median 10 s window once warm; it prints the figures.
#
#   scripts/soak.sh [SECONDS] [BUILD_DIR]     (default 600 s, build/)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-600}"
build_dir="${2:-$root/build}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 20 ]; then
  echo "usage: $0 [SECONDS >= 20] [BUILD_DIR]" >&2
  exit 2
fi
bash "$root/scripts/build-release.sh" "$build_dir" attnserve_fault_tests
ATTNSERVE_SOAK_SECONDS="$seconds" \
  "$build_dir/tests/server/e2e/attnserve_fault_tests" --gtest_filter='E2eSoakTest.*'
