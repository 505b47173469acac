"""retain_heap is opt-in: importing attnserve and making clients with the default
leave the process's allocator alone; retain_heap=True applies glibc's thresholds.

Each case runs in a fresh interpreter and watches the allocator itself: a block
above glibc's mmap threshold is mmapped (mallinfo2's hblks grows by one while it
is held), one below it comes from the heap. retain_heap=True raises the
threshold to 32 MiB (attnserve/_memory.py).
"""

import os
import subprocess
import sys
import textwrap

import attnserve
from attnserve import _memory

PROBE = textwrap.dedent("""
    import asyncio, ctypes, sys
    import numpy as np

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
            "keepcost").split()]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def mmapped(size):
        # glibc raises its threshold to the size of a freed mmapped block, so each
        # probe is larger than the one before (and under retain_heap's 32 MiB).
        before = libc.mallinfo2().hblks
        p = libc.malloc(size)
        after = libc.mallinfo2().hblks
        libc.free(p)
        return after > before

    target = sys.argv[1]
    import attnserve
    from attnserve import _memory
    q = np.random.default_rng(0).standard_normal((1, 4, 64, 32)).astype(np.float32)
    with attnserve.Client(target, timeout=60) as c:
        c.attend(q, q, q)
    async def run():
        async with attnserve.AsyncClient(target, timeout=60) as c:
            await c.attend(q, q, q)
    asyncio.run(run())
    assert _memory._done is False, "a default client applied the heap thresholds"
    assert mmapped(8 << 20), "8 MiB did not come from mmap: the thresholds were changed"
    with attnserve.Client(target, timeout=60, retain_heap=True) as c:
        c.attend(q, q, q)
    assert _memory._done is True
    assert not mmapped(24 << 20), "retain_heap=True: 24 MiB still came from mmap"
    print("ok")
""")


def run_probe(server):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    result = subprocess.run([sys.executable, "-c", PROBE, server.target], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_default_clients_leave_the_allocator_alone_and_retain_heap_opts_in(server):
    run_probe(server)


def test_retain_heap_is_off_by_default():
    import inspect
    for cls in (attnserve.Client, attnserve.AsyncClient):
        assert inspect.signature(cls).parameters["retain_heap"].default is False


def test_retain_heap_applies_the_thresholds_on_glibc():
    # Debian's glibc: the call takes effect (this process's later tests are unaffected:
    # the thresholds only change where freed memory goes).
    assert _memory.retain_heap() is True
