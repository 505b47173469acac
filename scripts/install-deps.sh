#!/usr/bin/env bash
# Installs the Debian 12 packages attnserve needs, at one of three levels:
#
#   scripts/install-deps.sh --build   building attnserve and attnctl
#                                     (`scripts/build-release.sh --binaries-only`): the
#                                     compiler, CMake, Ninja, ccache and the -dev
#                                     packages; the Dockerfile's build stage
#   scripts/install-deps.sh --run     --build, plus what `make run` and the README's
#                                     first call use: python3 (standard library, for
#                                     examples/make_model_repository) and curl
#   scripts/install-deps.sh [--test]  everything: --run plus what `make test`,
#                                     `make bench` and `make test-image` need (CI's set),
#                                     and promtool in .deps/bin/ (below)
#   scripts/install-deps.sh --arm64   only the arm64 cross build's (scripts/arm64.sh):
#                                     Debian's aarch64 cross compiler, qemu-user, and
#                                     the arm64 builds of the libraries (multiarch:
#                                     the arm64 architecture is added to dpkg), and in
#                                     .deps/arm64/ the arm64 -dev packages that cannot
#                                     be installed beside their amd64 twins (below)
#
# No level installs a package that starts a service. promtool, which the deployment
# tests run, comes with Debian's `prometheus` package, whose installation also starts
# the Prometheus server (on :9090) and enables it at boot; so --test installs no
# `prometheus`, but downloads its .deb (`apt-get download`) and extracts promtool alone
# (`dpkg-deb -x`, no maintainer scripts run) into .deps/bin/ of this checkout, where
# the tests' CMake looks first. Nothing outside .deps/ changes for it.
#
# Idempotent: prints nothing and touches nothing when everything is present.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="test"
case "${1:-}" in
  "" | --test) ;;
  --run) mode=run ;;
  --build) mode=build ;;
  --arm64) mode=arm64 ;;
  *)
    echo "usage: $0 [--build | --run | --test | --arm64]" >&2
    exit 2
    ;;
esac

build_packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config
  # core
  libdnnl-dev ocl-icd-opencl-dev libabsl-dev libhwy-dev  # dnnl's CMake config wants OpenCL
  # service and client
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libcivetweb-dev nlohmann-json3-dev libpng-dev zlib1g-dev
)
run_packages=(
  # examples/make_model_repository (standard library only); the README's first call
  # reads /metrics with curl
  python3 curl
)
test_packages=(
  git openssl clang-format
  # make test-fuzz: clang++ with libFuzzer (libclang-rt-14-dev ships
  # libclang_rt.fuzzer) and clang's OpenMP runtime for the core it builds
  clang libclang-rt-14-dev libomp-dev
  # tests and benchmarks (valgrind: bench/per_call_instructions.sh)
  libgtest-dev libgmock-dev libbenchmark-dev valgrind
  # deployment checks (tests/deploy): YAML parsing with /usr/bin/python3 (promtool:
  # below, without the Prometheus server)
  python3-yaml
  # session routing (tests/server/e2e/e2e_session_routing_test.cc, deploy/haproxy/);
  # haproxy.service is masked before the package goes in (below)
  haproxy
  # the Python client (python/, tests/python/): /usr/bin/python3's own packages, a
  # venv with --system-site-packages (the package ships its generated stubs; a
  # test checks them against proto/ with protoc + grpc_python_plugin)
  python3-venv python3-pip python3-setuptools python3-wheel
  python3-grpcio python3-protobuf python3-numpy python3-pytest python3-matplotlib
  python3-torch
  # the image test (make test-image, tests/deploy/image_test.sh): podman with runc,
  # and debootstrap for its base image (scripts/podman-base.sh)
  podman runc debootstrap
)

arm64_packages=(
  g++-aarch64-linux-gnu qemu-user
  libabsl-dev:arm64 libhwy-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
  libgrpc++-dev:arm64 libprotobuf-dev:arm64 libcivetweb-dev:arm64 libpng-dev:arm64
  zlib1g-dev:arm64
  # prometheus-cpp's CMake package asks for CURL (its push library), arm64's here
  libcurl4-openssl-dev:arm64
  # the OpenMP runtime where qemu-aarch64's loader finds it (the cross compiler's
  # copy lies outside the arm64 library path)
  libgomp1:arm64
)
# oneDNN's and prometheus-cpp's -dev packages cannot be installed beside their amd64
# twins (a header and a CMake file differ): their arm64 .debs, with the libraries
# they name, are unpacked (`dpkg-deb -x`, no maintainer scripts) into .deps/arm64/,
# where cmake/aarch64-linux-gnu.cmake looks first.
arm64_unpacked=(libdnnl-dev libdnnl2 prometheus-cpp-dev libprometheus-cpp-core1.0
                libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0)

packages=("${build_packages[@]}")
case "$mode" in
  run) packages+=("${run_packages[@]}") ;;
  test) packages+=("${run_packages[@]}" "${test_packages[@]}") ;;
  arm64) packages=("${arm64_packages[@]}") ;;
esac

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
updated=0
apt_update() {
  if [ "$updated" -eq 0 ]; then
    $sudo apt-get update -qq
    updated=1
  fi
}

if [ "$mode" = arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "install-deps: adding the arm64 architecture to dpkg"
  $sudo dpkg --add-architecture arm64
  apt_update
fi

# Downloads the .debs of packages "$1"... into a new temporary directory, named in
# $work.
download_debs() {
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # apt drops root to its _apt user to download, which must be able to write here.
  if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
    chown _apt "$work"
  fi
  if ! (cd "$work" && apt-get download -qq "$@") 2>/dev/null; then
    apt_update  # no package lists yet (a fresh machine or image)
    (cd "$work" && apt-get download -qq "$@")
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  # haproxy's package starts and enables haproxy.service (on :80 with its default
  # configuration); the tests run their own haproxy processes. Masking the unit
  # before the install keeps the package from starting it, now or at boot.
  for p in "${missing[@]}"; do
    if [ "$p" = haproxy ] && [ -d /run/systemd/system ] && [ ! -e /etc/systemd/system/haproxy.service ]; then
      $sudo systemctl mask --quiet haproxy.service
    fi
  done
  apt_update
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi

# promtool without the Prometheus server: the binary alone (statically linked but for
# libc), from the .deb of Debian's prometheus package, into .deps/bin/.
if [ "$mode" = test ]; then
  promtool="$root/.deps/bin/promtool"
  if ! "$promtool" --version >/dev/null 2>&1; then
    echo "install-deps: promtool from Debian's prometheus package into .deps/bin/ (no service)"
    download_debs prometheus
    dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
    mkdir -p "$root/.deps/bin"
    install -m 755 "$work/root/usr/bin/promtool" "$promtool.new"
    mv "$promtool.new" "$promtool"
    echo "install-deps: $("$promtool" --version 2>&1 | head -1)"
  fi
fi

if [ "$mode" = arm64 ]; then
  prefix="$root/.deps/arm64"
  if [ "$(cat "$prefix/unpacked" 2>/dev/null)" != "${arm64_unpacked[*]}" ]; then
    echo "install-deps: unpacking ${arm64_unpacked[*]} (arm64) into .deps/arm64/"
    download_debs "${arm64_unpacked[@]/%/:arm64}"
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$work"/*.deb; do
      dpkg-deb -x "$deb" "$prefix"
    done
    echo "${arm64_unpacked[*]}" >"$prefix/unpacked"
  fi
fi
