"""torch.special's orthogonal polynomials as our kernels: the `recurrence` primitive steps each element
its own number of times, on both backends, and the values are eager's."""

import pytest
import torch

import compiler_core as cc
from compiler_core.decomp.orthogonal import three_term_recurrence

POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
               "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
               "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def _grid() -> tuple[torch.Tensor, torch.Tensor]:
    """Every x against every degree: both sides of the ends (+-1, 0 and 0.5 for the shifted forms), NaN and
    the infinities, negative degrees, the closed-form switch (n > 4 ... 8), deep recurrences, and a
    degree past Hermite's limit (128 in float32); a non-integral degree truncates, a NaN one counts as
    negative."""
    ends = [-1.0, 0.0, 1.0, 0.5, 1.0000001, 3.0, -7.5, float("nan"), float("inf"), -float("inf")]
    x = torch.cat([torch.linspace(-1.25, 1.25, 101), torch.tensor(ends)])
    n = torch.cat([torch.arange(-2.0, 12.0), torch.tensor([2.5, 7.9, 30.0, 64.0, 128.0, 129.0, 300.0, float("nan")])])
    return torch.broadcast_tensors(x[:, None], n[None, :])


def _error(value: torch.Tensor, reference: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Relative error against the float64 reference, where eager's float32 value is finite."""
    return ((value.double() - reference).abs() / (1 + reference.abs()))[where & reference.isfinite()]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial_matches_eager_on_both_backends(name, backend):
    fn = getattr(torch.special, name)
    x, n = _grid()
    compiled = cc.compile(lambda a, b: fn(a, b), backend=backend)
    got = compiled(x, n)
    eager = fn(x, n)
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["kernel_count"] >= 1, stats
    # Finite on the same elements, but for a value at the edge of float32's range that rounds to inf on
    # one side only.
    edge = torch.maximum(got.abs().nan_to_num(0, 0, 0), eager.abs().nan_to_num(0, 0, 0)) > 3e38
    assert torch.equal(got.isfinite() | edge, eager.isfinite() | edge)
    # Where eager is NaN or infinite, ours is the same value (the NaN of Hermite's limit, the ends, the
    # recurrences that overflow).
    special = ~eager.isfinite() & ~edge
    assert torch.equal(got[special].isnan(), eager[special].isnan())
    assert torch.equal(got[special & ~eager.isnan()], eager[special & ~eager.isnan()])
    reference = fn(x.double(), n.double())
    compared = eager.isfinite() & got.isfinite()
    ours, theirs = _error(got, reference, compared), _error(eager, reference, compared)
    # The recurrences cancel at large degrees, so eager's own error is large there: ours may not exceed
    # twice it (C++ steps in eager's order and agrees to the bit on this machine; the Triton
    # interpreter's acos is a composition of a few ulp).
    assert ours.max() <= 2 * theirs.max() + 1e-5, (ours.max().item(), theirs.max().item())


def test_each_element_steps_its_own_degree_in_one_block():
    """Degrees 0 and 300 side by side: the Triton loop runs to the block's largest and holds the
    finished lanes; the C++ loop runs each element's own."""
    x = torch.full((64,), 1.001)
    n = torch.where(torch.arange(64) % 2 == 0, 300.0, 0.0)
    expected = torch.special.chebyshev_polynomial_t(x, n)
    for backend in ("cpp", "triton"):
        got = cc.compile(lambda a, b: torch.special.chebyshev_polynomial_t(a, b), backend=backend)(x, n)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=0)
        assert torch.all(got[1::2] == 1.0) and torch.all(got[::2] > 1.0)


def test_python_numbers_integers_and_float64():
    """The three overloads (x or n a Python number) and the dtypes eager promotes to."""
    n = torch.arange(0, 9)  # int64: eager computes in the default dtype
    x64 = torch.linspace(-2, 2, 9, dtype=torch.float64)
    cases = [(lambda b: torch.special.legendre_polynomial_p(0.3, b), (n,)),
             (lambda a: torch.special.hermite_polynomial_h(a, 5), (x64,)),
             (lambda a, b: torch.special.laguerre_polynomial_l(a, b), (torch.arange(-3, 6), n))]
    for fn, args in cases:
        expected = fn(*args)
        compiled = cc.compile(fn, backend="cpp")
        got = compiled(*args)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected)
        assert compiled.session.stats["fallback_ops"] == []


def test_the_custom_ops_eager_steps_are_the_recurrence():
    """`fcompile::three_term_recurrence` in eager (fallbacks and tracing run it): Legendre's recurrence
    from P_0 = 1, P_1 = x gives P_3 = (5x^3 - 3x) / 2."""
    x = torch.linspace(-1, 1, 11, dtype=torch.float64)
    got = three_term_recurrence(x, torch.full_like(x, 3, dtype=torch.int64), torch.ones_like(x), x,
                                (2.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0))
    torch.testing.assert_close(got, (5 * x ** 3 - 3 * x) / 2)
    zero_steps = three_term_recurrence(x, torch.zeros_like(x, dtype=torch.int64), torch.ones_like(x), x,
                                       (0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0))
    assert torch.equal(zero_steps, torch.ones_like(x))
