#!/usr/bin/env python3
"""A small Llama-shaped decoder whose attention runs on attnserve.

The model is plain PyTorch (RMSNorm, grouped-query attention with RoPE, a SwiGLU
MLP, a tied or separate lm_head) with random, seeded weights: nothing is
downloaded. It generates greedily from a random prompt twice:

  local      attention in PyTorch over its own KV cache (float32, the math of
             scaled_dot_product_attention, causal with bottom-right alignment);
  offloaded  attention on the server through attnserve.torch.KVCache: one
             session per sequence, one call per layer for the whole batch
             (unary calls; --stream: a step stream; --same-host: a step
             channel in shared memory; --tcp-channel: a step channel on a TCP
             socket).

and prints whether the tokens are identical, the largest logit difference, the
time per generated token of each (one step of the whole batch; in brackets the
part spent in attention) and their ratio. The exit status is 1 when the
tokens differ or a logit differs by more than --tolerance.

    build/server/attnserve --port=50051 &
    python3 examples/decoder_offload.py --target=localhost:50051
    python3 examples/decoder_offload.py --layers=16 --hidden=256 --heads=4 \
        --kv-heads=1 --prompt=256 --json
"""

import argparse
import json
import math
import sys
import time
import uuid

import torch
import torch.nn.functional as F
from torch import nn

import attnserve
from attnserve.torch import KVCache


# -- the model ------------------------------------------------------------------------
class Config:
    def __init__(self, *, vocab=512, hidden=128, layers=4, heads=4, kv_heads=2,
                 intermediate=0, rope_theta=10000.0, eps=1e-5, tied=False):
        if hidden % heads:
            raise ValueError(f"--hidden {hidden} is not a multiple of --heads {heads}")
        if heads % kv_heads:
            raise ValueError(f"--heads {heads} is not a multiple of --kv-heads {kv_heads}")
        self.vocab, self.hidden, self.layers = vocab, hidden, layers
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        # Llama's 8/3 · hidden, rounded up to a multiple of 32.
        self.intermediate = intermediate or 32 * math.ceil(8 * hidden / 3 / 32)
        self.rope_theta, self.eps, self.tied = rope_theta, eps, tied


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rope:
    """Rotary position embedding (Llama's rotate-half form)."""

    def __init__(self, head_dim, theta):
        self.inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)

    def __call__(self, x, positions):           # x [B, H, T, D], positions [T]
        angles = positions.float()[:, None] * self.inv_freq[None, :]   # [T, D/2]
        emb = torch.cat((angles, angles), dim=-1)
        return x * emb.cos() + rotate_half(x) * emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        self.index, self.cfg = index, cfg
        d = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)

    def forward(self, x, positions, rope, cache):
        b, t, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        out = cache.attend(self.index, q, k, v)                 # [B, Hq, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg, index):
        super().__init__()
        self.input_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.attn = Attention(cfg, index)
        self.post_attention_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, rope, cache):
        x = x + self.attn(self.input_norm(x), positions, rope, cache)
        return x + self.mlp(self.post_attention_norm(x))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.embed.weight
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    def forward(self, tokens, start, cache):
        """tokens [B, T] at positions start .. start + T - 1 -> logits [B, T, vocab]."""
        positions = torch.arange(start, start + tokens.shape[1])
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions, self.rope, cache)
        return self.lm_head(self.norm(x))


def build_model(cfg, seed):
    torch.manual_seed(seed)
    model = Decoder(cfg).eval()
    if cfg.tied:  # N(0, 1) embeddings would make tied logits of size sqrt(hidden)
        with torch.no_grad():
            model.embed.weight.normal_(0.0, 1.0 / math.sqrt(cfg.hidden))
    return model


