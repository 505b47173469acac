"""attend takes torch's scaled_dot_product_attention signature:
(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
enable_gqa=False), with dropout_p only 0 and enable_gqa defaulting to True."""

import asyncio
import inspect

import numpy as np
import pytest
import torch

import attnserve
from reference import attention
from test_parity import assert_close, qkv

SDPA_PARAMETERS = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                   "enable_gqa"]


@pytest.mark.parametrize("method", [attnserve.Client.attend, attnserve.AsyncClient.attend])
def test_the_signature_starts_as_sdpa(method):
    params = inspect.signature(method).parameters
    names = [n for n in params if n != "self"]
    assert names[:6] == SDPA_PARAMETERS[:6]
    for name in SDPA_PARAMETERS[3:6]:  # positional or keyword, as in torch
        assert params[name].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params["dropout_p"].default == 0.0
    assert params["is_causal"].default is False
    if method is attnserve.Client.attend:  # AsyncClient passes them on through **kw
        assert params["scale"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["enable_gqa"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["enable_gqa"].default is True


def test_a_call_written_for_sdpa_runs_unchanged(client):
    q, k, v = (torch.from_numpy(x) for x in qkv(hq=4, hkv=4, seed=3))
    mask = torch.rand(1, 1, q.shape[2], k.shape[2]) > 0.3
    mask[..., 0] = True
    want = attention(q, k, v, attn_mask=mask, scale=0.25)[0]
    out = client.attend(query=q, key=k, value=v, attn_mask=mask, dropout_p=0.0,
                        is_causal=False, scale=0.25, enable_gqa=False)
    assert_close(out, want, 1e-5)
    # positional, as F.scaled_dot_product_attention(q, k, v, mask, 0.0, False)
    assert_close(client.attend(q, k, v, mask, 0.0, False, scale=0.25), want, 1e-5)
    causal = attention(q, k, v, is_causal=True)[0]
    assert_close(client.attend(q, k, v, None, 0.0, True), causal, 1e-5)


@pytest.mark.parametrize("p", [0.1, 1.0, -0.5, float("nan")])
def test_nonzero_dropout_is_refused(client, p):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="inference-only") as e:
        client.attend(q, k, v, dropout_p=p)
    assert isinstance(e.value, attnserve.InvalidArgument)
    with pytest.raises(ValueError, match="inference-only"):
        client.attend(q, k, v, None, p)
    with pytest.raises(ValueError, match="inference-only"):
        list(client.attend_many([(q, k, v)], dropout_p=p))


def test_dropout_zero_in_any_spelling(client):
    q, k, v = qkv()
    want = client.attend(q, k, v)
    for p in (0, 0.0, np.float32(0), torch.tensor(0.0)):
        np.testing.assert_array_equal(client.attend(q, k, v, dropout_p=p), want)
    with pytest.raises(TypeError, match="dropout_p"):
        client.attend(q, k, v, dropout_p="none")


def test_grouped_heads_are_allowed_by_default(client):
    q, k, v = qkv(hq=4, hkv=2)
    want = attention(q, k, v)[0]
    assert_close(client.attend(q, k, v), want, 1e-5)
    assert_close(client.attend(q, k, v, enable_gqa=True), want, 1e-5)


@pytest.mark.parametrize("layout", ["BHLD", "BLHD"])
def test_enable_gqa_false_refuses_grouped_heads_as_torch_does(client, layout):
    q, k, v = qkv(hq=4, hkv=2, layout=layout)
    with pytest.raises(attnserve.InvalidArgument, match="enable_gqa") as e:
        client.attend(q, k, v, enable_gqa=False, layout=layout)
    assert "Hq = 4" in str(e.value) and "Hkv = 2" in str(e.value)
    with pytest.raises(attnserve.InvalidArgument, match="enable_gqa"):
        list(client.attend_many([(q, k, v)], enable_gqa=False, layout=layout))
    q, k, v = qkv(hq=2, hkv=2, layout=layout)
    assert_close(client.attend(q, k, v, enable_gqa=False, layout=layout),
                 attention(q, k, v, layout=layout)[0], 1e-5)


def test_the_async_client_takes_the_same_arguments(server):
    q, k, v = qkv(hq=4, hkv=2)

    async def run():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            out = await c.attend(q, k, v, None, 0.0, True, scale=0.5, enable_gqa=True)
            with pytest.raises(ValueError, match="inference-only"):
                await c.attend(q, k, v, dropout_p=0.2)
            with pytest.raises(attnserve.InvalidArgument, match="enable_gqa"):
                await c.attend(q, k, v, enable_gqa=False)
            return out

    out = asyncio.run(run())
    assert_close(out, attention(q, k, v, is_causal=True, scale=0.5)[0], 1e-5)


def test_relative_bias_is_a_keyword_after_sdpas_arguments(client):
    # An SDPA call site (positional mask, dropout_p, is_causal) gains T5's bias as a
    # keyword; T5 scales no scores, so scale=1.0 goes with it.
    params = inspect.signature(attnserve.Client.attend).parameters
    assert params["relative_bias"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["relative_bias"].default is None
    q, k, v = (torch.from_numpy(x) for x in qkv(hq=4, hkv=4, seed=5))
    rb = attnserve.RelativeBias(torch.randn(4, 8, generator=torch.Generator().manual_seed(5)),
                                8, 5, bidirectional=True)
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool)
    mask[:, 0] = False
    want = attention(q, k, v, attn_mask=mask, is_causal=True, scale=1.0, relative_bias=rb)[0]
    assert_close(client.attend(q, k, v, mask, 0.0, True, scale=1.0, enable_gqa=False,
                               relative_bias=rb), want, 1e-5)
