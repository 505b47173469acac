#!/usr/bin/env bash
# Instructions the server executes per tiny Attend call (B1 H1 L16 D64 f32, the
# RPC benchmark's rpc_b1_h1_l16_d64_f32_c32 load from attnctl bench), counted by
# valgrind's callgrind: a deterministic measure of per-call work that the
# machine's neighbours do not move, for changes worth a few percent
# (docs/benchmarks.md, "Per-call instructions").
#
#   bench/per_call_instructions.sh [--echo | --v2] [--build DIR] [--seconds N] [-- SERVER_FLAGS...]
#
# Starts build/server/attnserve (or, with --echo,
# build/server/bench/attnserve_echo_server) under callgrind, warms it up, counts the
# instructions of N seconds (default 8) of closed-loop load (32 calls outstanding on
# 4 connections; with --v2 the same calls as ModelInfer) and prints one JSON line:
# calls, instructions per call, and the inclusive instructions per call of the
# server's main stages (attnserve only).
# Under valgrind the CPU has no AVX-512 or AMX: oneDNN and the kernel run their
# AVX2 code, and `rep stos`/`rep movs` count one instruction per iteration, so
# compare runs of this script with each other, not with native time. DIR (default build) is relative to the
# repository root. Needs valgrind (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

echo_server=false
protocol=native
build=build
seconds=8
while [ $# -gt 0 ]; do
  case "$1" in
    --echo) echo_server=true; shift ;;
    --v2) protocol=v2; shift ;;
    --build) build="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--echo | --v2] [--build DIR] [--seconds N] [-- SERVER_FLAGS...]" >&2; exit 2 ;;
  esac
done
if $echo_server && [ "$protocol" = v2 ]; then
  echo "per_call_instructions: the echo answers Attend only (not --v2)" >&2
  exit 2
fi
for tool in valgrind callgrind_annotate callgrind_control /usr/bin/python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "per_call_instructions: $tool not found (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
done
attnctl="$build/client/attnctl"
if $echo_server; then
  server=("$build/server/bench/attnserve_echo_server")
else
  server=("$build/server/attnserve" --metrics_listen=127.0.0.1:0)
fi
for binary in "$attnctl" "${server[0]}"; do
  [ -x "$binary" ] || { echo "per_call_instructions: $binary not built (make build)" >&2; exit 1; }
done

work=$(mktemp -d)
pid=""
cleanup() {
  local status=$?
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -s "$work/log" ]; then
    echo "per_call_instructions: the server's log:" >&2
    cat "$work/log" >&2
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
fail() {
  echo "per_call_instructions: $*" >&2
  exit 1
}

# A free port: bind port 0 and read it back (another process could take it
# before the server binds it; the server then fails to start, loudly).
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# OMP_WAIT_POLICY set: attnserve then does not re-exec itself (server/main.cc).
OMP_WAIT_POLICY=PASSIVE valgrind --tool=callgrind --smc-check=all-non-file \
  --callgrind-out-file="$work/out" "${server[@]}" --listen="127.0.0.1:$port" "$@" \
  >"$work/log" 2>&1 &
pid=$!

load=("$attnctl" bench --target="127.0.0.1:$port" --timeout=60s --batch=1 --heads=1
  --lq=16 --lk=16 --dim=64 --concurrency=32 --connections=4 --warmup=0s
  --protocol="$protocol")
ready=false
for _ in $(seq 1 120); do
  if "$attnctl" info --target="127.0.0.1:$port" --timeout=2s >/dev/null 2>&1; then
    ready=true
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 1
done
$ready || fail "the server did not come up (exited, or no answer within 120 s)"

# Warm-up: primitives, workspaces and the heap settle before the count starts.
"${load[@]}" --duration=5s >/dev/null || fail "the warm-up load failed"
callgrind_control -z "$pid" >"$work/control" 2>&1 || fail "callgrind_control -z: $(cat "$work/control")"
"${load[@]}" --duration="${seconds}s" --output_format=json >"$work/load.json" ||
  fail "the measured load failed: $(cat "$work/load.json")"
callgrind_control -d "$pid" >"$work/control" 2>&1 || fail "callgrind_control -d: $(cat "$work/control")"
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""

dump=$(ls "$work"/out.* | head -1)
callgrind_annotate --inclusive=yes --threshold=100 "$dump" >"$work/inclusive.txt"
/usr/bin/python3 - "$work/load.json" "$work/inclusive.txt" "$echo_server" "$protocol" <<'EOF'
import json, re, sys

load = json.load(open(sys.argv[1]))
calls = load["ok"]
if calls <= 0 or load["errors"]:
    sys.exit(f"per_call_instructions: the load failed: {json.dumps(load['errors'])}")
inclusive = {}
for line in open(sys.argv[2]):
    m = re.match(r"\s*([\d,]+) \([ \d.%]+\)\s+(.*)", line)
    if m:
        inclusive.setdefault(m.group(2), int(m.group(1).replace(",", "")))

def per_call(pattern):
    """Inclusive instructions per call of the first function matching pattern."""
    for name, count in inclusive.items():
        if pattern in name:
            return round(count / calls)
    sys.exit(f"per_call_instructions: no function matches {pattern!r} in the "
             "profile (renamed?): update this script")

v2 = sys.argv[4] == "v2"
report = {
    "server": "echo" if sys.argv[3] == "true" else "attnserve",
    "method": "ModelInfer" if v2 else "Attend",
    "calls": calls,
    "instructions_per_call": per_call("PROGRAM TOTALS"),
    "malloc_per_call": per_call("malloc.c:malloc "),
    "free_per_call": per_call("malloc.c:free "),
    "deserialize_per_call": per_call("::Deserialize("),
}
if sys.argv[3] != "true":
    report.update({
        "handler_per_call": per_call("InferenceService::ModelInfer(" if v2
                                     else "AttentionService::HandleUnary<"),
        "decode_per_call": per_call("AttendKind::Decode("),
        "engine_run_per_call": per_call("Engine::Run("),
        "onednn_execute_per_call": per_call("dnnl_primitive_execute"),
        "prepare_response_per_call": per_call("PrepareResponse("),
    })
print(json.dumps(report))
EOF
