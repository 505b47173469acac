#!/usr/bin/env bash
# Builds the Dockerfile with podman, runs the image and checks it from outside, as
# `make test-image` (and so CI, after `make test`) does:
#
#   tests/deploy/image_test.sh ATTNCTL WORK_DIR
#
#   1. podman runs here (else FAIL: this test never passes without running)
#   2. the base image exists (scripts/podman-base.sh makes it once, with debootstrap:
#      no image registry is needed)
#   3. podman build of the Dockerfile with --build-arg BASE_IMAGE=that base (layers
#      are kept between runs; the compiles read the host's ccache, so a build after
#      `make build` of the same source is mostly cache hits)
#   4. the image's configuration: USER 10001:10001, the HEALTHCHECK (kept by
#      --format docker), ENTRYPOINT attnserve, ports 50051 and 9464
#   5. a container with a read-only root filesystem and no tmpfs at all
#      (--read-only --read-only-tmpfs=false), all capabilities dropped, ports
#      mapped to ephemeral loopback ports
#   6. from outside, with the host's ATTNCTL: health is SERVING, `infer --check`
#      matches the reference, and /metrics counts that call
#   7. the server process runs as uid and gid 10001 (the host's /proc of its pid,
#      and `id` in the container)
#   8. writes fail with "Read-only file system", even as root, on / and on /tmp
#   9. the image's HEALTHCHECK: "starting", then "healthy" with attnctl's SERVING
#      once `podman healthcheck run` runs it (podman's own timers need systemd)
#  10. SIGTERM (`podman stop`) while a call of about a second is in flight: the call
#      ends OK after "received SIGTERM, draining" in the server's log, the process
#      exits 0 within --shutdown_grace of SIGTERM, and podman stop returns before its
#      timeout (which exceeds the grace, as Compose's and Kubernetes' must)
#
# The container is always removed; the base, the built image and its build stage
# (IMAGE-build) stay cached, so the next run's build reuses their layers; dangling
# images of earlier builds are pruned. Every step is
# bounded in time. Needs root (through sudo when not root).
#
# Every podman command reads WORK_DIR/containers.conf (CONTAINERS_CONF), written here,
# instead of the host's containers.conf files, which the test leaves alone: its one
# setting, `default_ulimits = []`, keeps containers at the host's open-files limit
# (podman's default raises it, which fails where the hard limit is lower).
# Environment: IMAGE (default localhost/attnserve:test), BASE_IMAGE (default
# localhost/attnserve-base:bookworm), BUILD_TIMEOUT seconds (default 1800).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 ATTNCTL WORK_DIR" >&2
  exit 2
fi
attnctl="$(realpath -m "$1")"
work="$(realpath -m "$2")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
image="${IMAGE:-localhost/attnserve:test}"
base_image="${BASE_IMAGE:-localhost/attnserve-base:bookworm}"
build_timeout="${BUILD_TIMEOUT:-1800}"
name="attnserve-image-test-$$"
grace=30      # the server's --shutdown_grace (its default)
stop_timeout=40

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
total=10
step=0
step_started=$SECONDS
begin() {
  step=$((step + 1))
  step_started=$SECONDS
  echo "image-test: [$step/$total] $*"
}
ok() { echo "image-test:   ok ($((SECONDS - step_started)) s)${1:+: $1}"; }
fail() {
  echo "image-test: FAIL in step $step: $*" >&2
  exit 1
}
conf="$work/containers.conf"
# podman with the private containers.conf (through env: sudo resets the environment)
# and the runtime install-deps.sh installs (runc; crun is not installed).
pm() { $sudo env CONTAINERS_CONF="$conf" podman --runtime runc "$@"; }
# pm bounded by SECONDS.
pmt() {
  local seconds="$1"
  shift
  $sudo timeout --kill-after=10 "$seconds" env CONTAINERS_CONF="$conf" \
    podman --runtime runc "$@"
}

