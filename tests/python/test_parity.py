"""Client.attend against torch's attention math on the same tensors."""

import math

import numpy as np
import pytest
import torch

import attnserve
from reference import attention, random, relative_bucket, weight_stats

B, HQ, HKV, LQ, LK, D = 2, 4, 2, 5, 7, 16


def qkv(b=B, hq=HQ, hkv=HKV, lq=LQ, lk=LK, d=D, dv=None, layout="BHLD", seed=1):
    dv = d if dv is None else dv
    if layout == "BHLD":
        shapes = [(b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, dv)]
    else:
        shapes = [(b, lq, hq, d), (b, lk, hkv, d), (b, lk, hkv, dv)]
    return [random(s, seed=seed + i) for i, s in enumerate(shapes)]


def assert_close(got, want, atol):
    got = got.to(torch.float64) if isinstance(got, torch.Tensor) else torch.from_numpy(
        np.asarray(got, np.float64))
    assert got.shape == want.shape
    err = (got - want).abs().max().item() if got.numel() else 0.0
    assert err <= atol, f"max abs error {err} > {atol}"


rng = np.random.default_rng(7)
MASK_CASES = {
    "none": {},
    "bool_full": {"attn_mask": rng.random((B, HQ, LQ, LK)) > 0.3},
    "bool_keys": {"attn_mask": np.array([True, False, True, True, False, True, True])},
    "bool_per_batch": {"attn_mask": rng.random((B, 1, 1, LK)) > 0.5},
    "float_bias": {"attn_mask": rng.standard_normal((LQ, LK)).astype(np.float32)},
    "float_neg_inf": {"attn_mask": np.where(rng.random((1, HQ, LQ, LK)) > 0.4, 0.0,
                                            -np.inf).astype(np.float32)},
    "causal_top_left": {"is_causal": True},
    "causal_bottom_right": {"is_causal": True, "alignment": "bottom_right"},
    "window_pair": {"window": (2, 1)},
    "window_int_bottom_right": {"window": 1, "alignment": "bottom_right"},
    "window_left_only_causal": {"window": (2, None), "is_causal": True},
    "key_lengths": {"key_lengths": [3, 7]},
    "alibi": {"alibi_slopes": [0.5, 0.25, 0.125, 0.0625]},
    "scale": {"scale": 0.3},
    "everything": {"attn_mask": rng.random((B, HQ, LQ, LK)) > 0.2, "is_causal": True,
                   "alignment": "bottom_right", "key_lengths": [6, 4], "window": (3, 0),
                   "alibi_slopes": [0.1, 0.2, 0.3, 0.4], "scale": 0.5},
    "softcap": {"softcap": 0.7},
    "sinks": {"sinks": [0.5, -1.0, 2.0, 0.0]},
    # Soft-capping before a float bias large enough that the order shows.
    "softcap_sinks_masks": {"attn_mask": 3 * rng.standard_normal((B, 1, LQ, LK)).astype(
                                np.float32),
                            "is_causal": True, "alignment": "bottom_right",
                            "key_lengths": [7, 5], "alibi_slopes": [0.1, 0.2, 0.3, 0.4],
                            "scale": 0.9, "softcap": 1.5, "sinks": [1.0, -0.5, 0.25, 3.0]},
    # T5's relative bias: 8 buckets (4 a side: 2 exact, 2 logarithmic up to distance
    # 5, the last from 4 on) and 6 (3 exact, the last from 4 on) over Lq 5, Lk 7.
    "relative_bias_bidirectional": {
        "relative_bias": attnserve.RelativeBias(
            rng.standard_normal((HQ, 8)).astype(np.float32), 8, 5, bidirectional=True),
        "scale": 1.0},
    "relative_bias_causal_bottom_right": {
        "relative_bias": attnserve.RelativeBias(list(rng.standard_normal(HQ * 6)), 6, 4),
        "is_causal": True, "alignment": "bottom_right", "scale": 1.0},
    "relative_bias_everything": {
        "attn_mask": 2 * rng.standard_normal((B, 1, LQ, LK)).astype(np.float32),
        "relative_bias": attnserve.RelativeBias(
            torch.from_numpy(rng.standard_normal((HQ, 8)).astype(np.float32)), 8, 6,
            bidirectional=True),
        "window": (4, 2), "key_lengths": [7, 6], "alibi_slopes": [0.1, 0.2, 0.3, 0.4],
        "softcap": 2.0, "sinks": [0.5, -1.0, 2.0, 0.0]},
}


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_masks_match_torch_f32(client, case):
    q, k, v = qkv()
    kw = MASK_CASES[case]
    out, weights = client.attend(q, k, v, return_weights=True, **kw)
    want_out, want_w = attention(q, k, v, **kw)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    assert_close(out, want_out, 1e-5)
    assert_close(weights, want_w, 1e-5)


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_weight_stats_match_the_weights_entropy_and_max(client, case):
    # Without weights (the flash kernel) and with them (the materialized one).
    q, k, v = qkv()
    kw = MASK_CASES[case]
    want_entropy, want_max = weight_stats(attention(q, k, v, **kw)[1])
    out, stats = client.attend(q, k, v, return_weight_stats=True, **kw)
    assert isinstance(stats, attnserve.WeightStats)
    assert stats.entropy.dtype == np.float32 and stats.entropy.shape == (B, HQ, LQ)
    assert_close(stats.entropy, want_entropy, 1e-5)
    assert_close(stats.max_weight, want_max, 1e-6)
    assert_close(out, attention(q, k, v, **kw)[0], 1e-5)
    out, weights, stats = client.attend(q, k, v, return_weights=True,
                                        return_weight_stats=True, **kw)
    assert_close(stats.entropy, want_entropy, 1e-5)
    assert_close(stats.max_weight, want_max, 1e-6)


