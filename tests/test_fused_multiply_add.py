"""The `fused_multiply_add` primitive (decomp/fused_multiply_add.py): a * b + c rounded once, in both
code generators and in the op's eager path, checked on values where rounding twice gives another
float32. The complex product on CUDA uses it (tests/test_complex_gpu.py checks eager's bits there)."""

from fractions import Fraction

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.fused_multiply_add import rounded_once_float32


def _operands(n: int = 4096) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    c = -(a * b) + torch.randn(n, generator=g) * 1e-3  # cancellation: the product's rounding shows
    return a, b, c


def _exact(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a * b + c in exact rationals, rounded to float64 and then float32: rounding twice can only
    differ from once where the float64 value is a float32 midpoint, which none of these operands hit
    (a float64 midpoint needs the exact sum within 2^-53 of one)."""
    values = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a.tolist(), b.tolist(), c.tolist())]
    return torch.tensor(values, dtype=torch.float64).float()


def test_the_eager_path_rounds_once():
    a, b, c = _operands()
    got = torch.ops.fcompile.fused_multiply_add(a, b, c)
    assert torch.equal(got, _exact(a, b, c))
    assert (got != a * b + c).sum() > 100, "the operands should tell one rounding from two"


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_both_code_generators_round_once(backend):
    def fn(a, b, c):
        return torch.ops.fcompile.fused_multiply_add(a * 2, b, c).sin() + 0.0  # fused with its neighbours

    torch._dynamo.reset()
    a, b, c = _operands()
    compiled = cc.compile(fn, backend=backend)
    got = compiled(a, b, c)
    expected = torch.sin(rounded_once_float32(a * 2, b, c))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    source = "\n".join(k.source for k in compiled.session.kernels)
    assert ("std::fma(" if backend == "cpp" else "tl.fma(") in source
    # The fused value itself, without the sine: bit for bit.
    torch._dynamo.reset()
    plain = cc.compile(lambda a, b, c: torch.ops.fcompile.fused_multiply_add(a, b, c) * 1.0, backend=backend)
    assert torch.equal(plain(a, b, c), rounded_once_float32(a, b, c))
    assert plain.session.stats["fallback_ops"] == []
