"""AsyncClient under concurrency, its stream, sessions and models."""

import asyncio

import pytest
import torch

import attnserve
from reference import attention, random
from test_parity import assert_close


def test_many_concurrent_calls_each_get_their_own_answer(server):
    inputs = [[random((1, 4, 6 + i % 5, 16), seed=3 * i + j) for j in range(3)]
              for i in range(48)]

    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60, connections=3) as c:
            return await asyncio.gather(*[
                c.attend(q, k, v, is_causal=bool(i % 2), alignment="bottom_right")
                for i, (q, k, v) in enumerate(inputs)])

    outs = asyncio.run(main())
    for i, ((q, k, v), out) in enumerate(zip(inputs, outs)):
        assert_close(out, attention(q, k, v, is_causal=bool(i % 2),
                                    alignment="bottom_right")[0], 1e-5)


def test_async_stream_in_order_with_errors_in_place(server):
    good = [[random((1, 2, 4, 8), seed=10 * i + j) for j in range(3)] for i in range(20)]
    items = [tuple(x) for x in good]
    items.insert(5, dict(query=good[0][0], key=good[0][1], value=good[0][2], key_lengths=[99]))

    async def gen():
        for item in items:
            await asyncio.sleep(0)
            yield item

    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            return [x async for x in c.attend_many(gen(), return_exceptions=True)]

    outs = asyncio.run(main())
    assert len(outs) == 21
    assert isinstance(outs[5], attnserve.InvalidArgument)
    assert outs[5].message == "mask.key_lengths[0] = 99 is out of range [0, Lk = 4]"
    for (q, k, v), out in zip(good, outs[:5] + outs[6:]):
        assert_close(out, attention(q, k, v)[0], 1e-5)


def test_async_sessions_and_models_and_info(server):
    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            assert await c.health() == "SERVING"
            info = await c.server_info()
            s = await c.create_session("async-1", num_kv_heads=2, head_dim=8)
            keys, values = random((6, 2, 8), seed=1), random((6, 2, 8), seed=2)
            await s.append(0, keys, values, chunk_tokens=4)
            q = random((1, 4, 8), seed=3)
            out = await s.attend(0, q)
            tokens = (await s.info()).layer_tokens
            # A move through bytes: exported (and ended), imported again.
            data = await c.export_sessions(["async-1"], remove=True)
            with pytest.raises(attnserve.Unavailable):
                await s.info()
            [back] = await c.import_sessions(data)
            assert back.session_id == "async-1" and back.layer_tokens == (6,)
            await s.close()
            hidden = torch.from_numpy(random((1, 3, 64), seed=4))
            m = c.model("mha_post")
            one = await m(hidden)
            many = [x async for x in m.many([hidden, hidden])]
            return info, keys, values, q, out, tokens, one, many

    info, keys, values, q, out, tokens, one, many = asyncio.run(main())
    assert info.max_request_bytes > 0 and "mha_post" in [m.name for m in info.models]
    assert tokens == (6,)
    want = attention(q[None].transpose(0, 2, 1, 3), keys[None].transpose(0, 2, 1, 3),
                     values[None].transpose(0, 2, 1, 3))[0][0].transpose(0, 1)
    assert_close(out, want, 1e-5)
    assert isinstance(one, torch.Tensor) and one.shape == (1, 3, 64)
    for x in many:
        assert torch.equal(x, one)


def test_async_softcap_and_sinks(server):
    q, k, v = (random((1, 4, 5, 8), seed=70 + i) for i in range(3))
    k, v = k[:, :2], v[:, :2]
    keys, values = k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2)  # [L, Hkv, D]
    step_q = q[0].transpose(1, 0, 2)[-2:]                              # the last 2 queries
    opts = dict(softcap=1.25, sinks=torch.tensor([0.5, -0.5, 1.0, 2.0]))

    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            out = await c.attend(q, k, v, is_causal=True, **opts)
            s = await c.create_session("async-softcap", num_kv_heads=2, head_dim=8)
            await s.append(0, keys[:3], values[:3])
            step = await s.attend(0, step_q, keys[3:], values[3:], **opts)
            async with await c.session_stream() as steps:
                (streamed,) = await steps.attend_sessions(0, [(s, step_q)], **opts)
            await s.close()
            return out, step, streamed

    out, step, streamed = asyncio.run(main())
    want = attention(q, k, v, is_causal=True, **opts)[0]
    assert_close(out, want, 1e-5)
    # The session's step is the last two rows of the causal attention over its 5 tokens.
    assert_close(step, want[0, :, -2:].transpose(0, 1), 1e-5)
    assert_close(streamed, want[0, :, -2:].transpose(0, 1), 1e-5)


def test_async_relative_bias(server):
    # T5's decoder bias: a stateless call, a session step over its cache, a stream's
    # step and attend_many give what the float64 oracle does.
    q, k, v = (random((1, 4, 40, 8), seed=80 + i) for i in range(3))
    keys, values = k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2)  # [L, Hkv, D]
    step_q = q[0].transpose(1, 0, 2)[-3:]                              # the last 3 queries
    rb = attnserve.RelativeBias(torch.randn(4, 16, generator=torch.Generator().manual_seed(8)),
                                16, 20)
    opts = dict(scale=1.0, relative_bias=rb)

    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            out = await c.attend(q, k, v, is_causal=True, **opts)
            many = [x async for x in c.attend_many([(q, k, v)] * 2, is_causal=True, **opts)]
            s = await c.create_session("async-relbias", num_kv_heads=4, head_dim=8)
            await s.append(0, keys[:37], values[:37])
            step = await s.attend(0, step_q, keys[37:], values[37:], **opts)
            async with await c.session_stream() as steps:
                (streamed,) = await steps.attend_sessions(0, [(s, step_q)], **opts)
            (batched,) = await c.attend_sessions(0, [(s, step_q)], **opts)
            await s.close()
            return out, many, step, streamed, batched

    out, many, step, streamed, batched = asyncio.run(main())
    want = attention(q, k, v, is_causal=True, **opts)[0]
    assert_close(out, want, 1e-5)
    for x in many:
        assert_close(x, want, 1e-5)
    # The session's steps are the last three rows of the causal attention over its 40.
    for x in (step, streamed, batched):
        assert_close(x, want[0, :, -3:].transpose(0, 1), 1e-5)


def test_async_request_past_the_message_limit_goes_in_pieces(server):
    # 20 MiB of keys and values: past the server's one-message limit.
    q = random((1, 2, 3, 64), seed=40)
    k = random((1, 2, 20480, 64), seed=41)
    v = random((1, 2, 20480, 64), seed=42)

    async def main():
        async with attnserve.AsyncClient(server.target, timeout=60) as c:
            return await c.attend(q, k, v)

    assert_close(asyncio.run(main()), attention(q, k, v)[0], 1e-5)
