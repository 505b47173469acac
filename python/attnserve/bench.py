"""The Python client's own cost per call, against attnctl bench on the same server.

    python -m attnserve.bench --target=HOST:PORT --attnctl=build/client/attnctl
    python -m attnserve.bench --server=build/server/attnserve --attnctl=build/client/attnctl

Each round runs `attnctl bench` (C++, closed loop, one call outstanding) for
--seconds, then Client.attend in a closed loop for as long, on the same tensors
shape, so both see the same machine state; the machine is shared, so rounds
alternate and the report gives medians over rounds. The client's own overhead
is what the package adds to a call in Python: converting the tensors and
building the request, serializing it, parsing the response and converting the
output (the phases gRPC's C core does not do), timed on the same tensors in the
same round. The criterion (--max_overhead, default 15 %) is that overhead over
the C++ round trip. Each round also times the first call of --first_calls new
Clients (connecting, GetServerInfo and the call), reported against the warm p50.
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

from . import _codec
from .client import Client
from .v1 import attention_pb2 as pb


def _attnctl_round(attnctl, target, a, seconds):
    out = subprocess.run(
        [attnctl, "bench", f"--target={target}", f"--batch={a.batch}", f"--heads={a.heads}",
         f"--lq={a.lq}", f"--lk={a.lk}", f"--dim={a.dim}", f"--dtype={a.dtype}",
         f"--duration={seconds}s", "--warmup=0.5s", "--output_format=json",
         "--progress=false"], check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    return report["latency_us"]["p50"], report["latency_us"]["mean"], report["requests"]


def _python_round(client, q, k, v, seconds):
    for _ in range(20):
        client.attend(q, k, v)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        client.attend(q, k, v)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6, statistics.mean(times) * 1e6, len(times)


def _first_calls(target, q, k, v, n, retain_heap):
    """Median time (µs) of a new Client's first attend: its connection,
    GetServerInfo and the call."""
    times = []
    for _ in range(n):
        with Client(target, timeout=60, retain_heap=retain_heap) as client:
            t = time.perf_counter()
            client.attend(q, k, v)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def _phases(q, k, v, n):
    """Median µs of each phase the package runs per call, on these tensors."""
    req, kind = _codec.attend_request(q, k, v)
    response = pb.AttendResponse()
    response.output.dtype = req.query.dtype
    response.output.shape[:] = list(q.shape[:3]) + [v.shape[3]]
    response.output.data = req.query.data[: int(np.prod(response.output.shape)) * 4]
    wire = response.SerializeToString()

    def timed(f):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e6

    return {
        "build_us": timed(lambda: _codec.attend_request(q, k, v)),
        "serialize_us": timed(req.SerializeToString),
        "parse_us": timed(lambda: pb.AttendResponse.FromString(wire)),
        "decode_us": timed(lambda: _codec.decode_attend(response, kind, False)),
    }


def _cpu():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return {k: fields[k].strip() for k in ("Model name", "CPU(s)", "Thread(s) per core")
                if k in fields}
    except OSError:
        return {"Model name": platform.processor()}


def _start_server(binary, *flags):
    proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--metrics_listen=",
                             "--workers=1", *flags], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if " port=" in line:
            return proc, f"127.0.0.1:{int(line.split(' port=')[1].split()[0])}"
    raise RuntimeError(f"{binary} exited with {proc.wait()} before listening")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnserve.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="a running attnserve, host:port")
    where.add_argument("--server", help="start this attnserve binary (1 worker) instead")
    p.add_argument("--attnctl", required=True, help="the attnctl binary (C++ baseline)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--lq", type=int, default=128)
    p.add_argument("--lk", type=int, default=128)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--max_overhead", type=float, default=0.15)
    p.add_argument("--first_calls", type=int, default=5,
                   help="new Clients per round whose first call is timed")
    p.add_argument("--no_retain_heap", action="store_true",
                   help="Client(retain_heap=False): glibc's default thresholds")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args(argv)

    proc = None
    target = a.target
    if a.server:
        proc, target = _start_server(a.server)
    try:
        np_dtype = np.float32 if a.dtype == "f32" else np.float16
        rng = np.random.default_rng(0)
        q = rng.uniform(-1, 1, (a.batch, a.heads, a.lq, a.dim)).astype(np_dtype)
        k = rng.uniform(-1, 1, (a.batch, a.heads, a.lk, a.dim)).astype(np_dtype)
        v = rng.uniform(-1, 1, (a.batch, a.heads, a.lk, a.dim)).astype(np_dtype)
        rounds = []
        with Client(target, timeout=60, retain_heap=not a.no_retain_heap) as client:
            for _ in range(a.rounds):
                c_p50, c_mean, c_n = _attnctl_round(a.attnctl, target, a, a.seconds)
                py_p50, py_mean, py_n = _python_round(client, q, k, v, a.seconds)
                first = _first_calls(target, q, k, v, a.first_calls, not a.no_retain_heap)
                phases = _phases(q, k, v, 300)
                own = sum(phases.values())
                rounds.append(dict(attnctl_p50_us=c_p50, attnctl_mean_us=c_mean,
                                   attnctl_calls=c_n, python_p50_us=py_p50,
                                   python_mean_us=py_mean, python_calls=py_n,
                                   first_call_us=first, own_us=own, **phases))
    finally:
        if proc:
            proc.terminate()
            proc.wait()

    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    ratio = med["own_us"] / med["attnctl_p50_us"]
    report = {
        "shape": f"B{a.batch} H{a.heads} Lq{a.lq} Lk{a.lk} D{a.dim} {a.dtype}",
        "rounds": rounds, "median": med,
        "own_overhead_of_cpp_round_trip": ratio,
        "own_overhead_of_python_round_trip": med["own_us"] / med["python_p50_us"],
        "python_round_trip_over_cpp": med["python_p50_us"] / med["attnctl_p50_us"],
        "first_call_over_python_p50": med["first_call_us"] / med["python_p50_us"],
        "max_overhead": a.max_overhead, "pass": ratio <= a.max_overhead,
        "retain_heap": not a.no_retain_heap,
        "cpu": _cpu(), "python": sys.version.split()[0],
        "grpcio": __import__("grpc").__version__, "numpy": np.__version__,
    }
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['shape']}, {a.rounds} rounds of {a.seconds:g} s, retain_heap "
              f"{'on' if report['retain_heap'] else 'off'}, medians:")
        print(f"  attnctl bench round trip p50   {med['attnctl_p50_us']:8.1f} us")
        print(f"  Client.attend round trip p50   {med['python_p50_us']:8.1f} us "
              f"({report['python_round_trip_over_cpp']:.2f}x)")
        print(f"  a new Client's first call      {med['first_call_us']:8.1f} us "
              f"({report['first_call_over_python_p50']:.2f}x the warm p50)")
        print(f"  client's own work per call     {med['own_us']:8.1f} us = build "
              f"{med['build_us']:.1f} + serialize {med['serialize_us']:.1f} + parse "
              f"{med['parse_us']:.1f} + decode {med['decode_us']:.1f}")
        print(f"  own work / C++ round trip      {100 * ratio:8.1f} %  "
              f"(limit {100 * a.max_overhead:.0f} %: {'pass' if report['pass'] else 'FAIL'})")
        print(f"  own work / Python round trip   "
              f"{100 * report['own_overhead_of_python_round_trip']:8.1f} %")
        print(f"  CPU: {report['cpu'].get('Model name', '?')}, "
              f"{report['cpu'].get('CPU(s)', '?')} CPUs")
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
