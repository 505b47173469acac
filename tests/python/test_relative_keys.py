"""Relative position keys (Mask.relative_keys) against the models that define them:
Transformer-XL's relative attention as its PyTorch code computes it (the
relative shift included), and Shaw et al.'s clipped relative positions."""

import asyncio

import numpy as np
import pytest
import torch

import attnserve


def rel_shift(x):
    """Transformer-XL's _rel_shift of scores [qlen, klen, H]: row i moves left by
    qlen - 1 - i, so column j then holds the key of distance klen - qlen + i - j."""
    zero_pad = torch.zeros((x.size(0), 1) + x.size()[2:], dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=1)
    x_padded = x_padded.view((x.size(1) + 1, x.size(0)) + x.size()[2:])
    return x_padded[1:].view_as(x)


def transformer_xl_attention(q, k, v, r, r_w_bias, r_r_bias, scale):
    """Transformer-XL's RelPartialLearnableMultiHeadAttn core in float64: q [qlen,
    H, D] the segment's queries, k and v [klen, H, D] memory then segment, r [klen,
    H, D] the projected encodings of distances klen - 1 .. 0 (its pos_seq order)."""
    q, k, v, r = q.double(), k.double(), v.double(), r.double()
    qlen, klen = q.shape[0], k.shape[0]
    ac = torch.einsum("ind,jnd->ijn", q + r_w_bias.double(), k)
    bd = rel_shift(torch.einsum("ind,jnd->ijn", q + r_r_bias.double(), r))
    score = (ac + bd) * scale
    mlen = klen - qlen
    future = torch.triu(torch.ones(qlen, klen, dtype=torch.bool), diagonal=1 + mlen)
    score = score.masked_fill(future[:, :, None], float("-inf"))
    prob = torch.softmax(score, dim=1)
    return torch.einsum("ijn,jnd->ind", prob, v)


@pytest.mark.parametrize("qlen,mlen", [(37, 0), (24, 40), (1, 300)])
def test_transformer_xl_relative_attention(client, qlen, mlen):
    g = torch.Generator().manual_seed(qlen + mlen)
    heads, d = 4, 16
    klen = qlen + mlen
    q = torch.randn(qlen, heads, d, generator=g)
    k = torch.randn(klen, heads, d, generator=g)
    v = torch.randn(klen, heads, d, generator=g)
    r = torch.randn(klen, heads, d, generator=g)
    r_w_bias = 0.5 * torch.randn(heads, d, generator=g)
    r_r_bias = 0.5 * torch.randn(heads, d, generator=g)
    scale = 1 / d ** 0.5
    want = transformer_xl_attention(q, k, v, r, r_w_bias, r_r_bias, scale)

    # The server's form: the query q + u, the table by distance 0, 1, ... per
    # head (r flipped), the query bias v - u; causal from the bottom right.
    keys = attnserve.RelativeKeys(table=r.flip(0).permute(1, 0, 2).contiguous(),
                                  zero_row=0, query_bias=r_r_bias - r_w_bias)
    got = client.attend((q + r_w_bias)[None], k[None], v[None], is_causal=True,
                        alignment="bottom_right", layout="BLHD", scale=scale,
                        relative_keys=keys)
    np.testing.assert_allclose(np.asarray(got)[0], want.numpy(), atol=2e-5)


