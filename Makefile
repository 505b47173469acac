# The README's two commands, each doing the whole set-up on a fresh Debian 12 machine:
#   make run   deps-run (the build packages, python3 and curl: no test tools) ->
#              configure -> build attnserve and attnctl only -> the example models
#              (examples/) -> attnserve in the foreground with defaults and those
#              models (gRPC on :50051, metrics on :9464; Ctrl-C drains and stops it)
#   make test  deps (every package) -> the format check (clang-format --dry-run -Werror over every
#              tracked .cc/.h) -> configure -> build -> every test through ctest, then
#              the core, wire, server (unit, fuzz, end-to-end) tests again under
#              ASan+UBSan in their own build directory (the client's suite runs in the
#              Release build only), then the KV-cache session store's tests under
#              ThreadSanitizer (build-tsan/: the store alone, no gRPC or OpenMP,
#              whose prebuilt Debian libraries TSan cannot see into), then the
#              coverage-guided libFuzzer target over request decoding and validation
#              (make test-fuzz), then the arm64 build with its core, wire and
#              KV-cache tests under qemu-aarch64 (make test-arm64)
# make test-fuzz builds tests/fuzz/'s libFuzzer target with clang++ under
# ASan+UBSan in build-fuzz/ (only the libraries it links) and runs it on the seed
# corpus for FUZZ_SECONDS (default 60; e.g. `make test-fuzz FUZZ_SECONDS=600` to
# search longer), new inputs in build-fuzz/fuzz-run/; it fails on any crash,
# sanitizer report, timeout or OOM, and when clang++ or libFuzzer is missing;
# make bench runs the full kernel and layer benchmarks (one JSON object per case) and
# the session benchmark (a table);
# make bench-quick runs its quick subset;
# make test-image builds the Dockerfile with podman on a local Debian 12 base (made with
# debootstrap on first use, passed as --build-arg BASE_IMAGE: no image registry is
# needed), runs the image read-only and checks it from outside with the build's
# attnctl, the only target it builds (tests/deploy/image_test.sh; CI runs it after
# make test).

BUILD_DIR      ?= build
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
FUZZ_BUILD_DIR ?= build-fuzz
ARM64_BUILD_DIR ?= build-arm64
FUZZ_SECONDS   ?= 60
CMAKE_FLAGS    ?=
JOBS           ?= $(shell nproc)
# Sanitizer builds: optimized as RelWithDebInfo, with line tables only (-g1: file
# and line in every report, a quarter less compile time than full debug info).
SANITIZE_FLAGS ?= -O2 -g1 -DNDEBUG

.PHONY: all deps deps-run configure build run bench bench-quick test test-release test-sanitize test-tsan \
        test-fuzz test-arm64 test-image format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

deps-run:
	@bash scripts/install-deps.sh --run

# scripts/build-release.sh is the one Release recipe; the Dockerfile runs it too.
configure: deps
	@CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/build-release.sh --configure-only $(BUILD_DIR)

build: deps
	@CMAKE_FLAGS="$(CMAKE_FLAGS)" JOBS=$(JOBS) bash scripts/build-release.sh $(BUILD_DIR)

# Only the server and attnctl: a new BUILD_DIR is configured without tests and
# benchmarks (whose packages deps-run does not install); one that `make build` or
# `make test` configured keeps them, and only the two targets are brought up to date.
run: deps-run
	@CMAKE_FLAGS="$(CMAKE_FLAGS)" JOBS=$(JOBS) bash scripts/build-release.sh --binaries-only $(BUILD_DIR)
	@python3 examples/make_model_repository $(BUILD_DIR)/models >/dev/null
	$(BUILD_DIR)/server/attnserve --model_repository=$(BUILD_DIR)/models $(ARGS)

bench: build
	$(BUILD_DIR)/bench/attnserve_kernel_bench --json
	$(BUILD_DIR)/bench/attnserve_layer_bench --json
	$(BUILD_DIR)/bench/attnserve_session_bench

bench-quick: build
	$(BUILD_DIR)/bench/attnserve_kernel_bench --quick

test: format-check test-release test-sanitize test-tsan test-fuzz test-arm64

test-release: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-sanitize: deps
	@cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)" \
	  -DATTNSERVE_SANITIZE=address,undefined -DATTNSERVE_BUILD_BENCHMARKS=OFF \
	  -DATTNSERVE_BUILD_CLIENT=OFF >/dev/null
	@cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD_DIR) --output-on-failure -j $(JOBS)

test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_FLAGS)" \
	  -DATTNSERVE_SANITIZE=thread -DATTNSERVE_BUILD_BENCHMARKS=OFF \
	  -DATTNSERVE_BUILD_CLIENT=OFF >/dev/null
	@cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target attnserve_kvcache_tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  $(TSAN_BUILD_DIR)/tests/kvcache/attnserve_kvcache_tests

# -O1 with line tables: sanitizer reports name the line, and the build stays
# about a minute and a half of CPU on two cores.
test-fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
	  -DATTNSERVE_FUZZ=ON -DATTNSERVE_SANITIZE=address,undefined \
	  -DATTNSERVE_BUILD_BENCHMARKS=OFF -DATTNSERVE_BUILD_CLIENT=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target attnserve_fuzz
	bash tests/fuzz/run_fuzz.sh $(FUZZ_BUILD_DIR)/tests/fuzz/attnserve_fuzz \
	  $(FUZZ_BUILD_DIR)/fuzz-run $(FUZZ_SECONDS)

# The arm64 build, cross-compiled from x86-64, and its core, wire and KV-cache tests
# under qemu-aarch64 (scripts/arm64.sh: the packages it adds, the one test it leaves
# out under emulation).
test-arm64: deps
	@JOBS=$(JOBS) bash scripts/arm64.sh $(ARM64_BUILD_DIR)

# Separate from `make test`: it needs root (or sudo) and podman, which a developer's
# machine or a container may not offer. Fails, never skips, where podman cannot run.
test-image: deps
	@CMAKE_FLAGS="$(CMAKE_FLAGS)" JOBS=$(JOBS) bash scripts/build-release.sh $(BUILD_DIR) attnctl
	bash tests/deploy/image_test.sh $(BUILD_DIR)/client/attnctl $(BUILD_DIR)/image-test

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

# Fails, naming each file and line, when any tracked source is not formatted as
# .clang-format says (`make format` fixes them).
format-check: deps
	@git ls-files '*.cc' '*.h' | xargs clang-format --dry-run -Werror
	@echo "format-check: $$(git ls-files '*.cc' '*.h' | wc -l) files formatted"

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(TSAN_BUILD_DIR) $(FUZZ_BUILD_DIR)