created=0
cleanup() {
  if [ "$created" -eq 1 ]; then
    pmt 60 rm --force --time 0 "$name" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
mkdir -p "$work"
cat >"$conf" <<'EOF'
# Written by tests/deploy/image_test.sh; podman reads only this file (CONTAINERS_CONF).
[containers]
default_ulimits = []
EOF

begin "podman runs here"
command -v podman >/dev/null ||
  fail "podman is not installed: run scripts/install-deps.sh (make deps); the image test cannot pass without running the image"
[ -x "$attnctl" ] || fail "$attnctl: no attnctl to check the container from outside (make build)"
if ! pmt 60 info >"$work/podman-info.txt" 2>&1; then
  cat "$work/podman-info.txt" >&2
  fail "podman info fails (output above): podman cannot run here"
fi
ok "$(pm version --format 'podman {{.Client.Version}}'), runtime runc"

begin "base image $base_image"
bash "$root/scripts/podman-base.sh" "$base_image" || fail "scripts/podman-base.sh failed"
ok

# The build stage's compiles also read the host's ccache, read-only: podman mounts
# it, and a ccache config naming it, into the build's RUN steps only (not into the
# image). build-release.sh makes ccache's paths relative to the source root, so the
# host's `make build` and the image's build share entries. A host without ccache's
# directory only means a cold build.
ccache_volumes=()
host_ccache="$(ccache --get-config cache_dir 2>/dev/null || true)"
if [ -n "$host_ccache" ] && [ -d "$host_ccache" ]; then
  printf 'cache_dir = /host-ccache\nread_only = true\ntemporary_dir = /tmp/ccache-tmp\n' \
    >"$work/ccache.conf"
  ccache_volumes=(--volume "$host_ccache:/host-ccache:ro"
                  --volume "$work/ccache.conf:/etc/ccache.conf:ro")
fi

begin "podman build -t $image (log: $work/build.log)"
# --format docker keeps HEALTHCHECK (OCI image configs have no such field);
# --network=host because podman's bridge has no route to the apt mirror here.
# Only the step lines and cache hits are shown; the whole log is in build.log.
set +e
pmt "$build_timeout" build --format docker --network=host --layers "${ccache_volumes[@]}" \
  --build-arg BASE_IMAGE="$base_image" --tag "$image" --file "$root/Dockerfile" "$root" \
  2>&1 | tee "$work/build.log" | grep --line-buffered -E '^\[[0-9]+/[0-9]+\] STEP|^--> Using cache|^COMMIT'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  tail -40 "$work/build.log" >&2
  [ "$status" -eq 124 ] && fail "podman build took over $build_timeout s"
  fail "podman build exit $status (last lines above)"
fi
size="$(pm image inspect --format '{{.Size}}' "$image")"
ok "$(awk -v s="$size" 'BEGIN {printf "%.0f MB", s / 1e6}')"
# The build stage gets a tag too (all its layers are cached by now, so this takes a
# second): the prune below then keeps its install-deps layer for the next run and
# removes only what earlier builds left untagged (their runtime images and build
# trees, hundreds of MB each).
pmt 300 build --format docker --network=host --layers "${ccache_volumes[@]}" --target build \
  --build-arg BASE_IMAGE="$base_image" --tag "$image-build" --file "$root/Dockerfile" "$root" \
  >>"$work/build.log" 2>&1 || fail "podman build --target build (the cached build stage) failed"
pmt 120 image prune --force >/dev/null || fail "podman image prune failed"

begin "the image's configuration"
pm image inspect "$image" >"$work/image.json"
python3 - "$work/image.json" <<'EOF' || fail "the image's configuration is not as the Dockerfile says"
import json, sys
image = json.load(open(sys.argv[1]))[0]
c = image["Config"]
errors = []
if image.get("ManifestType") != "application/vnd.docker.distribution.manifest.v2+json":
    errors.append(f"ManifestType {image.get('ManifestType')}: expected Docker's (--format docker)")
if c.get("User") != "10001:10001":
    errors.append(f"User {c.get('User')!r}, expected 10001:10001")
test = (image.get("Healthcheck") or c.get("Healthcheck") or {}).get("Test") or []
if test[:3] != ["CMD", "attnctl", "health"]:
    errors.append(f"Healthcheck {test!r}: expected attnctl health (built without --format docker?)")
if c.get("Entrypoint") != ["attnserve"]:
    errors.append(f"Entrypoint {c.get('Entrypoint')!r}")
if not {"50051/tcp", "9464/tcp"} <= set(c.get("ExposedPorts") or {}):
    errors.append(f"ExposedPorts {sorted(c.get('ExposedPorts') or {})}")
for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
ok "User 10001:10001, HEALTHCHECK attnctl health, ENTRYPOINT attnserve"

begin "podman run --read-only --read-only-tmpfs=false --cap-drop=ALL"
created=1
pmt 60 run --detach --name "$name" --read-only --read-only-tmpfs=false \
  --cap-drop=ALL --security-opt=no-new-privileges \
  --publish 127.0.0.1::50051 --publish 127.0.0.1::9464 \
  "$image" --workers=1 --threads_per_worker=1 --shutdown_grace="${grace}s" --log_level=debug \
  >"$work/run.txt" 2>&1 || { cat "$work/run.txt" >&2; fail "podman run failed"; }
grpc="$(pm port "$name" 50051/tcp | head -1)"
metrics="$(pm port "$name" 9464/tcp | head -1)"
[ -n "$grpc" ] && [ -n "$metrics" ] || fail "no mapped ports: $(pm port "$name")"
ok "gRPC on $grpc, metrics on $metrics"

begin "from outside: health, infer --check, /metrics"
deadline=$((SECONDS + 60))
until out="$(timeout 10 "$attnctl" health --target="$grpc" --timeout=2s 2>&1)" &&
    [ "$out" = SERVING ]; do
  if [ "$(pm inspect --format '{{.State.Running}}' "$name")" != true ]; then
    pm logs "$name" >&2 || true
    fail "the container exited at start (its log above)"
  fi
  [ $SECONDS -lt $deadline ] || fail "attnctl health against $grpc: not SERVING within 60 s: $out"
  sleep 1
done
timeout 120 "$attnctl" infer --target="$grpc" --timeout=60s --heads=4 --lq=256 --dim=64 \
  --causal --check >"$work/infer.txt" 2>&1 ||
  { cat "$work/infer.txt" >&2; fail "attnctl infer --check against $grpc failed (output above)"; }
python3 - "http://$metrics/metrics" <<'EOF' || fail "/metrics on $metrics does not show the call"
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
ok = [l for l in text.splitlines() if l.startswith("attnserve_requests_total{")
      and 'method="Attend"' in l and 'code="OK"' in l and float(l.split()[-1]) >= 1]
if not ok or "attnserve_build_info{" not in text:
    print("  no attnserve_requests_total{method=\"Attend\",code=\"OK\"} >= 1", file=sys.stderr)
    sys.exit(1)
EOF
ok "SERVING; infer --check: $(grep -m1 'max abs error' "$work/infer.txt" | sed 's/^ *check *output: *//'); /metrics counts it"

begin "the server runs as uid and gid 10001"
pid="$(pm inspect --format '{{.State.Pid}}' "$name")"
exe="$($sudo readlink "/proc/$pid/exe")"
[ "$exe" = /usr/local/bin/attnserve ] || fail "the container's process 1 runs $exe, not attnserve"
uids="$($sudo awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
gids="$($sudo awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
[ "$uids" = "10001 10001 10001 10001" ] || fail "attnserve (host pid $pid) has uids $uids"
[ "$gids" = "10001 10001 10001 10001" ] || fail "attnserve (host pid $pid) has gids $gids"
inside="$(pmt 30 exec "$name" id -u):$(pmt 30 exec "$name" id -g)"
[ "$inside" = 10001:10001 ] || fail "id in the container: $inside"
ok "host pid $pid: real, effective, saved and fs uid/gid 10001; id in the container: $inside"

begin "the root filesystem is read-only"
[ "$(pm inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$name")" = true ] ||
  fail "HostConfig.ReadonlyRootfs is not true"
for probe in "0:/probe" "0:/tmp/probe" "10001:/tmp/probe"; do
  user="${probe%%:*}"
  path="${probe#*:}"
  if out="$(pmt 30 exec --user "$user" "$name" sh -c "echo x > $path" 2>&1)"; then
    fail "uid $user wrote $path in the container"
  fi
  case "$out" in
    *"Read-only file system"*) ;;
    *) fail "writing $path as uid $user failed, but not for the read-only filesystem: $out" ;;
  esac
