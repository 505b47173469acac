#!/usr/bin/env bash
# Builds attnserve for arm64 (aarch64) on a Debian 12 x86-64 host and runs the core,
# wire and KV-cache tests under qemu-aarch64 (user-mode emulation):
#
#   scripts/arm64.sh [BUILD_DIR]       default build-arm64; `make test-arm64`
#
# 1. Packages: Debian's aarch64 cross compiler, qemu-user, and the arm64 builds of the
#    libraries from Debian's multiarch (`dpkg --add-architecture arm64`), installed
#    beside the amd64 ones.
# 2. oneDNN's and prometheus-cpp's -dev packages cannot be installed beside their amd64
#    twins (a header and a CMake file differ); their arm64 .debs, with the libraries
#    they name, are unpacked (`dpkg-deb -x`, no maintainer scripts) into .deps/arm64/
#    of this checkout, where cmake/aarch64-linux-gnu.cmake looks first.
# 3. Configures BUILD_DIR with that toolchain file and builds the server, attnctl and
#    the three test programs.
# 4. Runs each test program under qemu-aarch64, each in two shards at once.
#
# Idempotent: steps 1 and 2 print nothing when everything is present.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build-arm64}"
case "$build_dir" in
  /*) ;;
  *) build_dir="$root/$build_dir" ;;
esac

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

# 1. The cross toolchain, the emulator and the arm64 libraries.
packages=(
  g++-aarch64-linux-gnu qemu-user
  libabsl-dev:arm64 libhwy-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
  libgrpc++-dev:arm64 libprotobuf-dev:arm64 libcivetweb-dev:arm64 libpng-dev:arm64
  zlib1g-dev:arm64
)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "arm64: adding the arm64 architecture to dpkg"
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
fi
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "arm64: installing ${missing[*]}"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The -dev packages that conflict with their amd64 twins, with their libraries.
unpacked=(libdnnl-dev libdnnl2 prometheus-cpp-dev libprometheus-cpp-core1.0
          libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0)
prefix="$root/.deps/arm64"
stamp="$prefix/unpacked"
if [ "$(cat "$stamp" 2>/dev/null)" != "${unpacked[*]}" ]; then
  echo "arm64: unpacking ${unpacked[*]} (arm64) into .deps/arm64/"
  rm -rf "$prefix"
  mkdir -p "$prefix/debs"
  (cd "$prefix/debs" && apt-get download -qq "${unpacked[@]/%/:arm64}" 2>/dev/null)
  for deb in "$prefix"/debs/*.deb; do
    dpkg-deb -x "$deb" "$prefix"
  done
  rm -rf "$prefix/debs"
  echo "${unpacked[*]}" >"$stamp"
fi

# 3. Configure and build.
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DATTNSERVE_BUILD_BENCHMARKS=OFF >/dev/null
tests=(core/attnserve_core_tests wire/attnserve_wire_tests kvcache/attnserve_kvcache_tests)
targets=(attnserve attnctl)
for t in "${tests[@]}"; do
  targets+=("$(basename "$t")")
done
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
aarch64-linux-gnu-readelf -h "$build_dir/server/attnserve" | grep -q AArch64 || {
  echo "arm64: $build_dir/server/attnserve is not an arm64 program" >&2
  exit 1
}

# 4. The tests under qemu-aarch64, two shards of each program at once.
failed=0
for t in "${tests[@]}"; do
  program="$build_dir/tests/$t"
  echo "arm64: $(basename "$program") under qemu-aarch64"
  pids=()
  for shard in 0 1; do
    GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard qemu-aarch64 "$program" \
      --gtest_brief=1 >"$program.shard$shard.log" 2>&1 &
    pids+=($!)
  done
  for shard in 0 1; do
    if wait "${pids[$shard]}"; then
      tail -n 1 "$program.shard$shard.log"
    else
      failed=1
      cat "$program.shard$shard.log"
    fi
  done
done
if [ "$failed" -ne 0 ]; then
  echo "arm64: tests failed" >&2
  exit 1
fi
echo "arm64: the core, wire and KV-cache tests passed under qemu-aarch64"