def test_weight_stats_of_a_decode_over_many_keys(client):
    # Lq 1 against 3000 keys runs the decode kernel (keys split across threads);
    # torch tensors in, torch tensors out.
    q, k, v = (torch.from_numpy(x) for x in qkv(lq=1, lk=3000, d=64, seed=5))
    out, stats = client.attend(q, k, v, return_weight_stats=True)
    want_entropy, want_max = weight_stats(attention(q, k, v)[1])
    assert isinstance(stats.entropy, torch.Tensor)
    assert_close(stats.entropy, want_entropy, 1e-4)
    assert_close(stats.max_weight, want_max, 1e-6)
    # Nearly uniform scores over 3000 keys: close to ln(3000).
    assert (stats.entropy > math.log(3000) - 1).all()


def test_weight_stats_are_for_softmax_attention_only(client):
    q, k, v = qkv()
    with pytest.raises(attnserve.InvalidArgument, match="return_weight_stats: only softmax "
                       "attention has weights to summarize, not linear attention"):
        client.attend(q, k, v, linear=attnserve.LinearAttention(), return_weight_stats=True)


@pytest.mark.parametrize("lq,lk", [(3, 8), (8, 3), (6, 6)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_both_alignments_any_lengths(client, lq, lk, alignment):
    q, k, v = qkv(lq=lq, lk=lk)
    out = client.attend(q, k, v, is_causal=True, alignment=alignment)
    assert_close(out, attention(q, k, v, is_causal=True, alignment=alignment)[0], 1e-5)


def test_rows_with_no_key_are_zero(client):
    # Bottom-right causal with Lq > Lk leaves the first Lq - Lk rows no key.
    q, k, v = qkv(lq=6, lk=3)
    out, w = client.attend(q, k, v, is_causal=True, alignment="bottom_right",
                           return_weights=True)
    assert np.all(out[:, :, :3] == 0) and np.all(w[:, :, :3] == 0)
    assert_close(out, attention(q, k, v, is_causal=True, alignment="bottom_right")[0], 1e-5)


@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 1), (3, 3)])
@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
def test_gqa_and_layouts(client, hq, hkv, layout):
    q, k, v = qkv(hq=hq, hkv=hkv, layout=layout, dv=8)
    out, w = client.attend(q, k, v, layout=layout, is_causal=True, return_weights=True)
    want_out, want_w = attention(q, k, v, layout=layout, is_causal=True)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)