def test_shaw_clipped_relative_positions(client):
    # Shaw et al.: e_ij = q_i · (k_j + a_ij) / sqrt(D), a_ij = w[clip(j - i, -K, K)]
    # one table for every head, here with a window and both alignments' worth of
    # distances (encoder self-attention: no causal mask).
    rng = np.random.default_rng(3)
    heads, lq, lk, d, clip = 3, 29, 41, 8, 5
    q = rng.standard_normal((1, heads, lq, d)).astype(np.float32)
    k = rng.standard_normal((1, heads, lk, d)).astype(np.float32)
    v = rng.standard_normal((1, heads, lk, d)).astype(np.float32)
    w = rng.standard_normal((2 * clip + 1, d)).astype(np.float32)  # w[j - i + K]
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    a = w[np.clip(j - i, -clip, clip) + clip].astype(np.float64)  # [lq, lk, d]
    scores = (np.einsum("hid,hjd->hij", q[0], k[0])
              + np.einsum("hid,ijd->hij", q[0], a)) / np.sqrt(d)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    want = weights @ v[0].astype(np.float64)

    # Row t of the server's table is distance d(i) - j = t - zero_row, i.e. j - i
    # = zero_row - t: w reversed.
    keys = attnserve.RelativeKeys(table=w[::-1][None], zero_row=clip)
    got, got_weights = client.attend(q, k, v, relative_keys=keys, return_weights=True)
    np.testing.assert_allclose(got[0], want, atol=2e-5)
    np.testing.assert_allclose(got_weights[0], weights, atol=2e-6)


def test_a_nan_in_the_table_reaches_the_rows_that_read_it(client):
    # As a NaN key does: the table is read in place, not checked. Row 2 of head
    # 1 is distance i - j = 2, read by query row 2 (key 0) only.
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    kv = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    table = rng.standard_normal((2, 4, 8)).astype(np.float32)
    table[1, 2, 3] = np.nan
    out = client.attend(q, kv, kv, relative_keys=attnserve.RelativeKeys(table))
    nan_rows = np.isnan(out).any(axis=-1)[0]
    np.testing.assert_array_equal(nan_rows, [[False] * 3, [False, False, True]])


def test_hosted_transformer_xl_layer_is_its_pytorch_block(client, model_repository):
    # The example model "transformer_xl" (positional "relative") against
    # Transformer-XL's RelPartialLearnableMultiHeadAttn block (post-norm, no
    # projection biases) with its weights: a segment after a memory, the
    # server given the memory then the segment as its keys.
    from test_models import load_safetensors
    w = load_safetensors(model_repository / "transformer_xl/model.safetensors")
    heads, d_head, d_model = 4, 8, 32
    g = torch.Generator().manual_seed(7)
    batch, qlen, mlen = 2, 5, 9
    h = torch.randn(qlen, batch, d_model, generator=g, dtype=torch.float64)
    mems = torch.randn(mlen, batch, d_model, generator=g, dtype=torch.float64)

    cat = torch.cat([mems, h], 0)
    klen = cat.size(0)
    q = (h @ w["q_proj.weight"].T).view(qlen, batch, heads, d_head)
    k = (cat @ w["k_proj.weight"].T).view(klen, batch, heads, d_head)
    v = (cat @ w["v_proj.weight"].T).view(klen, batch, heads, d_head)
    pos_seq = torch.arange(klen - 1, -1, -1.0, dtype=torch.float64)
    inv_freq = 1 / (10000 ** (torch.arange(0.0, d_model, 2.0, dtype=torch.float64) / d_model))
    sinusoid = torch.outer(pos_seq, inv_freq)
    pos_emb = torch.cat([sinusoid.sin(), sinusoid.cos()], -1)
    r_head_k = (pos_emb @ w["relative.w_r"].T).view(klen, heads, d_head)
    ac = torch.einsum("ibnd,jbnd->ijbn", q + w["relative.u"], k)
    bd = rel_shift(torch.einsum("ibnd,jnd->ijbn", q + w["relative.v"], r_head_k))
    score = (ac + bd) / d_head ** 0.5
    future = torch.triu(torch.ones(qlen, klen, dtype=torch.bool), diagonal=1 + mlen)
    score = score.masked_fill(future[:, :, None, None], float("-inf"))
    prob = torch.softmax(score, dim=1)
    attn_vec = torch.einsum("ijbn,jbnd->ibnd", prob, v).reshape(qlen, batch, heads * d_head)
    want = torch.nn.functional.layer_norm(h + attn_vec @ w["o_proj.weight"].T, (d_model,),
                                          w["norm.weight"], w["norm.bias"], 1e-5)

    got = client.model("transformer_xl")(h.transpose(0, 1).float().numpy(),
                                         memory=cat.transpose(0, 1).float().numpy(),
                                         is_causal=True, alignment="bottom_right")
    np.testing.assert_allclose(got, want.transpose(0, 1).numpy(), atol=5e-5)


