"""attnserve._step_codec on its own: a step's bytes parse as the request the
protobuf library builds from the same arguments, and answers decode into one
tensor for the batch, or raise what the server or a malformed answer says."""

import pytest
import torch

import attnserve
from attnserve import _codec as C
from attnserve._step_codec import StepCodec
from attnserve.v1 import attention_pb2 as pb
from attnserve.v1 import sessions_pb2 as spb


def batch(dtype, b=3, t=2, hq=4, hkv=2, d=16, dv=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, t, hq, d, generator=g).to(dtype),
            torch.randn(b, t, hkv, d, generator=g).to(dtype),
            torch.randn(b, t, hkv, dv, generator=g).to(dtype))


def library_request(layer, ids, q, k, v, positions, sinks, options):
    parts = [(sid, q[i]) if k is None else (sid, q[i], k[i], v[i], positions[i])
             for i, sid in enumerate(ids)]
    req, _ = C.attend_sessions_request(layer, parts, sinks=sinks, **options)
    return req


OPTIONS = [
    {},
    {"causal": True, "scale": 0.25, "softcap": 30.0, "output_dtype": "float32"},
    {"window_left": 7, "alibi_slopes": [0.5, 0.25, 0.125, 0.0625],
     "relative_bias": attnserve.RelativeBias(torch.randn(4, 8), 8, 20)},
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("options", OPTIONS)
def test_a_steps_bytes_parse_as_the_librarys_request(dtype, options):
    codec = StepCodec(**options)
    q, k, v = batch(dtype)
    ids = ["a", "sequence-b", "c" * 128]
    # Positions of one to six varint bytes; layers past one byte's varint.
    for layer, positions, sinks in ((0, [0, 127, 128], None),
                                    (200, [16383, 16384, 2 ** 40], [0.5, -1.0, 2.0, 0.0]),
                                    (3, None, torch.tensor([1.0, 2.0, 3.0, 4.0]))):
        kv = (None, None) if positions is None else (k, v)
        got = spb.AttendSessionsRequest.FromString(
            codec.request(layer, ids, q, *kv, positions=positions, sinks=sinks))
        assert got == library_request(layer, ids, q, *kv, positions, sinks, options)


def test_a_steps_rows_may_be_a_slice_of_a_longer_batch():
    codec = StepCodec()
    q, k, v = batch(torch.float32, t=6)
    chunk = (q[:, 2:4], k[:, 2:4], v[:, 2:4])     # each sequence's rows contiguous
    got = spb.AttendSessionsRequest.FromString(
        codec.request(1, ["a", "b", "c"], *chunk, positions=[2, 2, 2]))
    assert got == library_request(1, ["a", "b", "c"], *chunk, [2, 2, 2], None, {})
    # Rows that are not contiguous are copied, not sent as they lie.
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    got = spb.AttendSessionsRequest.FromString(codec.request(1, ["a", "b", "c"], strided))
    assert got == library_request(1, ["a", "b", "c"], q, None, None, None, None, {})


def test_takes_only_cpu_float_tensors_of_one_dtype_without_grad():
    q, k, v = batch(torch.float32)
    assert StepCodec.takes(q, k, v) and StepCodec.takes(q, None, None)
    assert not StepCodec.takes(q.double(), None, None)
    assert not StepCodec.takes(q, k.bfloat16(), v)
    assert not StepCodec.takes(q.numpy(), None, None)
    assert not StepCodec.takes(q.requires_grad_(), None, None)
    assert not StepCodec.takes(None, None, None)


def test_the_options_are_checked_as_the_client_checks_them():
    with pytest.raises(attnserve.InvalidArgument, match=r"^scale: inf is not finite"):
        StepCodec(scale=float("inf"))
    with pytest.raises(attnserve.InvalidArgument, match=r"^output_dtype: int8 is not"):
        StepCodec(output_dtype="int8")


def answer(dtype, shapes, **fields):
    resp = spb.AttendSessionsResponse(**fields)
    outs = []
    for i, shape in enumerate(shapes):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(i)).to(dtype)
        raw = (x.view(torch.int16) if dtype is torch.bfloat16 else x).numpy().tobytes()
        wire = {torch.float32: pb.FLOAT32, torch.bfloat16: pb.BFLOAT16,
                torch.float16: pb.FLOAT16}[dtype]
        resp.results.add(session_id=f"s{i}", output=pb.Tensor(dtype=wire, shape=shape,
                                                                data=raw))
        outs.append(x)
    return resp.SerializeToString(), outs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_answers_become_one_tensor_for_the_batch(dtype):
    data, outs = answer(dtype, [(2, 4, 8)] * 3)
    got = StepCodec.outputs(data, 3, (2, 4, 8))
    assert got.dtype == dtype and got.shape == (3, 2, 4, 8)
    assert torch.equal(got, torch.stack(outs))


def test_an_answered_error_is_raised_as_the_client_raises_it():
    data, _ = answer(torch.float32, [], error_code=5, error_message="session \"x\" not found")
    with pytest.raises(attnserve.NotFound, match="session \"x\" not found"):
        StepCodec.outputs(data, 1, (1, 4, 8))


def test_a_malformed_answer_is_an_internal_error():
    data, _ = answer(torch.float32, [(1, 4, 8)] * 2)
    with pytest.raises(attnserve.Internal, match=r"answered 2 results for 3 sessions"):
        StepCodec.outputs(data, 3, (1, 4, 8))
    with pytest.raises(attnserve.Internal, match=r"results\[0\].output: FLOAT32 \[1, 4, 8\] in "
                       r"128 bytes, expected a float \[1, 4, 16\]"):
        StepCodec.outputs(data, 2, (1, 4, 16))
    for field, value, said in (("data", b"\0" * 12, r"FLOAT32 \[1, 4, 8\] in 12 bytes"),
                               ("dtype", 77, r"dtype 77 \[1, 4, 8\] in 128 bytes")):
        bad = spb.AttendSessionsResponse.FromString(data)
        setattr(bad.results[0].output, field, value)
        with pytest.raises(attnserve.Internal, match=rf"results\[0\].output: {said}, "
                           r"expected a float \[1, 4, 8\]"):
            StepCodec.outputs(bad.SerializeToString(), 2, (1, 4, 8))
    mixed = spb.AttendSessionsResponse.FromString(data)
    mixed.results[1].output.dtype = pb.FLOAT16
    mixed.results[1].output.data = mixed.results[1].output.data[:64]
    with pytest.raises(attnserve.Internal, match=r"results\[1\].output: float16, "
                       r"results\[0\]'s torch.float32"):
        StepCodec.outputs(mixed.SerializeToString(), 2, (1, 4, 8))