def test_torch_tensors_in_and_out(client):
    q, k, v = (torch.from_numpy(x) for x in qkv())
    q.requires_grad_(True)
    mask = torch.rand(LQ, LK) > 0.3
    out, w = client.attend(q, k, v, attn_mask=mask, return_weights=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float32
    want_out, want_w = attention(q, k, v, attn_mask=mask)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)
    out += 1  # results are the caller's own, writable tensors


def test_torch_sdpa_when_torch_has_it(client):
    q, k, v = (torch.from_numpy(x) for x in qkv(hkv=HQ))
    mask = torch.rand(B, HQ, LQ, LK) > 0.3
    want = attention(q, k, v, attn_mask=mask)[0]
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is not None:  # torch >= 2.0 (Debian 12 has 1.13: the math above only)
        assert_close(sdpa(q.double(), k.double(), v.double(), attn_mask=mask), want, 1e-9)
    assert_close(client.attend(q, k, v, attn_mask=mask), want, 1e-5)


@pytest.mark.parametrize("dtype,atol", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
def test_16_bit_torch(client, dtype, atol):
    q, k, v = (torch.from_numpy(x).to(dtype) for x in qkv())
    mask = torch.rand(LQ, LK) > 0.3
    out, w = client.attend(q, k, v, attn_mask=mask, is_causal=True, return_weights=True)
    assert out.dtype == dtype and w.dtype == torch.float32
    # The oracle sees the same rounded inputs; the output is rounded once more.
    want_out, want_w = attention(q, k, v, attn_mask=mask, is_causal=True)
    assert_close(out, want_out, atol)
    assert_close(w, want_w, atol)
    as_f32 = client.attend(q, k, v, attn_mask=mask, is_causal=True, output_dtype="float32")
    assert as_f32.dtype == torch.float32
    assert_close(as_f32, want_out, atol)


def test_numpy_float16_and_bfloat16_output(client):
    q, k, v = (x.astype(np.float16) for x in qkv())
    out = client.attend(q, k, v)
    assert out.dtype == np.float16
    assert_close(out, attention(q, k, v)[0], 3e-3)
    bf = client.attend(q, k, v, output_dtype="bfloat16")
    # NumPy has no bfloat16: the values come back exactly, as float32.
    assert bf.dtype == np.float32
    assert np.all(bf.view(np.uint32) & 0xFFFF == 0)
    assert_close(bf, attention(q, k, v)[0], 2e-2)


def test_output_dtype_from_a_torch_dtype(client):
    q, k, v = (torch.from_numpy(x) for x in qkv())
    out = client.attend(q, k, v, output_dtype=torch.float16)
    assert out.dtype == torch.float16
    assert_close(out, attention(q, k, v)[0], 3e-3)


def test_value_dim_differs_from_head_dim(client):
    q, k, v = qkv(d=24, dv=40)
    out = client.attend(q, k, v, is_causal=True)
    assert out.shape == (B, HQ, LQ, 40)
    assert_close(out, attention(q, k, v, is_causal=True)[0], 1e-5)


def test_non_contiguous_and_big_endian_inputs(client):
    q, k, v = qkv(layout="BLHD")
    qt, kt, vt = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # views, not copies
    out = client.attend(qt, kt, vt.astype(">f4"))
    assert_close(out, attention(q, k, v, layout="BLHD")[0].transpose(1, 2), 1e-5)


def test_the_worked_example_of_docs(client):
    # docs/api.md "Worked example" and docs/python.md: the same request, the same figures.
    q = np.array([[[[1, 0], [0, 1], [1, 1]], [[0, 0], [2, 0], [0, -1]]]], np.float32)
    k = np.array([[[[1, 0], [0, 1], [1, 1], [-1, 0]]]], np.float32)
    v = np.array([[[[1, 0], [0, 1], [2, 2], [5, 5]]]], np.float32)
    mask = np.array([1, 1, 1, 1, 1, 0, 1, 1], bool).reshape(1, 2, 1, 4)
    out, w = client.attend(q, k, v, attn_mask=mask, is_causal=True, alignment="bottom_right",
                           key_lengths=[3], return_weights=True)
    np.testing.assert_allclose(out[0], [[[0.6698, 0.3302], [1.0, 1.2033], [1.2552, 1.2552]],
                                        [[1.0, 0.0], [1.5, 1.0], [1.3302, 0.6605]]], atol=1e-4)
    np.testing.assert_allclose(w[0, 1], [[1, 0, 0, 0], [0.5, 0, 0.5, 0],
                                         [0.6698, 0, 0.3302, 0]], atol=1e-4)


# --- logit soft-capping (Gemma 2) and attention sinks (gpt-oss) -------------------------

def test_softcap_bounds_the_scores_before_the_mask_is_added(client):
    # One query [1], keys [1] and [-1], scale 10: the scores 10 and -10 become
    # 2·tanh(5) and -2·tanh(5); the float mask's +3 on the second key comes after
    # (added first, the second key would still be capped below -1.99).
    q = np.ones((1, 1, 1, 1), np.float32)
    k = np.array([1, -1], np.float32).reshape(1, 1, 2, 1)
    v = np.eye(2, dtype=np.float32).reshape(1, 1, 2, 2)
    out, w = client.attend(q, k, v, attn_mask=np.array([0, 3], np.float32), scale=10,
                           softcap=2, return_weights=True)
    s = np.array([2 * np.tanh(5), -2 * np.tanh(5) + 3])
    want = np.exp(s) / np.exp(s).sum()
    np.testing.assert_allclose(w.reshape(2), want, atol=1e-6)
    np.testing.assert_allclose(out.reshape(2), want, atol=1e-6)


def test_sinks_take_their_share_of_each_row(client):
    # Equal scores (zero queries) over Lk keys: a sink of log(Lk) takes half of
    # each row of head 0, one of log(3 Lk) three quarters of head 1's (GQA: both
    # query heads read kv head 0). The output is the keys' mean value times the rest.
    lk = 6
    q = np.zeros((1, 2, 3, 4), np.float32)
    k, v = random((1, 1, lk, 4), seed=3), random((1, 1, lk, 4), seed=4)
    out, w = client.attend(q, k, v, sinks=np.log([lk, 3 * lk]).astype(np.float32),
                           return_weights=True)
    np.testing.assert_allclose(w.sum(-1), [[[0.5] * 3, [0.25] * 3]], atol=1e-6)
    mean = v[0, 0].astype(np.float64).mean(0)
    np.testing.assert_allclose(out[0, 0], np.tile(mean / 2, (3, 1)), atol=1e-6)
    np.testing.assert_allclose(out[0, 1], np.tile(mean / 4, (3, 1)), atol=1e-6)


def test_rows_with_no_key_are_zero_with_sinks(client):
    q, k, v = qkv(lq=6, lk=3)
    kw = dict(is_causal=True, alignment="bottom_right", softcap=5.0,
              sinks=[0.5, 1.0, -1.0, 2.0])
    out, w = client.attend(q, k, v, return_weights=True, **kw)
    assert np.all(out[:, :, :3] == 0) and np.all(w[:, :, :3] == 0)
    want_out, want_w = attention(q, k, v, **kw)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)


