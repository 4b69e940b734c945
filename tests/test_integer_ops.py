"""Integer ops the fp32 OpInfo sweep never reached until it swept int64-only ops too (2026-12-04): bit
shifts, as quantized checkpoints use them to unpack 4-bit weights. Values against eager's for every
integer dtype, shift amounts below 0 and past the width included (defined in ATen, undefined in C++
and poison in LLVM), on both backends, with nothing left to PyTorch."""

import pytest
import torch

import compiler_core as cc

BACKENDS = ["cpp", "triton"]
DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (257,), dtype=dtype, generator=torch.Generator().manual_seed(0))
    a[:4] = torch.tensor([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype=dtype)
    # every amount from a few below 0 to a few past the width, in turn
    low = -3 if info.min < 0 else 0
    b = (torch.arange(257) % (info.bits + 4 - low) + low).to(dtype)
    return a, b


def _all_ours(session) -> None:
    stats = session.stats
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [], (stats, session.messages)
    assert stats["kernel_count"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_shifts_match_eager_for_every_amount(backend, dtype):
    def fn(a, b):
        return torch.stack([a << b, a >> b, torch.bitwise_left_shift(a, 3), torch.bitwise_right_shift(a, b)])

    a, b = _operands(dtype)
    compiled = cc.compile(fn, backend=backend)
    got, expected = compiled(a, b), fn(a, b)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected), (got != expected).nonzero()[:5]
    _all_ours(compiled.session)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unpacking_four_bit_weights_is_one_kernel_and_exact(backend):
    # Eight 4-bit values per int32 (GPTQ's packing), unpacked and scaled per output column.
    def dequantize(packed, scales, zeros):
        shifts = torch.arange(0, 32, 4, dtype=torch.int32)
        nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [rows, cols, 8]
        nibbles = nibbles.reshape(packed.shape[0], -1)
        return (nibbles.to(torch.float32) - zeros) * scales

    gen = torch.Generator().manual_seed(1)
    packed = torch.randint(-2**31, 2**31 - 1, (16, 8), dtype=torch.int32, generator=gen)
    scales, zeros = torch.rand(64, generator=gen), torch.full((64,), 8.0)
    compiled = cc.compile(dequantize, backend=backend)
    got, expected = compiled(packed, scales, zeros), dequantize(packed, scales, zeros)
    assert torch.equal(got, expected)
    _all_ours(compiled.session)
