# syntax=docker/dockerfile:1
# attnserve image: the gRPC attention server and the attnctl client.
#
#   docker build -t attnserve:0.1.0 .        (or: podman build --format docker ...)
#   docker run --rm -p 50051:50051 -p 9464:9464 --cpus=4 attnserve:0.1.0 --workers=1
#
# BASE_IMAGE, the FROM of both stages, is any Debian 12 image with apt; the default is
# Docker Hub's debian:bookworm-slim. Where no image registry is reachable (only an apt
# mirror), scripts/podman-base.sh makes one with debootstrap and podman, and
#   podman build --format docker --build-arg BASE_IMAGE=localhost/attnserve-base:bookworm .
# builds on it (as `make test-image` does). Nothing here names an architecture (Debian
# packages by name, no target-triplet paths), so the image builds for the platform of
# the build, or for each of `docker buildx build --platform=...`.
#
# The build stage runs the same scripts as `make build` (scripts/install-deps.sh,
# then scripts/build-release.sh), in their build-only
# modes: the build packages only (no test tools), the two shipped binaries only (no
# tests or benchmarks). The test deploy_image_build_steps runs these RUN lines outside
# Docker on every `make test`, so keep this stage to FROM, WORKDIR, COPY and RUN; the
# ccache cache mount makes a rebuild after a source change mostly cache hits.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache bash scripts/build-release.sh --binaries-only build

# The runtime stage: the shared libraries of the two binaries and nothing else. The
# test deploy_dockerfile checks that this list covers `ldd` of both binaries (libc6
# comes with the base image).
FROM ${BASE_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libc-ares2 \
      libcivetweb1 \
      libdnnl2 \
      libgcc-s1 \
      libgomp1 \
      libgrpc++1.51 \
      libgrpc29 \
      libhwy1 \
      libpng16-16 \
      libprometheus-cpp-core1.0 \
      libprometheus-cpp-pull1.0 \
      libprotobuf32 \
      libre2-9 \
      libssl3 \
      libstdc++6 \
      ocl-icd-libopencl1 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnserve
COPY --from=build /src/build/server/attnserve /src/build/client/attnctl /usr/local/bin/
# Labels after the layers, so that a new REVISION rebuilds none of them.
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=""
ARG SOURCE=""
LABEL org.opencontainers.image.title="attnserve" \
      org.opencontainers.image.description="Attention on the CPU (oneDNN) as a gRPC microservice, with Prometheus metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.documentation="docs/operations.md in the source" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001:10001
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["attnctl", "health", "--target=127.0.0.1:50051", "--timeout=3s"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["attnserve"]