@pytest.mark.parametrize("shared", [True, False])
def test_session_steps_take_relative_keys_over_stream_positions(client, shared):
    # Each step of a session with relative keys equals the stateless call over
    # the whole stream (bottom-right causal): a shared table of distances
    # clipped to 6 (Shaw), or a table per head with a row per distance and a
    # query bias (Transformer-XL).
    rng = np.random.default_rng(5 + shared)
    hq, hkv, d, prompt, steps = 4, 2, 8, 20, 5
    total = prompt + 2 * steps
    if shared:
        keys = attnserve.RelativeKeys(rng.standard_normal((1, 13, d)).astype(np.float32),
                                      zero_row=6)
    else:
        keys = attnserve.RelativeKeys(rng.standard_normal((hq, total, d)).astype(np.float32),
                                      zero_row=0,
                                      query_bias=rng.standard_normal((hq, d)).astype(np.float32))
    k_all = rng.standard_normal((total, hkv, d)).astype(np.float32)
    v_all = rng.standard_normal((total, hkv, d)).astype(np.float32)
    with client.create_session(num_kv_heads=hkv, head_dim=d) as s:
        s.append(0, k_all[:prompt], v_all[:prompt])
        end = prompt
        for step in range(steps):
            new = 1 + step % 2  # one token, then two (a speculative pair)
            q = rng.standard_normal((new, hq, d)).astype(np.float32)
            (out,) = client.attend_sessions(
                0, [(s, q, k_all[end:end + new], v_all[end:end + new])],
                relative_keys=keys)
            end += new
            want = client.attend(q[None], k_all[None, :end], v_all[None, :end],
                                 is_causal=True, alignment="bottom_right", layout="BLHD",
                                 relative_keys=keys)[0]
            np.testing.assert_allclose(out, want, atol=1e-5)


def test_session_streams_carry_relative_keys(client, server):
    # A step over a session stream, sync and async, equals the unary step on a
    # twin session holding the same tokens.
    rng = np.random.default_rng(11)
    hq, hkv, d = 4, 2, 8
    keys = attnserve.RelativeKeys(rng.standard_normal((hq, 40, d)).astype(np.float32),
                                  zero_row=3,
                                  query_bias=rng.standard_normal((hq, d)).astype(np.float32))
    k = rng.standard_normal((30, hkv, d)).astype(np.float32)
    v = rng.standard_normal((30, hkv, d)).astype(np.float32)
    q = rng.standard_normal((2, hq, d)).astype(np.float32)
    with client.create_session(num_kv_heads=hkv, head_dim=d) as s:
        s.append(0, k, v)
        (want,) = client.attend_sessions(0, [(s, q)], relative_keys=keys)
        with client.session_stream() as steps:
            (got,) = steps.attend_sessions(0, [(s, q)], relative_keys=keys)
        assert np.array_equal(got, want)

        async def through_async_stream():
            async with attnserve.AsyncClient(server.target, timeout=60) as c:
                async with await c.session_stream() as steps:
                    return await steps.attend_sessions(0, [(s.session_id, q)],
                                                       relative_keys=keys)

        (got,) = asyncio.run(through_async_stream())
        assert np.array_equal(got, want)


def test_session_relative_keys_are_checked_naming_the_field(client):
    with client.create_session(num_kv_heads=1, head_dim=8) as s:
        s.append(0, np.zeros((3, 1, 8), np.float32), np.zeros((3, 1, 8), np.float32))
        bad = attnserve.RelativeKeys(np.zeros((1, 4, 7), np.float32))
        with pytest.raises(attnserve.InvalidArgument,
                           match=r"^relative_keys.table: shape \[1, 4, 7\] is not \[heads, "
                                 r"rows, D\] with heads 1 or Hq = 2, rows >= 1 and D = 8$"):
            client.attend_sessions(0, [(s, np.zeros((1, 2, 8), np.float32))],
                                   relative_keys=bad)
