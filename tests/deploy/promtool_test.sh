#!/usr/bin/env bash
# promtool on deploy/prometheus: the Compose stack's configuration (which loads the
# rules), every rule file, and the rules' unit tests (alerts that must fire above
# their thresholds and must not below them).
#   usage: promtool_test.sh [PROMTOOL]
set -euo pipefail
promtool="${1:-promtool}"
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../deploy/prometheus" && pwd)"
shopt -s nullglob
rules=("$dir"/rules/*.yml)
tests=("$dir"/tests/*.yml)
if [ ${#rules[@]} -eq 0 ] || [ ${#tests[@]} -eq 0 ]; then
  echo "FAIL: no rule files or no rule tests under $dir" >&2
  exit 1
fi
"$promtool" check config "$dir/prometheus.yml"
"$promtool" check rules "${rules[@]}"
"$promtool" test rules "${tests[@]}"
