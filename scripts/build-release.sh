#!/usr/bin/env bash
# The one Release build of attnserve. `make build` (so CI) and the Dockerfile's build
# stage both run it, so the image is built exactly as the tree CI tests.
#
#   scripts/build-release.sh [--configure-only] BUILD_DIR [TARGET...]
#
# Configures BUILD_DIR with CMake + Ninja in Release mode (extra -D flags from the
# CMAKE_FLAGS environment variable), then builds TARGETs, or everything when none is
# given, with JOBS parallel jobs (default: nproc). No -march flags: the binaries run on
# any x86-64 host and pick their ISA at run time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
configure_only=0
if [ "${1:-}" = "--configure-only" ]; then
  configure_only=1
  shift
fi
if [ $# -lt 1 ]; then
  echo "usage: $0 [--configure-only] BUILD_DIR [TARGET...]" >&2
  exit 2
fi
build_dir="$1"
shift

# ccache keys on the compiler's arguments, which name the source and build
# directories. Relative to the source root they are the same in every checkout
# (CI's clone, the image's /src, the image-steps test's copy), so all of them share
# cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"

# shellcheck disable=SC2086  # CMAKE_FLAGS is a list of -D flags
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_FLAGS:-} >/dev/null
[ "$configure_only" -eq 1 ] && exit 0

targets=()
for t in "$@"; do
  targets+=(--target "$t")
done
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" "${targets[@]}"