@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
def test_sinks_are_per_query_head_with_gqa(client, layout):
    q, k, v = qkv(hq=8, hkv=2, layout=layout)
    kw = dict(layout=layout, is_causal=True, softcap=2.0,
              sinks=np.linspace(-2, 2, 8).astype(np.float32))
    out, w = client.attend(q, k, v, return_weights=True, **kw)
    want_out, want_w = attention(q, k, v, **kw)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)


def gemma2_attention(q, k, v, mask, scaling, softcap):
    """Gemma 2's eager attention as PyTorch models write it: the scores capped,
    then the additive mask, softmax in float32."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    w = torch.tanh(w / softcap) * softcap
    w = torch.softmax(w + mask, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


def gpt_oss_attention(q, k, v, mask, scaling, sinks):
    """gpt-oss's eager attention as PyTorch models write it: each head's sink is one
    more logit column, dropped after the softmax."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    w = torch.matmul(q, k.transpose(2, 3)) * scaling + mask
    s = sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
    logits = torch.cat([w, s], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = torch.softmax(logits, dim=-1)
    return torch.matmul(probs[..., :-1], v)


def test_torch_models_soft_capped_and_sink_attention(client):
    q, k, v = (torch.from_numpy(x) for x in qkv(lq=LK, seed=11))
    causal = torch.full((LK, LK), float("-inf")).triu(1)
    # softcap 2 bites at these scores (Gemma 2's 50 would barely).
    want = gemma2_attention(q, k, v, causal, D ** -0.5, 2.0)
    assert_close(client.attend(q, k, v, is_causal=True, softcap=2.0), want.double(), 1e-5)
    sinks = torch.nn.Parameter(torch.tensor([0.3, -0.7, 1.5, 0.0]))  # as a model holds them
    want = gpt_oss_attention(q, k, v, causal, D ** -0.5, sinks).detach()
    out = client.attend(q, k, v, is_causal=True, sinks=sinks)
    assert isinstance(out, torch.Tensor)
    assert_close(out, want.double(), 1e-5)


def test_16_bit_torch_with_softcap_and_bf16_sinks(client):
    q, k, v = (torch.from_numpy(x).to(torch.bfloat16) for x in qkv())
    sinks = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.bfloat16))
    out, w = client.attend(q, k, v, is_causal=True, softcap=1.0, sinks=sinks,
                           return_weights=True)
    assert out.dtype == torch.bfloat16 and w.dtype == torch.float32
    want_out, want_w = attention(q, k, v, is_causal=True, softcap=1.0, sinks=sinks)
    assert_close(out, want_out, 2e-2)
    assert_close(w, want_w, 2e-2)


