#!/usr/bin/env bash
# Builds attnserve for arm64 (aarch64) on a Debian 12 x86-64 host and runs the core,
# wire and KV-cache tests under qemu-aarch64 (user-mode emulation):
#
#   scripts/arm64.sh [BUILD_DIR]       default build-arm64; `make test-arm64`
#
# 1. Packages (`scripts/install-deps.sh --arm64`): Debian's aarch64 cross compiler,
#    qemu-user, and the arm64 builds of the libraries from Debian's multiarch
#    (`dpkg --add-architecture arm64`), installed beside the amd64 ones.
# 2. The same script unpacks oneDNN's and prometheus-cpp's arm64 -dev packages, which
#    cannot be installed beside their amd64 twins, into .deps/arm64/ of this
#    checkout, where cmake/aarch64-linux-gnu.cmake looks first.
# 3. Configures BUILD_DIR with that toolchain file and builds the server, attnctl and
#    the three test programs.
# 4. Runs each test program under qemu-aarch64 emulating a CPU with NEON only
#    (Neoverse N1), each in eight shards, as many at once as there are cores, all
#    but one test:
#    EngineTest.NewLengthsCreateNoPrimitiveAfterPrepare makes 2,700 calls of up to
#    1,100 × 1,150 attention to count oneDNN primitives, which takes hours under
#    emulation (the code it checks is the same on every architecture, and it runs in
#    every x86-64 suite). Then the vector-op and conversion tests again on an
#    emulated CPU with SVE, which check the SVE table (and NEON's) against double
#    arithmetic; the kernels' tests run on the NEON table only, each of their sweeps
#    taking minutes under emulation.
#
# Steps 1 and 2 print nothing when everything is present.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build-arm64}"
case "$build_dir" in
  /*) ;;
  *) build_dir="$root/$build_dir" ;;
esac

# 1 and 2.
bash "$root/scripts/install-deps.sh" --arm64

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

# 4. The tests under qemu-aarch64: each program in eight shards, JOBS (default: the
# cores) at a time, so that the long sweeps spread over the cores evenly.
emulated_filter="-EngineTest.NewLengthsCreateNoPrimitiveAfterPrepare"
shards=8
parallel="${JOBS:-$(nproc)}"
failed=0
for t in "${tests[@]}"; do
  program="$build_dir/tests/$t"
  echo "arm64: $(basename "$program") under qemu-aarch64"
  for ((shard = 0; shard < shards; shard++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
    (
      status=0
      QEMU_CPU=neoverse-n1 ATTNSERVE_TEST_EXPECT_ISA=neon \
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard qemu-aarch64 "$program" \
        --gtest_brief=1 --gtest_filter="$emulated_filter" \
        >"$program.shard$shard.log" 2>&1 || status=$?
      echo "$status" >"$program.shard$shard.status"
    ) &
  done
  wait
  for ((shard = 0; shard < shards; shard++)); do
    if [ "$(cat "$program.shard$shard.status")" = 0 ]; then
      tail -n 1 "$program.shard$shard.log"
    else
      failed=1
      cat "$program.shard$shard.log"
    fi
  done
done
program="$build_dir/tests/core/attnserve_core_tests"
echo "arm64: the vector-op tables under qemu-aarch64 with SVE"
if ! QEMU_CPU=max ATTNSERVE_TEST_EXPECT_ISA=sve qemu-aarch64 "$program" \
    --gtest_brief=1 --gtest_filter='VecOpsTest.*:ConvertTest.*' >"$program.sve.log" 2>&1; then
  failed=1
  cat "$program.sve.log"
else
  tail -n 1 "$program.sve.log"
fi
if [ "$failed" -ne 0 ]; then
  echo "arm64: tests failed" >&2
  exit 1
fi
echo "arm64: the core, wire and KV-cache tests passed under qemu-aarch64 (NEON; SVE tables)"
