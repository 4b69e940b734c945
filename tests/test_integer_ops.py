"""Integer ops the fp32 OpInfo sweep never reached until it swept int64-only ops too (2026-12-04): bit
shifts, as quantized checkpoints use them to unpack 4-bit weights. Values against eager's for every
integer dtype, shift amounts below 0 and past the width included (defined in ATen, undefined in C++
and poison in LLVM), on both backends, with nothing left to PyTorch."""

import pytest
import torch

import compiler_core as cc

BACKENDS = ["cpp", "triton"]
# "cuda": the default backend on the GPU (Triton compiled for the card, not the interpreter), where
# integer division does not trap but Triton's `//` and `%` round toward zero as C does.
WITH_GPU = BACKENDS + [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])]
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


def _placed(backend: str, *tensors: torch.Tensor) -> tuple[str, list[torch.Tensor]]:
    """The backend to compile with and the tensors on its device ("cuda": our default backend there)."""
    if backend == "cuda":
        return "auto", [t.cuda() for t in tensors]
    return backend, list(tensors)


def _all_ours(session) -> None:
    stats = session.stats
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [], (stats, session.messages)
    assert stats["kernel_count"] == 1


@pytest.mark.parametrize("backend", WITH_GPU)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_shifts_match_eager_for_every_amount(backend, dtype):
    def fn(a, b):
        return torch.stack([a << b, a >> b, torch.bitwise_left_shift(a, 3), torch.bitwise_right_shift(a, b)])

    backend, (a, b) = _placed(backend, *_operands(dtype))
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


def _edge_pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of the type's edges (its most negative value, -1, 0, 1, its largest...) and random values."""
    info = torch.iinfo(dtype)
    edges = [info.min, info.min + 1, -1 if info.min < 0 else 2, 0, 1, 6, 12, info.max]
    a = torch.tensor([x for x in edges for _ in edges], dtype=dtype)
    b = torch.tensor([y for _ in edges for y in edges], dtype=dtype)
    generator = torch.Generator().manual_seed(1)
    random = [torch.randint(info.min, info.max, (300,), dtype=dtype, generator=generator) for _ in range(2)]
    random[1][::3] %= 60  # small divisors: long Euclid chains and common factors
    return torch.cat([a, random[0]]), torch.cat([b, random[1]])


@pytest.mark.parametrize("backend", WITH_GPU)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_integer_division_of_the_most_negative_value_by_minus_one_does_not_end_the_process(backend, dtype):
    """x86's idiv traps on the most negative value over -1 (the quotient overflows) and the trap killed
    the process (a user's notebook kernel) in our C++ kernels: remainder and fmod, which eager gives as
    0, and floor division, which eager wraps. Now eager's values; trunc division, which traps in eager
    itself, wraps as floor division does (compared with eager everywhere else)."""
    a, b = _edge_pairs(dtype)
    nonzero = b != 0  # a zero divisor raises eager's ZeroDivisionError: tests/test_bad_inputs.py
    backend, (a, b) = _placed(backend, a[nonzero], b[nonzero])

    def fn(a, b):
        return a // b, torch.remainder(a, b), torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc")

    compiled = cc.compile(fn, backend=backend)
    floor, remainder, fmod, trunc = compiled(a, b)
    assert torch.equal(floor, a // b) and torch.equal(remainder, torch.remainder(a, b))
    assert torch.equal(fmod, torch.fmod(a, b))
    traps = (a == torch.iinfo(dtype).min) & (b == -1) if dtype.is_signed else torch.zeros_like(a, dtype=torch.bool)
    assert torch.equal(trunc[~traps], torch.div(a[~traps], b[~traps], rounding_mode="trunc"))
    assert torch.equal(trunc[traps], a[traps])  # wrapped: -min is min (eager's CPU kernel traps here)
    assert compiled.session.stats["fallback_ops"] == []


@pytest.mark.parametrize("backend", WITH_GPU)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_gcd_and_lcm_are_one_kernel_and_match_eager(backend, dtype):
    """gcd (a primitive: ATen's Euclid on the magnitudes, a loop per element) and lcm from it (ATen's
    |a / g * b|, in 32 bits for int8, int16 and uint8 as C++ promotes them: lcm(-100, 90) in int8 is
    -124), which ran in eager before. The most negative int32 and int64 are left out of lcm, where
    eager's own division traps (ours wraps)."""
    a, b = _edge_pairs(dtype)
    smallest = torch.iinfo(dtype).min
    safe = ~((a == smallest) | (b == smallest)) if dtype in (torch.int32, torch.int64) else torch.ones_like(b) == 1

    def fn(a, b, c, d):
        return torch.gcd(a, b), torch.lcm(c, d)

    backend, (a, b, safe) = _placed(backend, a, b, safe)
    compiled = cc.compile(fn, backend=backend)
    for got, want in zip(compiled(a, b, a[safe], b[safe]), fn(a, b, a[safe], b[safe])):
        assert torch.equal(got, want)
    _all_ours(compiled.session)