def test_attend_many_takes_softcap_and_sinks(client):
    items = [tuple(qkv(seed=s)) for s in (21, 22)]
    kw = dict(softcap=1.0, sinks=[0.1, 0.2, 0.3, 0.4])
    outs = list(client.attend_many(items, is_causal=True, **kw))
    for (q, k, v), out in zip(items, outs):
        assert_close(out, attention(q, k, v, is_causal=True, **kw)[0], 1e-5)


# --- T5's relative position bias ------------------------------------------------------

def t5_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                                max_distance=128):
    """T5's bucket of each relative position (key position minus query position),
    written here in torch from the T5 paper's scheme as T5's PyTorch models compute
    it: in float32, the logarithmic part truncated to an integer."""
    n = relative_position
    if bidirectional:
        side = num_buckets // 2
        offset = torch.where(n > 0, side, 0)
        distance = n.abs()
    else:
        side = num_buckets
        offset = torch.zeros_like(n)
        distance = torch.clamp(-n, min=0)
    exact = side // 2
    # float32 throughout, the ratio's log over the span's log (a Python float).
    scaled = (torch.log(distance.to(torch.float32) / exact)
              / math.log(max_distance / exact) * (side - exact))
    far = torch.clamp(exact + scaled.to(torch.long), max=side - 1)
    return offset + torch.where(distance < exact, distance, far)


class T5SelfAttention(torch.nn.Module):
    """T5's self-attention scores (its position bias and softmax) over given
    query, key and value states [B, H, L, D]: no 1/sqrt(D) scaling, the position bias
    (plus the decoder's causal mask) added to q k^T, softmax in float."""

    def __init__(self, num_heads, num_buckets=32, max_distance=128, is_decoder=False,
                 seed=0):
        super().__init__()
        self.is_decoder = is_decoder
        self.relative_attention_num_buckets = num_buckets
        self.relative_attention_max_distance = max_distance
        self.relative_attention_bias = torch.nn.Embedding(num_buckets, num_heads)
        with torch.no_grad():  # larger than T5's init, so that every bucket shows
            g = torch.Generator().manual_seed(seed)
            self.relative_attention_bias.weight.copy_(
                2 * torch.randn(num_buckets, num_heads, generator=g))

    def compute_bias(self, query_length, key_length, past_length=0):
        """[1, H, Lq, Lk]; with a cache the queries are positions past_length ..
        (as T5 models offset them by a cache), the keys 0 .. key_length - 1."""
        context_position = torch.arange(past_length, past_length + query_length,
                                        dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = t5_relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, q, k, v, past_length=0):
        """(output, weights) in float64."""
        q, k, v = q.double(), k.double(), v.double()
        lq, lk = q.shape[2], k.shape[2]
        scores = torch.matmul(q, k.transpose(3, 2))
        position_bias = self.compute_bias(lq, lk, past_length).detach().double()
        if self.is_decoder:  # the extended causal mask: finfo.min where j > position
            allowed = (torch.arange(lk)[None, :]
                       <= torch.arange(past_length, past_length + lq)[:, None])
            position_bias = position_bias + (~allowed).double() * torch.finfo(
                torch.float64).min
        scores = scores + position_bias
        weights = torch.softmax(scores, dim=-1)  # T5: in float, here float64 throughout
        return torch.matmul(weights, v), weights

    def relative_bias(self):
        """What the server takes: the table [H, num_buckets] = the weight transposed."""
        return attnserve.RelativeBias(self.relative_attention_bias.weight.T,
                                      self.relative_attention_num_buckets,
                                      self.relative_attention_max_distance,
                                      bidirectional=not self.is_decoder)


