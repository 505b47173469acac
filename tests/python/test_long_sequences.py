"""The long-sequence variants (Mask.block_sparse, AttendRequest.linear / .lsh).

The client-side checks are tested on their own. The server tests compare with the
semantics in proto/attnserve/v1/attention.proto; while a server ignores those
fields (main before the server supports them) they fail, they do not skip.
"""

import grpc
import numpy as np
import pytest
import torch

import attnserve
from attnserve import _codec
from attnserve.v1 import attention_pb2_grpc as pb_grpc
from reference import attention, random, to_torch64
from test_parity import assert_close

MASK64 = (1 << 64) - 1


class SplitMix64:
    """base/random.h's generator, which draws BlockSparse.random_blocks."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def below(self, n):
        x = self.state
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
        return (x ^ (x >> 31)) % n


def block_sparse_allowed(spec, lq, lk, alignment="top_left"):
    """bool [Lq, Lk] of the keys a layout allows (attention.proto, BlockSparse)."""
    bs = spec.block_size
    nqb, nkb = -(-lq // bs), -(-lk // bs)
    d0 = lk - lq if alignment == "bottom_right" else 0
    o = d0 // bs  # floor, also below zero
    kept = np.zeros((nqb, nkb), bool)
    qb = np.arange(nqb)[:, None]
    kb = np.arange(nkb)[None, :]
    if spec.local_left is not None or spec.local_right is not None:
        left, right = spec.local_left or 0, spec.local_right or 0
        kept |= (kb >= qb + o - left) & (kb <= qb + o + right)
    if spec.stride > 0:
        if spec.stride_pattern == "fixed":
            kept |= np.broadcast_to(kb % spec.stride == spec.stride - 1, kept.shape)
        else:
            kept |= (qb + o - kb) % spec.stride == 0
    if spec.random_blocks > 0:
        rng = SplitMix64(spec.seed)
        for row in range(nqb):
            perm = list(range(nkb))
            for t in range(min(spec.random_blocks, nkb)):
                u = t + rng.below(nkb - t)
                perm[t], perm[u] = perm[u], perm[t]
                kept[row, perm[t]] = True
    if spec.block_mask is not None:
        kept |= np.asarray(spec.block_mask, bool)
    allowed = kept[np.arange(lq)[:, None] // bs, np.arange(lk)[None, :] // bs]
    for g in spec.global_tokens:
        if g < lq:
            allowed[g, :] = True
        if g < lk:
            allowed[:, g] = True
    return torch.from_numpy(allowed)


# --- client-side checks (no server) ---------------------------------------------------

Q = random((1, 2, 16, 8), seed=1)
K = random((1, 2, 16, 8), seed=2)
V = random((1, 2, 16, 8), seed=3)

CHECKS = {
    "block_size": (dict(block_sparse=attnserve.BlockSparse(block_size=0, stride=1)),
                   "mask.block_sparse.block_size: must be in [1, 4096], got 0"),
    "no_component": (dict(block_sparse=attnserve.BlockSparse(block_size=4)),
                     "mask.block_sparse: the layout has no component (give local_left / "
                     "local_right, stride, random_blocks, global_tokens or block_mask)"),
    "global_order": (dict(block_sparse=attnserve.BlockSparse(block_size=4,
                                                             global_tokens=[3, 3])),
                     "mask.block_sparse.global_tokens[1]: 3 does not exceed the previous "
                     "entry 3 (entries must be strictly increasing)"),
    "global_range": (dict(block_sparse=attnserve.BlockSparse(block_size=4,
                                                             global_tokens=[16])),
                     "mask.block_sparse.global_tokens[0]: 16 is out of range "
                     "[0, max(Lq, Lk) = 16)"),
    "block_mask_shape": (dict(block_sparse=attnserve.BlockSparse(
        block_size=4, block_mask=np.ones((4, 3), bool))),
        "mask.block_sparse.block_mask: shape [4, 3] does not match [4, 4] "
        "(ceil(Lq / block_size), ceil(Lk / block_size))"),
    "block_mask_dtype": (dict(block_sparse=attnserve.BlockSparse(
        block_size=4, block_mask=np.ones((4, 4), np.float32))),
        "mask.block_sparse.block_mask.dtype: FLOAT32 is not supported (expected BOOL)"),
    "local_negative": (dict(block_sparse=attnserve.BlockSparse(block_size=4, local_left=-1)),
                       "mask.block_sparse.local_left: must be >= 0, got -1"),
    "favor_features": (dict(linear=attnserve.LinearAttention("favor_plus", num_features=0)),
                       "linear.num_features: must be in [1, 4096] for FAVOR+, got 0"),
    "linear_window": (dict(linear=attnserve.LinearAttention(), window=(2, 2)),
                      "mask.window_left/window_right: a sliding window cannot be "
                      "linearised: linear attention sums phi(k) v^T over the keys once, so "
                      "only causal and key_lengths can restrict them"),
    "linear_alibi": (dict(linear=attnserve.LinearAttention("relu"), alibi_slopes=[1, 1]),
                     "mask.alibi_slopes: ALiBi cannot be linearised: linear attention sums "
                     "phi(k) v^T over the keys once, so only causal and key_lengths can "
                     "restrict them"),
    "linear_relative_bias": (dict(linear=attnserve.LinearAttention(),
                                  relative_bias=attnserve.RelativeBias(np.zeros((2, 32)), 32)),
                             "mask.relative_bias: a relative position bias cannot be "
                             "linearised: linear attention sums phi(k) v^T over the keys "
                             "once, so only causal and key_lengths can restrict them"),
    # The server refuses ALiBi before a relative bias: so does the client.
    "linear_alibi_relative_bias": (dict(linear=attnserve.LinearAttention("relu"),
                                        alibi_slopes=[1, 1],
                                        relative_bias=attnserve.RelativeBias(
                                            np.ones((2, 8)), 8, 20, bidirectional=True)),
                                   "mask.alibi_slopes: ALiBi cannot be linearised: linear "
                                   "attention sums phi(k) v^T over the keys once, so only "
                                   "causal and key_lengths can restrict them"),
    "linear_relative_bias_softcap": (dict(linear=attnserve.LinearAttention(), softcap=30.0,
                                          relative_bias=attnserve.RelativeBias(
                                              torch.ones(2, 4), 4, 8)),
                                     "mask.relative_bias: a relative position bias cannot be "
                                     "linearised: linear attention sums phi(k) v^T over the "
                                     "keys once, so only causal and key_lengths can restrict "
                                     "them"),
    "linear_softcap": (dict(linear=attnserve.LinearAttention(), softcap=30.0),
                       "softcap: logit soft-capping cannot be linearised: linear attention "
                       "sums phi(k) v^T over the keys once, so only causal and key_lengths "
                       "can restrict them"),
    "linear_sinks": (dict(linear=attnserve.LinearAttention("relu"), sinks=[0.0, 1.0]),
                     "sinks: attention sinks cannot be linearised: linear attention sums "
                     "phi(k) v^T over the keys once, so only causal and key_lengths can "
                     "restrict them"),
    "linear_sinks_count": (dict(linear=attnserve.LinearAttention(), sinks=[0.0]),
                           "sinks: expected 2 entries (one per query head), got 1"),
    "lsh_buckets": (dict(lsh=attnserve.LshAttention(num_buckets=3), key=None),
                    "lsh.num_buckets: must be 1 or even in [2, 4096], got 3"),
    "lsh_hashes": (dict(lsh=attnserve.LshAttention(num_hashes=65), key=None),
                   "lsh.num_hashes: must be in [1, 64], got 65"),
    "lsh_chunk": (dict(lsh=attnserve.LshAttention(chunk_size=0), key=None),
                  "lsh.chunk_size: must be in [1, 65536], got 0"),
    "lsh_mask": (dict(lsh=attnserve.LshAttention(), key=None, attn_mask=np.ones(16, bool)),
                 "mask.explicit_mask: an explicit mask is not supported by LSH attention, "
                 "which attends within hash chunks (only causal and key_lengths apply)"),
    "lsh_softcap": (dict(lsh=attnserve.LshAttention(), key=None, softcap=50),
                    "softcap: logit soft-capping is not supported by LSH attention, which "
                    "attends within hash chunks (only causal and key_lengths apply)"),
    "lsh_sinks": (dict(lsh=attnserve.LshAttention(), key=None, sinks=torch.ones(2)),
                  "sinks: attention sinks is not supported by LSH attention, which attends "
                  "within hash chunks (only causal and key_lengths apply)"),
    "lsh_relative_bias": (dict(lsh=attnserve.LshAttention(), key=None,
                               relative_bias=attnserve.RelativeBias(np.zeros((2, 32)), 32,
                                                                    bidirectional=True)),
                          "mask.relative_bias: a relative position bias is not supported by "
                          "LSH attention, which attends within hash chunks (only causal and "
                          "key_lengths apply)"),
    "lsh_key": (dict(lsh=attnserve.LshAttention()),
                "key: LSH attention shares queries and keys (Reformer's shared-QK); send "
                "no key"),
    "lsh_value_shape": (dict(lsh=attnserve.LshAttention(), key=None, value=V[:, :, :8]),
                        "value: LSH attention takes its keys from the queries, so value "
                        "needs the query's batch, heads and length: expected [1, 2, 16, 8], "
                        "got [1, 2, 8, 8]"),
}


def _args(kw):
    kw = dict(kw)
    return kw.pop("query", Q), kw.pop("key", K), kw.pop("value", V), kw


@pytest.mark.parametrize("case", sorted(CHECKS))
def test_client_side_checks(case):
    q, k, v, kw = _args(CHECKS[case][0])
    with pytest.raises(attnserve.InvalidArgument) as caught:
        _codec.attend_request(q, k, v, **kw)
    assert caught.value.message == CHECKS[case][1]


@pytest.mark.parametrize("kw,message", [
    (dict(softcap=0.0), "softcap: must be finite and > 0, got 0"),
    (dict(sinks=[float("inf"), 0.0]), "sinks[0]: must be finite, got inf"),
    (dict(relative_bias=attnserve.RelativeBias([0.0, float("nan")] * 4, 4, 8)),
     "mask.relative_bias.table[1]: must be finite, got nan"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((2, 2)), 2, 8, bidirectional=True)),
     "mask.relative_bias.num_buckets: 2 is outside [4, 1024] (bidirectional)"),
    (dict(relative_bias=attnserve.RelativeBias(np.zeros((2, 32)), 32, 10)),
     "mask.relative_bias.max_distance: 10 is outside (16, 4096] (it must pass the 16 exact "
     "buckets)"),
    # The table's size is checked before the method too, by the client as well.
    (dict(relative_bias=attnserve.RelativeBias(np.zeros(32), 32)),
     "mask.relative_bias.table: expected Hq × num_buckets = 2 × 32 = 64 entries, got 32"),
])
def test_invalid_softcap_sinks_and_relative_bias_are_refused_for_their_value_first(
        client, kw, message):
    # The server checks their values before the method, and says so: the client
    # leaves them to it rather than refusing the method in other words.
    for method in (dict(linear=attnserve.LinearAttention()),
                   dict(lsh=attnserve.LshAttention(), key=None)):
        q, k, v, rest = _args({**method, **kw})
        with pytest.raises(attnserve.InvalidArgument) as caught:
            client.attend(q, k, v, **rest)
        assert caught.value.message == message


def test_one_method_per_request():
    with pytest.raises(attnserve.InvalidArgument, match="one method per request"):
        _codec.attend_request(Q, None, V, linear=attnserve.LinearAttention(),
                              lsh=attnserve.LshAttention())
    with pytest.raises(TypeError, match="attnserve.BlockSparse"):
        _codec.attend_request(Q, K, V, block_sparse={"block_size": 4})


# --- against the server -----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CHECKS))
def test_server_says_the_same(server, case):
    q, k, v, kw = _args(CHECKS[case][0])
    unchecked, _ = _codec.attend_request(q, k, v, check=False, **kw)
    with grpc.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            pb_grpc.AttentionServiceStub(channel).Attend(unchecked)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == CHECKS[case][1]


LAYOUTS = {
    "local": attnserve.BlockSparse(block_size=8, local_left=1, local_right=0),
    "strided": attnserve.BlockSparse(block_size=8, local_left=0, stride=3),
    "fixed_global": attnserve.BlockSparse(block_size=8, stride=2, stride_pattern="fixed",
                                          global_tokens=[0, 17]),
    "random": attnserve.BlockSparse(block_size=8, random_blocks=2, seed=42),
    "block_mask": attnserve.BlockSparse(
        block_size=16, block_mask=np.random.default_rng(5).random((3, 4)) > 0.5),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_block_sparse_matches_the_dense_mask_of_its_layout(client, name, alignment):
    spec = LAYOUTS[name]
    lq, lk = 40, 56
    q, k, v = (random((1, 4, n, 16), seed=s) for s, n in ((6, lq), (7, lk), (8, lk)))
    k, v = k[:, :2], v[:, :2]
    out, w = client.attend(q, k, v, block_sparse=spec, is_causal=True, alignment=alignment,
                           return_weights=True)
    allowed = block_sparse_allowed(spec, lq, lk, alignment)
    want_out, want_w = attention(q, k, v, is_causal=True, alignment=alignment,
                                 allowed=allowed)
    assert_close(out, want_out, 1e-5)
    assert_close(w, want_w, 1e-5)


def linear_reference(q, k, v, feature_map, scale=None, is_causal=False, key_lengths=None):
    q, k, v = to_torch64(q), to_torch64(k), to_torch64(v)
    b, hq, lq, d = q.shape
    group = hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = d ** -0.5 if scale is None else scale
    phi = {"elu_plus_one": lambda x: torch.nn.functional.elu(x) + 1,
           "relu": torch.relu}[feature_map]
    fq, fk = phi(scale ** 0.5 * q), phi(scale ** 0.5 * k)
    lk = k.shape[2]
    allowed = torch.ones(b, 1, lq, lk, dtype=torch.bool)
    if is_causal:
        allowed &= torch.arange(lk)[None, :] <= torch.arange(lq)[:, None]
    if key_lengths is not None:
        allowed &= torch.arange(lk).view(1, 1, 1, lk) < torch.tensor(key_lengths).view(b, 1, 1, 1)
    a = (fq @ fk.transpose(-1, -2)) * allowed
    return (a @ v) / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("feature_map", ["elu_plus_one", "relu"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_attention_matches_its_formula(client, feature_map, is_causal):
    q, k, v = random((2, 4, 12, 16), seed=9), random((2, 2, 12, 16), seed=10), \
        random((2, 2, 12, 16), seed=11)
    out = client.attend(q, k, v, is_causal=is_causal, key_lengths=[12, 9],
                        linear=attnserve.LinearAttention(feature_map))
    assert_close(out, linear_reference(q, k, v, feature_map, is_causal=is_causal,
                                       key_lengths=[12, 9]), 1e-4)


def test_favor_plus_is_reproducible_and_approximates_softmax(client):
    q, k, v = (0.3 * random((1, 2, 32, 16), seed=s) for s in (12, 13, 14))
    favor = attnserve.LinearAttention("favor_plus", num_features=4096, seed=7)
    a = client.attend(q, k, v, linear=favor)
    b = client.attend(q, k, v, linear=favor)
    c = client.attend(q, k, v, linear=attnserve.LinearAttention("favor_plus",
                                                                num_features=4096, seed=8))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    exact = attention(q, k, v)[0].numpy()
    assert np.abs(a - exact).mean() < 0.05 * np.abs(exact).mean() + 1e-3


def test_lsh_is_reproducible_from_its_seed(client):
    q, v = random((1, 2, 64, 16), seed=15), random((1, 2, 64, 16), seed=16)
    spec = attnserve.LshAttention(num_hashes=2, num_buckets=8, chunk_size=8, seed=3)
    a = client.attend(q, None, v, lsh=spec, is_causal=True)
    b = client.attend(q, None, v, lsh=spec, is_causal=True)
    c = client.attend(q, None, v, is_causal=True, lsh=attnserve.LshAttention(
        num_hashes=2, num_buckets=8, chunk_size=8, seed=4))
    assert a.shape == (1, 2, 64, 16)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
