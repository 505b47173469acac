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
  *)
    echo "usage: $0 [--build | --run | --test]" >&2
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

packages=("${build_packages[@]}")
case "$mode" in
  run) packages+=("${run_packages[@]}") ;;
  test) packages+=("${run_packages[@]}" "${test_packages[@]}") ;;
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
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # apt drops root to its _apt user to download, which must be able to write here.
    if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
      chown _apt "$work"
    fi
    if ! (cd "$work" && apt-get download -qq prometheus) 2>/dev/null; then
      apt_update  # no package lists yet (a fresh machine or image)
      (cd "$work" && apt-get download -qq prometheus)
    fi
    dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
    mkdir -p "$root/.deps/bin"
    install -m 755 "$work/root/usr/bin/promtool" "$promtool.new"
    mv "$promtool.new" "$promtool"
    echo "install-deps: $("$promtool" --version 2>&1 | head -1)"
  fi
fi
