"""Attention in float64 with torch's own operations: the oracle of the parity tests.

The mask rules are docs/api.md's. torch.nn.functional.scaled_dot_product_attention
exists from torch 2.0; Debian 12 ships 1.13, so the tests compare against this
math and, where torch has it, against SDPA as well.
"""

import math

import numpy as np
import torch


def to_torch64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64)
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def relative_bucket(n, num_buckets, max_distance, bidirectional):
    """T5's bucket of relative positions n (int array; key minus query position) in
    NumPy: f32 arithmetic as in T5's _relative_position_bucket, the same formula
    (docs/api.md, RelativeBias) written apart from the tests' torch copy of T5's."""
    n = np.asarray(n, np.int64)
    if bidirectional:
        m = num_buckets // 2
        base, a = np.where(n > 0, m, 0), np.abs(n)
    else:
        m = num_buckets
        base, a = np.zeros_like(n), np.maximum(-n, 0)
    exact = m // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # a = 0: log(0), never used
        ratio = a.astype(np.float32) / np.float32(exact)
        large = (np.log(ratio) / np.float32(math.log(max_distance / exact))
                 * np.float32(m - exact))
        large = exact + np.nan_to_num(large, nan=0.0, neginf=0.0).astype(np.int64)
    return base + np.where(a < exact, a, np.minimum(large, m - 1))


def relative_bias_scores(relative_bias, hq, lq, lk, offset):
    """[Hq, Lq, Lk] float64: table[h, bucket(j - (i + offset))] of an
    attnserve.RelativeBias (table [Hq, num_buckets] or flat)."""
    rb = relative_bias
    table = to_torch64(rb.table).reshape(hq, rb.num_buckets)
    n = np.arange(lk)[None, :] - (np.arange(lq)[:, None] + offset)
    b = torch.from_numpy(relative_bucket(n, rb.num_buckets, rb.max_distance,
                                         rb.bidirectional))
    return table[:, b]


def attention(q, k, v, *, layout="BHLD", scale=None, attn_mask=None, is_causal=False,
              alignment="top_left", window=None, key_lengths=None, alibi_slopes=None,
              softcap=None, sinks=None, relative_bias=None, allowed=None, sink_tokens=0):
    """(output in the layout, weights [B, Hq, Lq, Lk]) in float64.

    softcap: each scaled score t becomes softcap·tanh(t/softcap) before the float
    mask and ALiBi are added. sinks: [Hq] logits, one more term exp(sinks[h]) in
    each softmax denominator of head h (a row's weights then sum to less than 1).
    relative_bias: an attnserve.RelativeBias, T5's bias added after softcap, at
    the relative position j - d(i) (d(i) as for the causal diagonal).
    allowed: an extra bool [B, Hq, Lq, Lk] (True = attend), ANDed in (block-sparse
    tests build theirs from the layout). sink_tokens: keys below it are exempt from
    the window's left edge."""
    q, k, v = to_torch64(q), to_torch64(k), to_torch64(v)
    if layout == "BLHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    group = hq // hkv
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores = scale * (q @ k.transpose(-1, -2))
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    o = lk - lq if alignment == "bottom_right" else 0
    i = torch.arange(lq).view(lq, 1)
    j = torch.arange(lk).view(1, lk)
    diag = i + o
    ok = torch.ones(b, hq, lq, lk, dtype=torch.bool)
    if is_causal:
        ok &= (j <= diag)
    if window is not None:
        left, right = window if isinstance(window, (tuple, list)) else (window, window)
        if left is not None:
            ok &= (j >= diag - left) | (j < sink_tokens)
        if right is not None:
            ok &= (j <= diag + right)
    if key_lengths is not None:
        kl = torch.as_tensor(np.asarray(key_lengths)).view(b, 1, 1, 1)
        ok &= (j.view(1, 1, 1, lk) < kl)
    if attn_mask is not None:
        m = attn_mask if isinstance(attn_mask, torch.Tensor) else torch.from_numpy(
            np.asarray(attn_mask))
        if m.dtype == torch.bool:
            ok &= m.expand(b, hq, lq, lk)
        else:
            scores = scores + m.to(torch.float64).expand(b, hq, lq, lk)
    if alibi_slopes is not None:
        slopes = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float64)).view(1, hq, 1, 1)
        scores = scores - slopes * (diag - j).abs().to(torch.float64)
    if relative_bias is not None:
        scores = scores + relative_bias_scores(relative_bias, hq, lq, lk, o)[None]
    if allowed is not None:
        ok &= allowed
    scores = scores.masked_fill(~ok, float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)  # rows with nothing to attend
    else:
        sink = to_torch64(sinks).view(1, hq, 1, 1)
        top = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)
        e = torch.exp(scores - top)  # masked keys: exp(-inf) = 0
        weights = e / (e.sum(dim=-1, keepdim=True) + torch.exp(sink - top))
    out = weights @ v
    if layout == "BLHD":
        out = out.transpose(1, 2)
    return out, weights


def weight_stats(weights):
    """(entropy -sum w ln w in nats, largest weight) of each row of weights
    [..., Lk] in float64; 0 and 0 for a row of zeros."""
    w = to_torch64(weights)
    logs = torch.where(w > 0, torch.log(w.clamp_min(1e-300)), torch.zeros_like(w))
    return -(w * logs).sum(dim=-1), w.amax(dim=-1) if w.shape[-1] else w.sum(dim=-1)


def random(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
