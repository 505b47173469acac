"""Hosted layers: client.model(name)(hidden, memory=...) against the layer's math
(docs/models.md "What a layer computes") with the weights from the repository."""

import json
import struct

import numpy as np
import pytest
import torch

import attnserve
from reference import attention, random
from test_parity import assert_close


def load_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", name
        begin, end = entry["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[begin:end], "<f4").reshape(entry["shape"]).astype(np.float64))
    return out


def mha_post(weights, cfg, x, memory=None, **mask):
    """scaled_dot, no positional encoding, norm "post", bias: docs/models.md 1-7."""
    x = torch.from_numpy(x).to(torch.float64)
    s = x if memory is None else torch.from_numpy(memory).to(torch.float64)
    hq, hkv, hd = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]

    def proj(t, name, heads):
        y = t @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]
        return y.view(y.shape[0], y.shape[1], heads, hd)  # BLHD

    q, k, v = proj(x, "q_proj", hq), proj(s, "k_proj", hkv), proj(s, "v_proj", hkv)
    a, w = attention(q, k, v, layout="BLHD", **mask)
    o = a.reshape(a.shape[0], a.shape[1], hq * hd) @ weights["o_proj.weight"].T + \
        weights["o_proj.bias"]
    out = torch.nn.functional.layer_norm(x + o, (x.shape[-1],), weights["norm.weight"],
                                         weights["norm.bias"], cfg["norm_eps"])
    return out, w


@pytest.fixture(scope="module")
def mha(model_repository):
    cfg = json.loads((model_repository / "mha_post/config.json").read_text())
    return cfg, load_safetensors(model_repository / "mha_post/model.safetensors")


def test_model_info(client):
    m = client.model("mha_post")
    info = m.info
    assert (info.d_model, info.num_heads, info.num_kv_heads, info.head_dim) == (64, 4, 4, 16)
    assert info.config["norm"] == "post"
    with pytest.raises(attnserve.NotFound, match="no_such"):
        client.model("no_such").info


def test_self_attention_matches_the_layer_math(client, mha):
    cfg, weights = mha
    x = random((2, 5, 64), seed=1)
    out, w = client.model("mha_post")(x, is_causal=True, return_weights=True)
    want_out, want_w = mha_post(weights, cfg, x, is_causal=True)
    assert out.shape == (2, 5, 64) and w.shape == (2, 4, 5, 5)
    assert_close(out, want_out, 1e-4)
    assert_close(w, want_w, 1e-5)


def test_cross_attention_with_memory_and_mask(client, mha):
    cfg, weights = mha
    x, mem = random((1, 3, 64), seed=2), random((1, 6, 64), seed=3)
    mask = np.random.default_rng(4).random((1, 1, 3, 6)) > 0.3
    out = client.model("mha_post")(x, memory=mem, attn_mask=mask, key_lengths=[5])
    want, _ = mha_post(weights, cfg, x, mem, attn_mask=mask, key_lengths=[5])
    assert_close(out, want, 1e-4)


def test_model_stream_and_torch(client):
    m = client.model("mha_post")
    xs = [torch.from_numpy(random((1, 4, 64), seed=s)) for s in range(5)]
    outs = list(m.many(xs, is_causal=True))
    assert all(isinstance(o, torch.Tensor) for o in outs)
    for x, o in zip(xs, outs):
        assert torch.equal(o, m(x, is_causal=True))


def test_model_shape_error_is_the_servers(client):
    with pytest.raises(attnserve.InvalidArgument) as caught:
        client.model("mha_post")(random((1, 3, 63)))
    assert caught.value.message == "hidden.shape: expected [B, Lq, d_model = 64], got [1, 3, 63]"
