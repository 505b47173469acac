#!/usr/bin/env bash
# Fails when the committed seed corpus differs from what the generator writes
# now (a seed added, changed or dropped without regenerating).
#   corpus_current_test.sh GENERATOR CORPUS_DIR
set -euo pipefail
generator=$1
corpus=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$generator" "$scratch" >/dev/null
if ! diff -r "$scratch" "$corpus"; then
  echo "fuzz corpus: $corpus differs from the generator's output; regenerate it:" >&2
  echo "  $generator $corpus   (after removing the old files)" >&2
  exit 1
fi
echo "fuzz corpus: $(ls "$corpus" | wc -l) files, as the generator writes them"