done
ok "writes to / and /tmp fail with EROFS, as root and as 10001"

begin "the HEALTHCHECK turns healthy"
# podman runs HEALTHCHECKs on systemd timers; without systemd (as here) it logs
# "unable to get systemd connection" and the status stays "starting" until
# `podman healthcheck run` runs the image's check command once, as the timer would.
health_status() {
  pm inspect --format '{{json .State}}' "$name" | python3 -c 'import json, sys
s = json.load(sys.stdin)
h = s.get("Health") or s.get("Healthcheck") or {}
log = h.get("Log") or [{}]
print(h.get("Status", ""), log[-1].get("ExitCode", ""), (log[-1].get("Output") or "").strip())'
}
before="$(health_status)"
[ "${before%% *}" = starting ] || fail "health status before any check: $before, expected starting"
health="$(pmt 60 healthcheck run "$name" 2>&1)" || fail "podman healthcheck run: $health"
after="$(health_status)"
[ "$after" = "healthy 0 SERVING" ] ||
  fail "after podman healthcheck run: status, exit code, output = $after"
ok "starting → healthy (attnctl health in the container: exit 0, SERVING)"

begin "SIGTERM during a call: podman stop --time $stop_timeout → the call ends OK, exit 0"
# A call of about a second on one thread here (8 heads, 8192 × 8192, 137 GFLOP), in
# flight when SIGTERM arrives: the server must finish it, then exit 0, before podman's
# stop timeout (> --shutdown_grace) would SIGKILL it. The server's debug log proves
# the order: its line for the call comes after "received SIGTERM, draining".
timeout 150 "$attnctl" infer --target="$grpc" --timeout=120s --heads=8 --lq=8192 --dim=64 \
  >"$work/inflight.txt" 2>&1 &
