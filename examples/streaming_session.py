"""A sink + window session (StreamingLLM) over an endless stream: memory and step time
stay flat however many tokens are appended (docs/sessions.md, "Sink + window sessions").

    python3 examples/streaming_session.py --target=127.0.0.1:50051 --tokens=100000

Creates a session keeping each layer's first --sinks tokens and last --window tokens,
prefills the window, then appends one token per step with its query, and prints the
session's kv_bytes and the median round trip of the last --every steps every --every
tokens. Random keys, values and queries: the point is the cost, not the output.
"""

import argparse
import statistics
import time

import numpy as np

import attnserve


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--tokens", type=int, default=100000, help="tokens to append in all")
    p.add_argument("--window", type=int, default=4096)
    p.add_argument("--sinks", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--heads", type=int, default=32, help="query heads")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--every", type=int, default=10000, help="print every this many tokens")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    h, d = args.kv_heads, args.head_dim
    rows = []
    with attnserve.Client(args.target, timeout=60) as client, \
            client.create_session(num_kv_heads=h, head_dim=d, window_tokens=args.window,
                                  sink_tokens=args.sinks, max_tokens=1 << 40) as s:
        prefill = min(args.window, args.tokens)
        keys = rng.standard_normal((prefill, h, d), dtype=np.float32)
        s.append(0, keys, keys, position=0)
        q = rng.standard_normal((1, args.heads, d), dtype=np.float32)
        kv = rng.standard_normal((1, h, d), dtype=np.float32)
        times = []
        for t in range(prefill, args.tokens):
            start = time.perf_counter()
            s.attend(0, q, kv, kv, position=t)
            times.append(time.perf_counter() - start)
            if (t + 1) % args.every == 0 or t + 1 == args.tokens:
                info = s.info()
                p50 = 1e6 * statistics.median(times[-args.every:])
                rows.append((t + 1, info.kv_bytes, p50))
                print(f"tokens {t + 1}: kv_bytes {info.kv_bytes}, step p50 {p50:.0f} us",
                      flush=True)
    return rows


if __name__ == "__main__":
    main()