def t5_states(b, h, lq, lk, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Scores about as large as the bias: both show in the weights.
    return (0.5 * torch.randn(b, h, lq, d, generator=g),
            0.5 * torch.randn(b, h, lk, d, generator=g),
            torch.randn(b, h, lk, d, generator=g))


BUCKET_CONFIGS = [(True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 64, 1000),
                  (True, 6, 4), (False, 2, 2), (True, 4, 3), (False, 7, 9), (True, 9, 10)]


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", BUCKET_CONFIGS)
def test_reference_buckets_are_t5s(bidirectional, num_buckets, max_distance):
    # The oracle's NumPy buckets (reference.py) against the torch formula above.
    n = torch.arange(-5000, 5001)
    want = t5_relative_position_bucket(n, bidirectional, num_buckets, max_distance)
    got = relative_bucket(n.numpy(), num_buckets, max_distance, bidirectional)
    np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", BUCKET_CONFIGS)
def test_relative_bias_buckets_are_t5s_bucket_for_bucket(client, bidirectional, num_buckets,
                                                         max_distance):
    # Zero queries: a row's weights are softmax(table[h, bucket]). With table[h, b] =
    # step[h]·b, log w(j) / step[h] is the bucket of key j up to the row's constant,
    # so the server's bucket of every relative position -(Lk - 1) .. Lk - 1 (one
    # query at either end of 700 keys) is read off and compared with T5's.
    lk = 700
    steps = np.array([0.05, 0.08], np.float64)
    table = (steps[:, None] * np.arange(num_buckets)).astype(np.float32)  # [Hq = 2, nb]
    q = np.zeros((1, 2, 1, 4), np.float32)
    k = np.zeros((1, 1, lk, 4), np.float32)
    v = random((1, 1, lk, 4), seed=5)
    rb = attnserve.RelativeBias(table, num_buckets, max_distance, bidirectional)
    seen = set()
    for alignment, position in (("top_left", 0), ("bottom_right", lk - 1)):
        _, w = client.attend(q, k, v, scale=1.0, alignment=alignment, relative_bias=rb,
                             return_weights=True)
        relative = torch.arange(lk) - position
        want = t5_relative_position_bucket(relative, bidirectional, num_buckets,
                                           max_distance).numpy()
        for h in range(2):
            implied = np.log(w[0, h, 0].astype(np.float64)) / steps[h]
            got = np.rint(implied - implied[0]).astype(np.int64) + want[0]
            wrong = np.nonzero(got != want)[0]
            assert wrong.size == 0, (alignment, h, [
                (int(relative[j]), int(want[j]), int(got[j])) for j in wrong[:8]])
        seen |= set(want.tolist())
    if max_distance < lk:  # every bucket, the exact, logarithmic and last ones, was used
        if bidirectional:  # m + 0 is T5's bucket of n > 0 at distance 0: never used
            m = num_buckets // 2
            assert seen == set(range(2 * m)) - {m}
        else:
            assert seen == set(range(num_buckets))


def assert_t5_close(got, want):
    out, w = got
    assert_close(out, want[0], 1e-5)
    assert_close(w, want[1], 1e-5)


@pytest.mark.parametrize("length", [300, 600])
def test_t5_encoder_self_attention(client, length):
    # Bidirectional buckets, no mask: relative positions -(L - 1) .. L - 1 reach every
    # exact and logarithmic bucket on both sides and the last ones (past 128).
    t5 = T5SelfAttention(num_heads=4, seed=length)
    q, k, v = t5_states(2, 4, length, length, seed=1)
    with torch.no_grad():
        want = t5(q, k, v)
    got = client.attend(q, k, v, scale=1.0, relative_bias=t5.relative_bias(),
                        return_weights=True)
    assert isinstance(got[0], torch.Tensor)
    assert_t5_close(got, want)


@pytest.mark.parametrize("length", [300, 500])
def test_t5_decoder_self_attention(client, length):
    # Unidirectional buckets with T5's causal mask = is_causal: the keys before a
    # query, at distances 0 .. L - 1.
    t5 = T5SelfAttention(num_heads=4, is_decoder=True, seed=length)
    q, k, v = t5_states(1, 4, length, length, seed=2)
    with torch.no_grad():
        want = t5(q, k, v)
    got = client.attend(q, k, v, scale=1.0, is_causal=True,
                        relative_bias=t5.relative_bias(), return_weights=True)
    assert_t5_close(got, want)


@pytest.mark.parametrize("new_tokens", [1, 3])
def test_t5_decoder_with_a_cache(client, new_tokens):
    # Decoding with a cache: the new queries are positions past .. past + T - 1 over
    # keys 0 .. Lk - 1 (T5 models offset the query positions by the cache), which
    # is bottom-right alignment.
    past = 450
    t5 = T5SelfAttention(num_heads=4, is_decoder=True, seed=3)
    q, k, v = t5_states(2, 4, new_tokens, past + new_tokens, seed=3)
    with torch.no_grad():
        want = t5(q, k, v, past_length=past)
    got = client.attend(q, k, v, scale=1.0, is_causal=True, alignment="bottom_right",
                        relative_bias=t5.relative_bias(), return_weights=True)
    assert_t5_close(got, want)
    # Top-left alignment would put the queries at positions 0 .. T - 1: not T5's.
    wrong = client.attend(q, k, v, scale=1.0, relative_bias=t5.relative_bias())
    assert (wrong.double() - want[0]).abs().max() > 1e-2


def test_relative_bias_as_numpy_flat_list_or_message(client):
    # The table of one T5 layer in every form the client takes, and the wire message.
    t5 = T5SelfAttention(num_heads=4, num_buckets=16, max_distance=40, seed=4)
    q, k, v = (x.numpy() for x in t5_states(1, 4, 50, 60, seed=4))
    table = t5.relative_attention_bias.weight.detach().T.numpy()   # [Hq, nb]
    with torch.no_grad():
        want = t5(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    message = attnserve.v1.attention_pb2.RelativeBias(
        table=table.reshape(-1).tolist(), num_buckets=16, max_distance=40, bidirectional=True)
    outs = [client.attend(q, k, v, scale=1.0, relative_bias=rb) for rb in (
        attnserve.RelativeBias(table, 16, 40, True),
        attnserve.RelativeBias(table.reshape(-1).tolist(), 16, 40, True),
        attnserve.RelativeBias(torch.from_numpy(table).to(torch.bfloat16).float(), 16, 40,
                               True),
        message)]
    assert isinstance(outs[0], np.ndarray)
    for out in outs[:2] + outs[3:]:
        assert np.array_equal(out, outs[0])
    assert_close(outs[0], want[0], 1e-5)


def test_attend_many_and_bf16_with_relative_bias(client):
    t5 = T5SelfAttention(num_heads=4, is_decoder=True, seed=5)
    items = [tuple(t5_states(1, 4, 40, 40, seed=s)) for s in (6, 7)]
    outs = list(client.attend_many(items, scale=1.0, is_causal=True,
                                   relative_bias=t5.relative_bias()))
    for (q, k, v), out in zip(items, outs):
        with torch.no_grad():
            assert_close(out, t5(q, k, v)[0], 1e-5)
    q, k, v = (x.to(torch.bfloat16) for x in items[0])
    out = client.attend(q, k, v, scale=1.0, is_causal=True, relative_bias=t5.relative_bias())
    assert out.dtype == torch.bfloat16
    with torch.no_grad():
        assert_close(out, t5(q, k, v)[0], 2e-2)
