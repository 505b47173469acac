"""Client.attend through shared memory against the bytes path, on one server.

    python -m attnserve.bench_shm --server=build/server/attnserve [--rounds=3 --seconds=2]
    python -m attnserve.bench_shm --target=HOST:PORT      (a server with --shared_memory)

Closed loop, one call outstanding, at B1 H16 L2048 D64 f32 by default (24 MiB in,
8 MiB out). Each round runs every mode for --seconds, in an order flipped every
other round, so all see the same machine state; the report gives the median over
rounds of each mode's p50 (first checking that every mode returns the bytes
path's bits):

  bytes      attend(q, k, v): the tensors in the messages
  staged     attend(q, k, v, shared_memory=region): copied into the region for the
             call, the output copied out
  in_place   attend(qt, kt, vt, out=out) on region.put() tensors: references only,
             the output a view of the region (what attnctl bench --shm measures)
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

from .bench import _cpu, _start_server
from .client import Client

MODES = ("bytes", "staged", "in_place")


def _loop(call, seconds):
    for _ in range(3):
        call()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, len(times)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnserve.bench_shm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="a running attnserve with --shared_memory")
    where.add_argument("--server", help="start this attnserve binary (1 worker, "
                       "--shared_memory) instead")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)

    proc, target = (None, a.target) if a.target else _start_server(a.server,
                                                                     "--shared_memory")
    shape = (a.batch, a.heads, a.length, a.dim)
    rng = np.random.default_rng(0)
    q, k, v = (rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(3))
    rounds = []
    try:
        with Client(target, timeout=120, retain_heap=True) as client, \
                client.shared_memory(None, 8 * q.nbytes) as region:
            ref = client.attend(q, k, v)
            qt, kt, vt = region.put(q), region.put(k), region.put(v)
            out = region.empty(ref.shape)
            calls = {
                "bytes": lambda: client.attend(q, k, v),
                "staged": lambda: client.attend(q, k, v, shared_memory=region),
                "in_place": lambda: client.attend(qt, kt, vt, out=out),
            }
            for mode, call in calls.items():  # every path computes the same bits
                if not np.array_equal(call(), ref):
                    raise SystemExit(f"{mode}: the result differs from the bytes path")
            for i in range(a.rounds):  # the order flipped every other round
                order = MODES if i % 2 == 0 else MODES[::-1]
                rounds.append({m: _loop(calls[m], a.seconds) for m in order})
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    med = {m: statistics.median(r[m][0] for r in rounds) for m in MODES}
    report = {"shape": f"B{a.batch} H{a.heads} L{a.length} D{a.dim} f32",
              "p50_ms": med, "rounds": rounds, "cpu": _cpu(),
              "python": sys.version.split()[0]}
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['shape']}, concurrency 1, {a.rounds} rounds of {a.seconds:g} s per "
              "mode, median of the rounds' p50:")
        for m in MODES:
            calls_n = sum(r[m][1] for r in rounds)
            print(f"  {m:9s} {med[m]:8.2f} ms  ({med[m] / med['bytes']:.2f}x bytes, "
                  f"{calls_n} calls)")
        print(f"  CPU: {report['cpu'].get('Model name', '?')}, "
              f"{report['cpu'].get('CPU(s)', '?')} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
