#!/usr/bin/env bash
# The one Release build of attnserve. `make build` (so CI) and the Dockerfile's build
# stage both run it, so the image is built exactly as the tree CI tests.
#
#   scripts/build-release.sh [--configure-only] [--binaries-only] BUILD_DIR [TARGET...]
#
# Configures BUILD_DIR with CMake + Ninja in Release mode (extra -D flags from the
# CMAKE_FLAGS environment variable), then builds TARGETs, or everything when none is
# given, with JOBS parallel jobs (default: nproc); tests and benchmarks are on.
# --binaries-only (`make run`, the Dockerfile) builds the two shipped executables,
# attnserve and attnctl, when no TARGET is given, and configures a new BUILD_DIR
# without tests and benchmarks, so that neither they nor their packages are needed
# (`scripts/install-deps.sh --build` suffices); a BUILD_DIR already configured with
# tests (by a full build) keeps them, so that `make run` after `make test` rebuilds
# nothing. No -march flags: the binaries pick their ISA at run time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
configure_only=0
binaries_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --configure-only) configure_only=1 ;;
    --binaries-only) binaries_only=1 ;;
    *) break ;;
  esac
  shift
done
if [ $# -lt 1 ]; then
  echo "usage: $0 [--configure-only] [--binaries-only] BUILD_DIR [TARGET...]" >&2
  exit 2
fi
build_dir="$1"
shift
options=()
if [ "$binaries_only" -eq 1 ]; then
  if ! grep -qs '^ATTNSERVE_BUILD_TESTS:BOOL=ON$' "$build_dir/CMakeCache.txt"; then
    options=(-DATTNSERVE_BUILD_TESTS=OFF -DATTNSERVE_BUILD_BENCHMARKS=OFF)
  fi
  [ $# -eq 0 ] && set -- attnserve attnctl
else
  # Explicit: a BUILD_DIR that `make run` configured without them gets them back.
  options=(-DATTNSERVE_BUILD_TESTS=ON -DATTNSERVE_BUILD_BENCHMARKS=ON)
fi

# ccache keys on the compiler's arguments, which name the source and build
# directories. Relative to the source root they are the same in every checkout
# (CI's clone, the image's /src, the image-steps test's copy), so all of them share
# cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
# ccache also keys on the locale (the compiler's messages follow it): one locale for
# every build made here, whatever the caller's, so that a host build and the image's
# build share entries too.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES

# shellcheck disable=SC2086  # CMAKE_FLAGS is a list of -D flags
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${options[@]}" \
  ${CMAKE_FLAGS:-} >/dev/null
[ "$configure_only" -eq 1 ] && exit 0

targets=()
for t in "$@"; do
  targets+=(--target "$t")
done
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" "${targets[@]}"
