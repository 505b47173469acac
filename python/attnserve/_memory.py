"""Keeps freed heap memory for reuse, as the server does (docs/operations.md,
"Threads and memory").

Every call allocates its request's and response's tensor bytes (MBs) and frees
them after. With glibc's defaults those buffers come from fresh mmap()s or are
trimmed back to the system on free, and each call page-faults them in again:
at B1 H8 L128 D64 f32 that doubled a call's round trip (1.7 ms against 0.85 ms
on the benchmark machine, docs/benchmarks.md). Raising the mmap and trim
thresholds makes buffers under 32 MiB come from the heap and stay there.

It is a process-wide setting, so it is opt-in: only Client(...,
retain_heap=True) (or AsyncClient) applies it; importing the package or making
a client with the default changes nothing. MALLOC_MMAP_THRESHOLD_ or
MALLOC_TRIM_THRESHOLD_ in the environment (the host's own tuning) wins: then
nothing is changed either.
"""

import ctypes
import os
import threading

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 1 << 30

_lock = threading.Lock()
_done = False


def retain_heap():
    """Applies the thresholds once per process; True when they are in effect."""
    global _done
    with _lock:
        if _done:
            return True
        if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
            return False
        try:
            mallopt = ctypes.CDLL(None).mallopt  # glibc; absent on musl and macOS
        except (OSError, AttributeError):
            return False
        _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
            mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
        return _done
