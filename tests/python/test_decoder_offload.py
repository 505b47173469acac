"""attnserve.torch.KVCache against PyTorch's attention, and examples/decoder_offload.py
(a Llama-shaped decoder generating with local and offloaded attention) at a tiny size."""

import importlib.util
import json
import math
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F

import attnserve
from attnserve.torch import KVCache
from channel_steps import OK_STEPS
from conftest import SOURCE_DIR, free_port
from reference import attention

EXAMPLE = SOURCE_DIR / "examples" / "decoder_offload.py"
TINY = ["--layers=2", "--hidden=64", "--heads=4", "--kv-heads=2", "--prompt=16",
        "--new-tokens=8", "--batch=2"]
LAYERS, HQ, HKV, D = 2, 4, 2, 8


def load_example():
    spec = importlib.util.spec_from_file_location("decoder_offload", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sdpa(q, k, v, window=None, sinks=0):
    """SDPA of q [1, Hq, T, D] over a sequence's whole cache k, v [1, Hkv, L, D],
    causal bottom-right (GQA by repeating kv heads); with `window`, query i sees
    only the keys in [i - window + 1, i] and the first `sinks` (a sink + window
    session). torch.nn.functional's scaled_dot_product_attention where torch has
    it (>= 2.0), else its math in float64."""
    hq, t, length = q.shape[1], q.shape[2], k.shape[2]
    group = hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    pos = torch.arange(t)[:, None] + (length - t)
    j = torch.arange(length)[None, :]
    mask = j <= pos
    if window is not None:
        mask &= (j > pos - window) | (j < sinks)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q64, k64, v64 = q.double(), k.double(), v.double()
    scores = (q64 @ k64.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v64).to(q.dtype)


class Mirror:
    """What a KVCache should hold and answer, one sequence at a time in PyTorch."""

    def __init__(self, batch, window=None, sinks=0):
        self.k = [[torch.zeros(1, HKV, 0, D) for _ in range(LAYERS)] for _ in range(batch)]
        self.v = [[torch.zeros(1, HKV, 0, D) for _ in range(LAYERS)] for _ in range(batch)]
        self.window, self.sinks = window, sinks

    def attend(self, layer, q, k, v):
        outs = []
        for b in range(q.shape[0]):
            self.k[b][layer] = torch.cat([self.k[b][layer], k[b:b + 1]], 2)
            self.v[b][layer] = torch.cat([self.v[b][layer], v[b:b + 1]], 2)
            outs.append(sdpa(q[b:b + 1], self.k[b][layer], self.v[b][layer],
                             self.window, self.sinks))
        return torch.cat(outs)

    def fork(self, index):
        self.k.append(list(self.k[index]))
        self.v.append(list(self.v[index]))

    def fork_all(self, parents):
        self.k = [list(self.k[p]) for p in parents]
        self.v = [list(self.v[p]) for p in parents]

    def truncate(self, b, tokens):
        self.k[b] = [x[:, :, :tokens] for x in self.k[b]]
        self.v[b] = [x[:, :, :tokens] for x in self.v[b]]


def qkv(batch, t, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, HQ, t, D, generator=g),
            torch.randn(batch, HKV, t, D, generator=g),
            torch.randn(batch, HKV, t, D, generator=g))


def step(cache, mirror, t, seed):
    """One token position (or a prefill of t) through every layer of both."""
    for layer in range(LAYERS):
        q, k, v = qkv(len(mirror.k), t, seed + layer)
        out = cache.attend(layer, q, k, v)
        assert out.shape == (len(mirror.k), HQ, t, D) and out.dtype == torch.float32
        torch.testing.assert_close(out, mirror.attend(layer, q, k, v), rtol=1e-5,
                                   atol=1e-5)


def new_cache(client, **kw):
    return KVCache(client, num_layers=LAYERS, num_kv_heads=HKV, head_dim=D, **kw)


class CountingTransport:
    """The injectable transport: counts calls and the sequences of each."""

    def __init__(self, client):
        self.client = client
        self.calls = []

    def attend_sessions(self, layer, parts, **kw):
        self.calls.append((layer, len(parts), [int(p[1].shape[0]) for p in parts]))
        return self.client.attend_sessions(layer, parts, **kw)


