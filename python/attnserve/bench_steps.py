"""A tiny session step's round trip from Python: unary calls, a step stream, step channels.

    python -m attnserve.bench_steps --server=build/server/attnserve [--rounds=3]
    python -m attnserve.bench_steps --target=HOST:PORT   (--shared_memory --step_channels=N
                                                          --step_channel_listen=HOST:0)

Closed loop, one step outstanding, on this host: a float32 session of --tokens
cached tokens (default Hq 4, Hkv 1, D 64, 256 tokens); each step appends one
token and attends its query (every 100 steps, untimed, the session is truncated
back to --tokens). Each round runs --steps steps of every mode, in an order
flipped every other round, each mode on a session of its own; the report gives
each mode's p50 and p90 per round and the median of the rounds (first checking
that every mode returns the unary call's bits):

  unary     Client.attend_sessions: one AttendSessions call a step
  stream    Client.session_stream(): a message of one AttendSessionsStream a step
  channel   Client.step_channel(): the step through a ring in shared memory
  tcp       Client.step_channel(tcp=True): the step as frames on a TCP socket

With --kvcache (needs torch), also a decoder's layer call: attnserve.torch.KVCache's
attend(0, q, k, v) with torch tensors (q [1, Hq, 1, D]), its transport

  kvcache_unary     the client (AttendSessions calls)
  kvcache_channel   a shared-memory step channel (the request's bytes written
                    directly: StepCodec)
  kvcache_tcp       a TCP step channel (likewise)
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

from .bench import _cpu, _start_server
from .client import Client

MODES = ("unary", "stream", "channel", "tcp")
KVCACHE_MODES = ("kvcache_unary", "kvcache_channel", "kvcache_tcp")
_TRUNCATE_EVERY = 100


def _percentiles(times):
    ts = sorted(times)
    return ts[len(ts) // 2] * 1e6, ts[int(len(ts) * 0.9)] * 1e6


def _run(steps, session, a, rng):
    """p50 and p90 (µs) of a.steps steps through `steps` (attend_sessions)."""
    times = []
    for i in range(a.steps):
        if i % _TRUNCATE_EVERY == 0:
            session.truncate(a.tokens)
        q = rng.standard_normal((1, a.heads, a.dim), dtype=np.float32)
        k, v = (rng.standard_normal((1, a.kv_heads, a.dim), dtype=np.float32)
                for _ in range(2))
        t = time.perf_counter()
        steps.attend_sessions(0, [(session, q, k, v)])
        times.append(time.perf_counter() - t)
    return _percentiles(times)


def _run_kvcache(cache, a, gen):
    """p50 and p90 (µs) of a.steps layer calls of `cache` (attnserve.torch.KVCache)."""
    import torch
    times = []
    for i in range(a.steps):
        if i % _TRUNCATE_EVERY == 0:
            cache.truncate(a.tokens)
        q = torch.randn(1, a.heads, 1, a.dim, generator=gen)
        k, v = (torch.randn(1, a.kv_heads, 1, a.dim, generator=gen) for _ in range(2))
        t = time.perf_counter()
        cache.attend(0, q, k, v)
        times.append(time.perf_counter() - t)
    return _percentiles(times)


def _kvcaches(client, through, a):
    """A prefilled KVCache of one sequence per KVCACHE_MODES, and a runner of each
    (first checking that they answer the same bits)."""
    import torch
    from .torch import KVCache
    gen = torch.Generator().manual_seed(0)
    prefill = [torch.randn(1, h, a.tokens, a.dim, generator=gen)
               for h in (a.heads, a.kv_heads, a.kv_heads)]
    caches = {}
    for m in KVCACHE_MODES:
        caches[m] = KVCache(client, num_layers=1, num_kv_heads=a.kv_heads, head_dim=a.dim,
                            transport=through[m.removeprefix("kvcache_")])
        caches[m].attend(0, *prefill)
    q = torch.randn(1, a.heads, 1, a.dim, generator=gen)
    ref = caches["kvcache_unary"].attend(0, q)
    for m in KVCACHE_MODES:
        if not torch.equal(caches[m].attend(0, q), ref):
            raise SystemExit(f"{m}: the result differs from the unary call's")
    runners = {m: (lambda c=caches[m]: _run_kvcache(c, a, gen)) for m in KVCACHE_MODES}
    return caches, runners


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m attnserve.bench_steps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="a running attnserve on this host with "
                       "--shared_memory --step_channels=N --step_channel_listen=HOST:0")
    where.add_argument("--server", help="start this attnserve binary (1 worker of 1 "
                       "thread, --shared_memory --step_channels=4 "
                       "--step_channel_listen=127.0.0.1:0) instead")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv_heads", type=int, default=1)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kvcache", action="store_true",
                   help="also KVCache's layer calls (needs torch)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    modes = MODES + (KVCACHE_MODES if a.kvcache else ())

    proc, target = (None, a.target) if a.target else _start_server(
        a.server, "--threads_per_worker=1", "--shared_memory", "--step_channels=4",
        "--step_channel_listen=127.0.0.1:0")
    rng = np.random.default_rng(0)
    rounds = []
    try:
        with Client(target, timeout=60) as client, client.session_stream() as stream, \
                client.step_channel() as channel, client.step_channel(tcp=True) as tcp:
            through = {"unary": client, "stream": stream, "channel": channel, "tcp": tcp}
            sessions = {}
            for m in MODES:
                s = client.create_session(num_kv_heads=a.kv_heads, head_dim=a.dim)
                s.append(0, rng.standard_normal((a.tokens, a.kv_heads, a.dim),
                                                dtype=np.float32),
                         rng.standard_normal((a.tokens, a.kv_heads, a.dim),
                                             dtype=np.float32))
                sessions[m] = s
            q = rng.standard_normal((1, a.heads, a.dim), dtype=np.float32)
            ref = client.attend_sessions(0, [(sessions["unary"], q)])[0]
            for m in MODES:  # every mode computes the same bits (the same cache)
                s = sessions["unary"]
                if not np.array_equal(through[m].attend_sessions(0, [(s, q)])[0], ref):
                    raise SystemExit(f"{m}: the result differs from the unary call's")
            runners = {m: (lambda m=m: _run(through[m], sessions[m], a, rng)) for m in MODES}
            caches = {}
            if a.kvcache:
                caches, kv_runners = _kvcaches(client, through, a)
                runners.update(kv_runners)
            for i in range(a.rounds):
                order = modes if i % 2 == 0 else modes[::-1]
                rounds.append({m: runners[m]() for m in order})
            for s in sessions.values():
                s.close()
            for c in caches.values():
                c.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    med = {m: {"p50_us": statistics.median(r[m][0] for r in rounds),
               "p90_us": statistics.median(r[m][1] for r in rounds)} for m in modes}
    report = {"shape": f"Hq{a.heads} Hkv{a.kv_heads} D{a.dim} {a.tokens} tokens f32",
              "steps": a.steps, "median": med, "rounds": rounds, "cpu": _cpu(),
              "python": sys.version.split()[0]}
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['shape']}, {a.rounds} rounds of {a.steps} steps per mode:")
        for m in modes:
            runs = ", ".join(f"{r[m][0]:.0f}/{r[m][1]:.0f}" for r in rounds)
            print(f"  {m:15s} p50 {med[m]['p50_us']:7.1f} us  p90 {med[m]['p90_us']:7.1f} us"
                  f"  (rounds p50/p90: {runs})")
        print(f"  CPU: {report['cpu'].get('Model name', '?')}, "
              f"{report['cpu'].get('CPU(s)', '?')} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