infer_pid=$!
python3 - "http://$metrics/metrics" <<'EOF' || fail "the long call never showed in attnserve_inflight_requests"
import sys, time, urllib.request
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
    if any(l.startswith("attnserve_inflight_requests") and float(l.split()[-1]) >= 1
           for l in text.splitlines()):
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
EOF
stop_started=$SECONDS
pmt $((stop_timeout + 20)) stop --time "$stop_timeout" "$name" >"$work/stop.txt" 2>&1 ||
  { cat "$work/stop.txt" >&2; fail "podman stop failed"; }
elapsed=$((SECONDS - stop_started))
infer_status=0
wait "$infer_pid" || infer_status=$?
exit_code="$(pm inspect --format "{{.State.ExitCode}}" "$name")"
finished_at="$(pm inspect --format "{{.State.FinishedAt}}" "$name")"
pm logs "$name" >"$work/server.log" 2>&1 || true
[ "$exit_code" = 0 ] || { cat "$work/server.log" >&2; fail "exit code $exit_code after SIGTERM (137 = killed after the stop timeout)"; }
[ "$elapsed" -lt "$stop_timeout" ] || fail "stopping took $elapsed s, the stop timeout is $stop_timeout s"
[ "$infer_status" -eq 0 ] ||
  { cat "$work/inflight.txt" >&2; fail "the call in flight at SIGTERM ended with exit $infer_status (above)"; }
drain="$(python3 - "$work/server.log" "$finished_at" "$grace" <<'EOF'
import datetime, re, sys
lines = open(sys.argv[1]).read().splitlines()
def at(pattern):
    return next((i for i, l in enumerate(lines) if re.search(pattern, l)), None)
term, stopped = at(r" I received SIGTERM, draining$"), at(r" I stopped$")
call = next((i for i, l in enumerate(lines) if term is not None and i > term and
             re.search(r" D AttendPieces id=attnctl-infer code=0 ", l)), None)
if term is None or stopped is None or call is None or not term < call < stopped:
    sys.exit("expected 'received SIGTERM, draining', then the call's 'AttendPieces ... code=0' "
             "(attnctl sends its 48 MiB request in pieces), then 'stopped'")
t = [datetime.datetime.fromisoformat(lines[i].split()[0].rstrip("Z")) for i in (term, stopped)]
date, clock = sys.argv[2].split()[:2]  # podman's "2006-01-02 15:04:05.999999999 +0000 UTC"
exited = datetime.datetime.fromisoformat(f"{date} {clock[:15]}")
after = (exited - t[0]).total_seconds()
if after >= float(sys.argv[3]):
    sys.exit(f"the process exited {after:.2f} s after SIGTERM, beyond --shutdown_grace")
print(f"stopped {(t[1] - t[0]).total_seconds():.2f} s after SIGTERM, the process exited "
      f"after {after:.2f} s (within the {sys.argv[3]} s grace)")
EOF
)" || { cat "$work/server.log" >&2; fail "the server's log (above) does not show the call drained after SIGTERM"; }
ok "the call in flight at SIGTERM ended OK; the server drained it and $drain; podman stop returned in $elapsed s, exit code 0"

echo "image-test: ok: $image ($(awk -v s="$size" 'BEGIN {printf "%.0f MB", s / 1e6}'))"
