"""What the step channel suites (shared memory and TCP) share: twin sessions that
hold the same tokens, the inputs of a step, waiting for a server's metric, a
KVCache's layer calls over a channel against unary calls, the steps of a channel
whose server drains."""

import time

import pytest
import torch

import attnserve
from reference import random

HKV, HQ, D, LAYERS = 2, 4, 16, 2
OK_STEPS = 'attnserve_requests_total{code="OK",method="StepChannel"}'


def twin_sessions(client, name, prefill=5):
    """Two sessions holding the same tokens in every layer."""
    sessions = [client.create_session(f"{name}-{i}", num_kv_heads=HKV, head_dim=D,
                                      num_layers=LAYERS) for i in range(2)]
    for layer in range(LAYERS):
        k, v = random((prefill, HKV, D), seed=layer), random((prefill, HKV, D), seed=9 + layer)
        for s in sessions:
            s.append(layer, k, v, position=0)
    return sessions


def step_inputs(t, layer):
    seed = 1000 + 10 * t + layer
    return (random((1, HQ, D), seed=seed), random((1, HKV, D), seed=seed + 1),
            random((1, HKV, D), seed=seed + 2))


def wait_for(predicate, seconds=10):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def generate(cache, midway=None):
    """Layer calls of a batch of 2 through a KVCache: a chunked prefill, decode
    steps, a verification; the outputs. midway(), when given, runs after the
    prefill and the first step."""
    g = torch.Generator().manual_seed(5)
    outs = []
    for n, t in enumerate((6, 1, 1, 1, 3, 1)):
        if n == 2 and midway is not None:
            midway()
        for layer in range(LAYERS):
            q = torch.randn(2, HQ, t, D, generator=g)
            k, v = (torch.randn(2, HKV, t, D, generator=g) for _ in range(2))
            outs.append(cache.attend(layer, q, k, v))
    return outs


def check_kvcache_generates_as_over_unary_calls(client, open_channel):
    """generate() through a KVCache over the channel open_channel() opens equals
    generate() over unary calls, bit for bit."""
    from attnserve.torch import KVCache
    kw = dict(num_layers=LAYERS, num_kv_heads=HKV, head_dim=D, prefill_chunk=4)
    with KVCache(client, step_channel=False, **kw) as cache:
        want = generate(cache)
    with open_channel() as channel, KVCache(client, transport=channel, **kw) as cache:
        got = generate(cache)
        assert cache.lengths() == [13, 13]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def steps_until_closed(channel, session, seconds=20):
    """Steps `session` through `channel` while its server drains: steps answered
    meanwhile fail Unavailable, and once the server ends the channel the step
    raises and the channel is closed (the next raises ValueError). The messages
    of the refused steps."""
    refused = []
    deadline = time.monotonic() + seconds
    with pytest.raises(ValueError, match="step channel is closed"):
        while time.monotonic() < deadline:
            try:
                channel.attend_sessions(0, [(session, random((1, HQ, D)))])
            except attnserve.Unavailable as e:
                refused.append(e.message)
    return refused