# -- the example ----------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--prefill-chunk=5", "--tied"], ["--stream"]])
def test_example_generates_the_same_tokens(server, extra):
    example = load_example()
    r = example.run(example.parse_args([f"--target={server.target}", *TINY, *extra]))
    assert r["tokens_identical"], r
    assert r["max_logit_diff"] <= 1e-4, r
    assert r["ok"]
    assert len(r["tokens"]) == 2 and len(r["tokens"][0]) == 8


def test_example_with_an_int8_cache_stays_close(server):
    # Quantized keys and values: the logits move by about 1e-3, not more, and this
    # model's greedy tokens stay the same.
    example = load_example()
    r = example.run(example.parse_args([f"--target={server.target}", *TINY,
                                        "--storage-dtype=int8", "--tolerance=0.02"]))
    assert r["storage_dtype"] == "int8"
    assert r["tokens_identical"] and r["ok"], r
    assert 1e-6 < r["max_logit_diff"] <= 0.02, r


@pytest.mark.parametrize("flags, option", [
    (["--shared_memory"], "--same-host"),
    (["--step_channel_listen=127.0.0.1:0"], "--tcp-channel")], ids=["shared_memory", "tcp"])
def test_example_through_a_step_channel(start_server, flags, option):
    srv = start_server(*flags, "--step_channels=1", "--metrics_listen=127.0.0.1:0")
    example = load_example()
    r = example.run(example.parse_args([f"--target={srv.target}", *TINY, option]))
    assert r["tokens_identical"] and r["max_logit_diff"] <= 1e-4 and r["ok"], r
    assert len(r["tokens"]) == 2 and len(r["tokens"][0]) == 8
    # Every layer call went through the channel: warm-up (prefill, one step) and run
    # (prefill, 7 steps), 2 layers each.
    steps = srv.metric(OK_STEPS)
    assert steps == 2 * (2 + 8), srv.log()


def test_the_examples_channel_holds_a_batchs_whole_prefill(start_server):
    # 8 sequences × 160 prompt tokens: a prefill call of about 640 KiB each way,
    # past the slots of the default 1 MiB region; the example sizes its own.
    srv = start_server("--shared_memory", "--step_channels=1")
    example = load_example()
    args = [a for a in TINY if not a.startswith(("--prompt", "--batch", "--new-tokens"))]
    r = example.run(example.parse_args([f"--target={srv.target}", *args, "--prompt=160",
                                        "--batch=8", "--new-tokens=2", "--same-host"]))
    assert r["tokens_identical"] and r["ok"], r