# -- local attention: the reference ----------------------------------------------------
class LocalKVCache:
    """The same interface as attnserve.torch.KVCache, in PyTorch: a preallocated
    cache per layer and float32 attention, causal with bottom-right alignment."""

    def __init__(self, num_layers):
        self.k = [None] * num_layers
        self.v = [None] * num_layers
        self.n = [0] * num_layers

    def attend(self, layer, q, k, v):
        b, hq, t, d = q.shape
        hkv = k.shape[1]
        n = self.n[layer]
        cache_k, cache_v = self.k[layer], self.v[layer]
        if cache_k is None or n + t > cache_k.shape[2]:
            size = max(2 * (n + t), 64)
            new_k = k.new_empty(b, hkv, size, d)
            new_v = v.new_empty(b, hkv, size, v.shape[-1])
            if n:
                new_k[:, :, :n] = cache_k[:, :, :n]
                new_v[:, :, :n] = cache_v[:, :, :n]
            self.k[layer], self.v[layer] = cache_k, cache_v = new_k, new_v
        cache_k[:, :, n:n + t] = k
        cache_v[:, :, n:n + t] = v
        self.n[layer] = length = n + t
        keys = cache_k[:, :, :length].unsqueeze(2)              # [B, Hkv, 1, L, D]
        values = cache_v[:, :, :length].unsqueeze(2)
        qg = q.reshape(b, hkv, hq // hkv, t, d)                  # head h -> kv head h // G
        scores = (qg @ keys.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if t > 1:  # bottom-right: new query i sits at position length - t + i
            i = torch.arange(t).view(t, 1)
            j = torch.arange(length).view(1, length)
            scores = scores.masked_fill(j > i + (length - t), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ values             # [B, Hkv, G, T, Dv]
        return out.reshape(b, hq, t, -1)

    def close(self):
        self.__init__(len(self.k))


# -- greedy generation ----------------------------------------------------------------
class Timed:
    """A cache whose attend calls are timed (the attention share of a step)."""

    def __init__(self, cache):
        self.cache, self.seconds = cache, 0.0

    def attend(self, layer, q, k, v):
        t = time.perf_counter()
        out = self.cache.attend(layer, q, k, v)
        self.seconds += time.perf_counter() - t
        return out


@torch.no_grad()
def generate(model, cache, prompt, new_tokens):
    """Greedy decoding: (tokens [B, new_tokens], logits [new_tokens, B, vocab],
    prefill seconds, decode seconds of the new_tokens - 1 steps, the part of them
    spent in cache.attend)."""
    t0 = time.perf_counter()
    logits = model(prompt, 0, cache)[:, -1]
    t1 = time.perf_counter()
    tokens, all_logits = [logits.argmax(-1)], [logits]
    position = prompt.shape[1]
    timed = Timed(cache)
    for _ in range(new_tokens - 1):
        logits = model(tokens[-1][:, None], position, timed)[:, -1]
        position += 1
        tokens.append(logits.argmax(-1))
        all_logits.append(logits)
    t2 = time.perf_counter()
    return torch.stack(tokens, 1), torch.stack(all_logits), t1 - t0, t2 - t1, timed.seconds


def compare(local_tokens, local_logits, remote_tokens, remote_logits):
    """(tokens identical, the largest logit difference over the steps whose inputs
    were identical: up to and including the first step that differs)."""
    same = bool(torch.equal(local_tokens, remote_tokens))
    steps = local_tokens.shape[1]
    if not same:
        differs = (local_tokens != remote_tokens).any(0).nonzero()
        steps = int(differs[0]) + 1
    diff = (local_logits[:steps] - remote_logits[:steps]).abs().max().item()
    return same, diff


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Greedy generation with a small Llama-shaped decoder, attention in "
                    "PyTorch and on attnserve; compares tokens, logits and time per token.")
    p.add_argument("--target", default="localhost:50051", help="the attnserve server")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4, help="query heads")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA)")
    p.add_argument("--intermediate", type=int, default=0,
                   help="MLP width (default 8/3 hidden rounded up to 32)")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--tied", action="store_true", help="lm_head shares the embedding")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens generated")
    p.add_argument("--batch", type=int, default=2, help="sequences")
    p.add_argument("--prefill-chunk", type=int, default=512,
                   help="prefill tokens per call and sequence")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0 = torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest logit difference allowed")
    p.add_argument("--storage-dtype", default="float32",
                   choices=["float32", "bfloat16", "float16", "int8"],
                   help="the sessions' KV storage (the local model keeps float32; "
                        "bfloat16, float16 and int8 round or quantize the cache, so "
                        "raise --tolerance for them)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--unary", action="store_true",
                     help="send the layer calls as the client's unary calls (by default "
                          "they go through a TCP step channel the cache opens when the "
                          "server runs on this host and offers one)")
    how.add_argument("--stream", action="store_true",
                     help="send the layer calls over one step stream "
                          "(client.session_stream())")
    how.add_argument("--same-host", action="store_true",
                     help="send the layer calls through a step channel in shared memory "
                          "(client.step_channel(); the server runs on this host with "
                          "--shared_memory --step_channels=N)")
    how.add_argument("--tcp-channel", action="store_true",
                     help="send the layer calls through a step channel on a TCP socket "
                          "(client.step_channel(tcp=True); the server runs with "
                          "--step_channels=N --step_channel_listen=HOST:PORT)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if args.new_tokens < 2:
        p.error("--new-tokens: at least 2 (one prefill, then decode steps)")
    return args


def channel_bytes(cfg, batch, chunk):
    """A step channel's region that holds the largest layer call (a prefill chunk
    of the whole batch, f32): the ring gives each way about half of it."""
    rows = batch * chunk
    request = rows * (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim * 4
    response = rows * cfg.heads * cfg.head_dim * 4
    return max(1 << 20, 2 * max(request, response) + (64 << 10))


def run(args, client=None):
    """Both generations; a dict of the results (what --json prints)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = Config(vocab=args.vocab, hidden=args.hidden, layers=args.layers,
                 heads=args.heads, kv_heads=args.kv_heads,
                 intermediate=args.intermediate, tied=args.tied)
    model = build_model(cfg, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, cfg.vocab, (args.batch, args.prompt), generator=gen)
    warm = prompt[:, :min(8, args.prompt)]

    own_client = client is None
    if own_client:
        client = attnserve.Client(args.target, timeout=args.timeout)
    steps = None
    try:
        # The sessions' names and routing key: the whole batch, and the stream or
        # channel, go to one replica behind a load balancer.
        prefix = f"decoder-{uuid.uuid4().hex[:12]}"
        transport = None  # KVCache's default: its own step channel, or the client
        if args.stream:
            transport = steps = client.session_stream(route_key=prefix)
        elif args.same_host:
            transport = steps = client.step_channel(
                size=channel_bytes(cfg, args.batch, min(args.prompt, args.prefill_chunk)),
                route_key=prefix)
        elif args.tcp_channel:
            transport = steps = client.step_channel(tcp=True, route_key=prefix)
        remote = KVCache(client, num_layers=cfg.layers, num_kv_heads=cfg.kv_heads,
                         head_dim=cfg.head_dim, storage_dtype=args.storage_dtype,
                         prefill_chunk=args.prefill_chunk, transport=transport,
                         step_channel=False if args.unary else None,
                         timeout=args.timeout, session_prefix=prefix)
        local = LocalKVCache(cfg.layers)
        # Warm-up (first-call costs of torch and of the connection), then the runs.
        for cache in (local, remote):
            generate(model, cache, warm, 2)
            cache.close()
        local_tokens, local_logits, local_prefill, local_decode, local_attn = generate(
            model, local, prompt, args.new_tokens)
        with remote:
            remote_tokens, remote_logits, remote_prefill, remote_decode, remote_attn = \
                generate(model, remote, prompt, args.new_tokens)
            through = type(remote.transport).__name__
    finally:
        if steps is not None:
            steps.close()
        if own_client:
            client.close()

    same, diff = compare(local_tokens, local_logits, remote_tokens, remote_logits)
    steps = args.new_tokens - 1
    local_ms = 1e3 * local_decode / steps
    remote_ms = 1e3 * remote_decode / steps
    return {
        "layers": cfg.layers, "hidden": cfg.hidden, "heads": cfg.heads,
        "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "vocab": cfg.vocab,
        "batch": args.batch, "prompt": args.prompt, "new_tokens": args.new_tokens,
        "storage_dtype": args.storage_dtype,
        "threads": torch.get_num_threads(),
        "transport": through,
        "tokens_identical": same, "max_logit_diff": diff,
        "local_prefill_ms": 1e3 * local_prefill, "offloaded_prefill_ms": 1e3 * remote_prefill,
        "local_ms_per_token": local_ms, "offloaded_ms_per_token": remote_ms,
        "ratio": remote_ms / local_ms,
        "local_attention_ms_per_token": 1e3 * local_attn / steps,
        "offloaded_attention_ms_per_token": 1e3 * remote_attn / steps,
        "ok": same and diff <= args.tolerance,
        "tokens": remote_tokens.tolist(),
    }


def main(argv=None):
    args = parse_args(argv)
    r = run(args)
    if args.json:
        print(json.dumps({k: v for k, v in r.items() if k != "tokens"}))
    else:
        print(f"decoder: {r['layers']} layers, hidden {r['hidden']}, heads "
              f"{r['heads']}/{r['kv_heads']} (head_dim {r['head_dim']}), vocab {r['vocab']}; "
              f"batch {r['batch']}, prompt {r['prompt']}, {r['new_tokens']} new tokens; "
              f"{r['threads']} torch threads; layer calls through {r['transport']}")
        print(f"tokens identical: {'yes' if r['tokens_identical'] else 'no'}")
        print(f"max logit difference: {r['max_logit_diff']:.3g}")
        for name in ("local", "offloaded"):
            print(f"{name + ':':10} prefill {r[name + '_prefill_ms']:8.1f} ms, "
                  f"{r[name + '_ms_per_token']:7.2f} ms/token (attention "
                  f"{r[name + '_attention_ms_per_token']:.2f})")
        print(f"ratio offloaded/local: {r['ratio']:.2f}")
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
