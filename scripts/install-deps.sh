#!/usr/bin/env bash
# Installs the Debian 12 packages attnserve needs to build, test and run.
#
#   scripts/install-deps.sh           everything `make build`, `make test`, `make bench`
#                                     and `make test-image` need (CI's set)
#   scripts/install-deps.sh --build   only what building attnserve and attnctl needs
#                                     (`scripts/build-release.sh --binaries-only`): the
#                                     Dockerfile's build stage, without the test tools
#
# Idempotent: prints nothing and touches nothing when every package is present.
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --build) mode=build ;;
  *)
    echo "usage: $0 [--build]" >&2
    exit 2
    ;;
esac

build_packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config
  # core
  libdnnl-dev ocl-icd-opencl-dev libabsl-dev  # dnnl's CMake config wants OpenCL
  # service and client
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libcivetweb-dev nlohmann-json3-dev libpng-dev zlib1g-dev
)
test_packages=(
  git openssl clang-format
  # make test-fuzz: clang++ with libFuzzer (libclang-rt-14-dev ships
  # libclang_rt.fuzzer) and clang's OpenMP runtime for the core it builds
  clang libclang-rt-14-dev libomp-dev
  # tests and benchmarks (valgrind: bench/per_call_instructions.sh)
  libgtest-dev libgmock-dev libbenchmark-dev valgrind
  # examples/make_model_repository and its test (standard library only)
  python3
  # deployment checks (tests/deploy): promtool, YAML parsing with /usr/bin/python3
  prometheus python3-yaml
  # session routing (tests/server/e2e/e2e_session_routing_test.cc, deploy/haproxy/)
  haproxy
  # the Python client (python/, tests/python/): /usr/bin/python3's own packages, a
  # venv with --system-site-packages, stubs from protoc + grpc_python_plugin
  python3-venv python3-pip python3-setuptools python3-wheel
  python3-grpcio python3-protobuf python3-numpy python3-pytest python3-matplotlib
  python3-torch
  # the image test (make test-image, tests/deploy/image_test.sh): podman with runc,
  # and debootstrap for its base image (scripts/podman-base.sh)
  podman runc debootstrap
)

packages=("${build_packages[@]}")
if [ "$mode" = all ]; then
  packages+=("${test_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