def test_example_command_line_json(server):
    done = subprocess.run([sys.executable, str(EXAMPLE), f"--target={server.target}",
                           *TINY, "--threads=1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["tokens_identical"] is True and r["max_logit_diff"] <= 1e-4
    assert r["layers"] == 2 and r["batch"] == 2 and r["threads"] == 1
    assert r["offloaded_ms_per_token"] > 0 and r["ratio"] > 0


# -- KVCache ----------------------------------------------------------------------------
def test_prefill_in_chunks_and_decode_match_sdpa_with_gqa(client):
    transport = CountingTransport(client)
    with new_cache(client, prefill_chunk=4, transport=transport) as cache:
        mirror = Mirror(3)
        step(cache, mirror, 10, seed=1)          # prefill: chunks of 4, 4, 2
        assert cache.batch_size == 3 and cache.lengths(0) == cache.lengths(1) == [10] * 3
        for i in range(4):                       # decode steps
            step(cache, mirror, 1, seed=100 + 10 * i)
        step(cache, mirror, 3, seed=200)         # several tokens at once (verification)
        assert cache.lengths(1) == [17] * 3
        infos = [s.info() for s in cache.sessions]
        assert all(i.layer_tokens == (17, 17) for i in infos)
        assert all(i.shape.num_kv_heads == HKV and i.shape.head_dim == D for i in infos)


def test_a_sink_and_window_cache_matches_its_mask_at_flat_memory(start_server):
    """window_tokens, sink_tokens: StreamingLLM's sessions, each layer call equal to
    attention over the whole sequence with the window's and the sinks' mask, while the
    server (blocks of 8 tokens) drops the middle."""
    window, sinks = 12, 2
    srv = start_server("--kv_block_tokens=8")
    with attnserve.Client(srv.target, timeout=30) as c, \
            new_cache(c, window_tokens=window, sink_tokens=sinks, prefill_chunk=16) as cache:
        mirror = Mirror(2, window, sinks)
        step(cache, mirror, 30, seed=1)          # prefill: chunks of 16 and 14
        held = []
        for i in range(40):                      # decode steps
            step(cache, mirror, 1, seed=100 + 10 * i)
            held.append(cache.sessions[0].info().kv_bytes)
        assert cache.lengths(0) == [70, 70]
        shape = cache.sessions[0].info().shape
        assert (shape.window_tokens, shape.sink_tokens) == (window, sinks)
        # Per layer the sinks' block and the window's 12 tokens over at most 3 blocks.
        block = 8 * HKV * 2 * D * 4
        assert max(held) <= LAYERS * 4 * block


def test_a_prefill_past_the_message_limit_goes_in_chunks_that_fit(start_server):
    # 3 sequences x 2000 tokens of 768 bytes a token: 1.5 MiB in one call, past a
    # server that takes messages of at most 1.0625 MiB.
    limit = (1 << 20) + (64 << 10)
    srv = start_server(f"--max_message_bytes={limit}")
    client = attnserve.Client(srv.target, timeout=30)
    transport = CountingTransport(client)
    with new_cache(client, prefill_chunk=4096, transport=transport) as cache:
        mirror = Mirror(3)
        step(cache, mirror, 2000, seed=1)
        per_layer = [c for c in transport.calls if c[0] == 0]
        assert len(per_layer) == 2 and sum(c[2][0] for c in per_layer) == 2000
        assert all(c[2][0] * 3 * (HQ * D + HKV * 2 * D) * 4 < limit for c in per_layer)
        step(cache, mirror, 1, seed=2)
    client.close()


def test_softcap_for_the_model_and_sinks_per_layer(client):
    # Gemma 2 soft-caps every layer alike; gpt-oss's sinks are a parameter of each layer.
    sinks = [torch.nn.Parameter(torch.tensor([0.5, -1.0, 1.5, 0.0]) + layer)
             for layer in range(LAYERS)]
    transport = CountingTransport(client)
    keys, values = [None] * LAYERS, [None] * LAYERS
    with new_cache(client, prefill_chunk=4, softcap=1.5, transport=transport) as cache:
        for t, seed in ((6, 10), (1, 20), (2, 30)):  # a chunked prefill, then decoding
            for layer in range(LAYERS):
                q, k, v = qkv(2, t, seed + layer)
                keys[layer] = k if keys[layer] is None else torch.cat([keys[layer], k], 2)
                values[layer] = v if values[layer] is None else torch.cat([values[layer], v], 2)
                out = cache.attend(layer, q, k, v, sinks=sinks[layer])
                want = attention(q, keys[layer], values[layer], is_causal=True,
                                 alignment="bottom_right", softcap=1.5, sinks=sinks[layer])[0]
                torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    assert len(transport.calls) == LAYERS * (2 + 1 + 1)


def test_t5_relative_bias_for_the_model(client):
    # T5's decoder computes its position bias in the first layer and adds it in every
    # layer, and scales no scores: one RelativeBias and scale=1.0 for the whole cache.
    weight = torch.nn.Parameter(torch.randn(16, HQ, generator=torch.Generator().manual_seed(4)))
    rb = attnserve.RelativeBias(weight.T, 16, 12)   # T5's weight [num_buckets, Hq], transposed
    transport = CountingTransport(client)
    keys, values = [None] * LAYERS, [None] * LAYERS
    with new_cache(client, prefill_chunk=8, scale=1.0, relative_bias=rb,
                   transport=transport) as cache:
        for t, seed in ((20, 10), (1, 20), (1, 30), (3, 40)):  # past max_distance 12
            for layer in range(LAYERS):
                q, k, v = qkv(2, t, seed + layer)
                keys[layer] = k if keys[layer] is None else torch.cat([keys[layer], k], 2)
                values[layer] = v if values[layer] is None else torch.cat([values[layer], v], 2)
                out = cache.attend(layer, q, k, v)
                want = attention(q, keys[layer], values[layer], is_causal=True,
                                 alignment="bottom_right", scale=1.0, relative_bias=rb)[0]
                torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    assert len(transport.calls) == LAYERS * (3 + 1 + 1 + 1)
    with pytest.raises(attnserve.InvalidArgument, match=r"^relative_bias.table: shape "
                       r"\[16, 4\] is not \[Hq, num_buckets = 16\] \(T5's"):
        new_cache(client, relative_bias=attnserve.RelativeBias(weight, 16, 12))


def test_a_step_stream_as_transport(client):
    with client.session_stream() as steps:
        transport = CountingTransport(steps)
        with new_cache(client, prefill_chunk=4, transport=transport) as cache:
            mirror = Mirror(3)
            step(cache, mirror, 6, seed=5)
            for i in range(3):
                step(cache, mirror, 1, seed=300 + 10 * i)
            cache.fork(1)
            mirror.fork(1)
            cache.truncate(6, index=0)
            mirror.truncate(0, 6)
            step(cache, mirror, 2, seed=400)
        assert len(transport.calls) == LAYERS * (2 + 3 + 1)


def test_each_layer_call_is_one_rpc_for_the_batch(client):
    transport = CountingTransport(client)
    with new_cache(client, prefill_chunk=4, transport=transport) as cache:
        assert cache.transport is transport
        step(cache, Mirror(3), 10, seed=3)
        # One call per layer and chunk, every call carrying all 3 sequences.
        assert transport.calls == [(layer, 3, [n] * 3) for layer in range(LAYERS)
                                   for n in (4, 4, 2)]
        del transport.calls[:]
        q, k, v = qkv(3, 1, 4)
        cache.attend(0, q, k, v)
        cache.attend(1, q, k, v)
        assert transport.calls == [(0, 3, [1, 1, 1]), (1, 3, [1, 1, 1])]
    # The default transport is the client.
    assert new_cache(client).transport is client


def test_fork_then_divergent_continuations_match_independent_sequences(client):
    with new_cache(client) as cache:
        mirror = Mirror(2)
        step(cache, mirror, 6, seed=10)
        assert cache.fork(0) == 2                # a beam of sequence 0
        mirror.fork(0)
        assert cache.batch_size == 3 and cache.lengths() == [6, 6, 6]
        forked = cache.sessions[2]
        assert forked.created_info.parent_id == cache.sessions[0].session_id
        for i in range(3):                       # every sequence gets its own tokens
            step(cache, mirror, 1, seed=20 + 10 * i)
        # Beam reordering: new batch [1, 1, 2, 0] of the old sequences; 1 is forked.
        old = cache.sessions
        assert cache.fork_all([1, 1, 2, 0]) == 4
        mirror.fork_all([1, 1, 2, 0])
        now = cache.sessions
        assert now[0] is old[1] and now[2] is old[2] and now[3] is old[0]
        assert now[1].created_info.parent_id == old[1].session_id
        for i in range(2):
            step(cache, mirror, 1, seed=60 + 10 * i)
        # Beams pruned: the sequences not kept are closed on the server.
        dropped = cache.sessions[0]
        cache.fork_all([3, 1])
        mirror.fork_all([3, 1])
        with pytest.raises(attnserve.NotFound):
            dropped.info()
        step(cache, mirror, 2, seed=90)


def test_truncate_then_reappend_matches_the_reference(client):
    with new_cache(client) as cache:
        mirror = Mirror(3)
        step(cache, mirror, 8, seed=30)
        step(cache, mirror, 3, seed=40)          # 3 speculative tokens each
        cache.truncate([11, 10, 9])              # per sequence: all, 2 or 1 accepted
        mirror.truncate(1, 10)
        mirror.truncate(2, 9)
        assert cache.lengths() == cache.lengths(1) == [11, 10, 9]
        step(cache, mirror, 1, seed=45)          # one batch of three lengths
        cache.truncate(10)                       # every sequence
        for b in range(3):
            mirror.truncate(b, 10)
        assert cache.lengths() == [10, 10, 10]
        cache.truncate(5, index=2)               # one sequence rewinds further
        mirror.truncate(2, 5)
        assert cache.lengths() == [10, 10, 5]
        assert [s.info().layer_tokens for s in cache.sessions] == [(10, 10)] * 2 + [(5, 5)]
        step(cache, mirror, 2, seed=50)          # re-append at each sequence's position
        step(cache, mirror, 1, seed=60)
        assert cache.lengths() == [13, 13, 8]


def test_close_ends_every_session_and_the_cache_starts_again(client):
    cache = new_cache(client)
    step(cache, Mirror(2), 4, seed=70)
    ids = [s.session_id for s in cache.sessions]
    cache.fork(1)
    ids.append(cache.sessions[2].session_id)
    cache.close()
    assert cache.batch_size is None
    for sid in ids:
        with pytest.raises(attnserve.NotFound, match="closed"):
            client.session(sid).info()
    # Used again: a new batch of new sessions.
    with cache:
        step(cache, Mirror(2), 3, seed=80)
        again = [s.session_id for s in cache.sessions]
        assert not set(again) & set(ids)
        assert [s.info().layer_tokens for s in cache.sessions] == [(3, 3), (3, 3)]
    for sid in again:                            # the with block closed them
        with pytest.raises(attnserve.NotFound):
            client.session(sid).info()
    # reset(batch_size) is a new batch too; sessions are created on first use.
    cache.reset(batch_size=3)
    assert cache.sessions == [None, None, None]
    step(cache, Mirror(3), 2, seed=90)
    cache.close()


def test_shapes_are_checked_before_any_call(client):
    transport = CountingTransport(client)
    with new_cache(client, batch_size=2, transport=transport) as cache:
        q, k, v = qkv(3, 1, 1)
        with pytest.raises(ValueError, match="batch 3"):
            cache.attend(0, q, k, v)
        q, k, v = qkv(2, 1, 1)
        with pytest.raises(ValueError, match="layer"):
            cache.attend(LAYERS, q, k, v)
        with pytest.raises(ValueError, match="k: expected"):
            cache.attend(0, q, k[:, :1], v)
        assert transport.calls == [] and cache.sessions == [None, None]
    with pytest.raises(TypeError, match="attend_sessions"):
        new_cache(client, transport=object())


class FailingAfterAppend(CountingTransport):
    """Makes the call, then reports it failed: what a step that fails after its
    appends (a full queue, its deadline) looks like to the cache."""

    fail_next = False

    def attend_sessions(self, layer, parts, **kw):
        out = super().attend_sessions(layer, parts, **kw)
        if self.fail_next:
            self.fail_next = False
            raise attnserve.Unavailable("queue is full")
        return out


def test_a_call_that_failed_after_its_appends_leaves_the_cache_in_step(client):
    transport = FailingAfterAppend(client)
    with new_cache(client, transport=transport) as cache:
        mirror = Mirror(2)
        step(cache, mirror, 5, seed=1)
        q, k, v = qkv(2, 1, seed=7)
        transport.fail_next = True
        with pytest.raises(attnserve.Unavailable):
            cache.attend(0, q, k, v)
        # The server kept the token: the cache follows it, so the next call's
        # positions are right (a stale count would be refused as an overlap).
        assert cache.lengths(0) == [6, 6]
        mirror.attend(0, q, k, v)  # what the server holds now
        q2, k2, v2 = qkv(2, 1, seed=8)
        torch.testing.assert_close(cache.attend(0, q2, k2, v2),
                                   mirror.attend(0, q2, k2, v2), rtol=1e-5, atol=1e-5)


def _wait_serving(client, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if client.health() == "SERVING":
                return
        except attnserve.Error:
            pass
        assert time.monotonic() < deadline, "the restarted server never answered"
        time.sleep(0.1)


def test_sessions_lost_with_their_server_are_created_again_through_on_lost(start_server):
    port = free_port()
    first = start_server(port=port)
    client = attnserve.Client(f"127.0.0.1:{port}", timeout=30)
    mirror = Mirror(2)
    asked = []

    def on_lost(index, tokens):  # what a model recomputes from its token ids
        asked.append((index, tokens))
        return [(mirror.k[index][layer][0], mirror.v[index][layer][0])
                for layer in range(LAYERS)]

    with new_cache(client, on_lost=on_lost) as cache:
        step(cache, mirror, 5, seed=1)
        step(cache, mirror, 1, seed=11)
        # Layer 0 of the next token reaches the server; then it dies (kill -9)
        # and a new one takes its address, holding no session.
        q, k, v = qkv(2, 1, seed=21)
        torch.testing.assert_close(cache.attend(0, q, k, v), mirror.attend(0, q, k, v),
                                   rtol=1e-5, atol=1e-5)
        first.signal(signal.SIGKILL)
        first.proc.wait(30)
        start_server(port=port)
        _wait_serving(client)
        q, k, v = qkv(2, 1, seed=22)
        torch.testing.assert_close(cache.attend(1, q, k, v), mirror.attend(1, q, k, v),
                                   rtol=1e-5, atol=1e-5)
        # Both sequences asked once, with the most tokens a layer held (layer 0's
        # 7; layer 1 was re-sent its 6, then took the new token).
        assert sorted(asked) == [(0, 7), (1, 7)]
        assert cache.recovered == 2
        assert cache.lengths(0) == [7, 7] and cache.lengths(1) == [7, 7]
        step(cache, mirror, 1, seed=31)
    client.close()


def test_without_on_lost_a_lost_session_raises_not_found(client):
    with new_cache(client) as cache:
        mirror = Mirror(1)
        step(cache, mirror, 3, seed=1)
        cache.sessions[0].close()  # gone behind the cache's back
        q, k, v = qkv(1, 1, seed=2)
        with pytest.raises(attnserve.NotFound, match="was closed"):
            cache.attend(0, q, k, v)
        assert cache.recovered == 0


def test_on_lost_must_return_every_layer_and_enough_tokens(client):
    with new_cache(client, on_lost=lambda i, n: []) as cache:
        step(cache, Mirror(1), 3, seed=1)
        cache.sessions[0].close()
        q, k, v = qkv(1, 1, seed=2)
        with pytest.raises(ValueError, match="on_lost: returned 0 layers"):
            cache.attend(0, q, k, v)
    short = [(torch.zeros(HKV, 1, D), torch.zeros(HKV, 1, D))] * LAYERS
    with new_cache(client, on_lost=lambda i, n: short) as cache:
        step(cache, Mirror(1), 3, seed=1)
        cache.sessions[0].close()
        with pytest.raises(ValueError, match="holds 1 tokens, the cache had 3"):
            cache.attend(0, q, k, v)
    with pytest.raises(TypeError, match="on_lost: expected a callable"):
        new_cache(client, on_lost=3)


@pytest.mark.parametrize("tcp", [False, True], ids=["shared_memory", "tcp"])
def test_a_step_channel_takes_layer_calls_as_bytes_answering_as_unary_calls(start_server,
                                                                            tcp):
    # Through a step channel KVCache writes each call's bytes itself (StepCodec),
    # not through attend_sessions; the answers are the unary calls' to the bit.
    srv = start_server("--shared_memory", "--step_channels=1",
                       "--step_channel_listen=127.0.0.1:0")
    sinks = [torch.tensor([0.5, -1.0, 1.5, 0.0]) + layer for layer in range(LAYERS)]
    with attnserve.Client(srv.target, timeout=60) as c, c.step_channel(tcp=tcp) as channel:
        general = channel.attend_sessions

        def not_taken(*args, **kw):
            raise AssertionError("the step went through attend_sessions")

        channel.attend_sessions = not_taken
        for dtype, storage in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
            kw = {"prefill_chunk": 4, "softcap": 2.0, "storage_dtype": storage}
            with new_cache(c, transport=channel, **kw) as fast, new_cache(c, **kw) as unary:
                for t, seed in ((6, 10), (1, 20), (3, 30)):  # a chunked prefill, then steps
                    for layer in range(LAYERS):
                        q, k, v = (x.to(dtype) for x in qkv(2, t, seed + layer))
                        got = fast.attend(layer, q, k, v, sinks=sinks[layer])
                        assert got.dtype == dtype and got.shape == (2, HQ, t, D)
                        assert torch.equal(got, unary.attend(layer, q, k, v,
                                                             sinks=sinks[layer]))
                q = qkv(2, 2, 99)[0].to(dtype)  # attending without appending
                assert torch.equal(fast.attend(1, q), unary.attend(1, q))
                assert fast.lengths(1) == unary.lengths(1) == [10, 10]
        # Tensors the bytes path does not take go the general way, with its checks.
        channel.attend_sessions = general
        with new_cache(c, transport=channel) as fast:
            q, k, v = (x.double() for x in qkv(1, 1, 7))
            with pytest.raises(attnserve.InvalidArgument,
                               match=r"^sessions\[0\].query.dtype: float64 is not supported"):
                fast.attend(0, q, k, v)
