"""Bessel functions (decomp/bessel.py): i0, i0e, i1, i1e, the modified I, K (plain and scaled), J and Y of orders 0
and 1 are our kernels on both backends, give eager's special values (NaN, signed infinities, signed zeros)
and float32 results within one float32 rounding of the exact value, where eager's own are up to 70000x
further off (J and Y near their zeros)."""

import functools
import math

import pytest
import torch

import compiler_core as cc

mpmath = pytest.importorskip("mpmath")

S = torch.special
OPS = {"i0": torch.i0, "i0e": S.i0e, "i1": S.i1, "i1e": S.i1e, "modified_i0": S.modified_bessel_i0,
       "modified_i1": S.modified_bessel_i1, "k0": S.modified_bessel_k0, "k1": S.modified_bessel_k1,
       "scaled_k0": S.scaled_modified_bessel_k0, "scaled_k1": S.scaled_modified_bessel_k1,
       "j0": S.bessel_j0, "j1": S.bessel_j1, "y0": S.bessel_y0, "y1": S.bessel_y1}
OSCILLATING = {"j0", "j1", "y0", "y1"}
# The branch switches of bessel.py (K at 1, J and Y at 12, I at 20) and float32's I0 overflow, with the five
# floats on either side of each.
SWITCHES = (1.0, 12.0, 20.0, 88.72283935546875)


def all_ops(x):
    return tuple(f(x) for f in OPS.values())


def _around(points: tuple[float, ...], steps: int = 5) -> torch.Tensor:
    out = []
    for p in torch.tensor(points):
        up = down = p
        for _ in range(steps):
            up, down = torch.nextafter(up, torch.tensor(math.inf)), torch.nextafter(down, torch.tensor(-math.inf))
            out += [up, down]
        out.append(p)
    return torch.stack(out)


def _grid() -> torch.Tensor:
    tiny = torch.logspace(-38, 1, 400)
    finite = torch.cat([torch.linspace(0, 700, 3001), torch.linspace(0, 30, 1501), tiny, _around(SWITCHES),
                        torch.tensor([1e5, 1e10, 1e30, 3e38])])
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])
    return torch.cat([finite, -finite, special]).float()


POINTS = _grid()


@functools.lru_cache(maxsize=None)
def _exact_at(kind: str, nu: int, a: float) -> float:
    """I, K, J or Y of order nu at a >= 0 from mpmath, 40 digits; I and K scaled by exp(-a) and exp(a)."""
    with mpmath.workdps(40):
        a = mpmath.mpf(a)
        if kind == "i":
            return float(mpmath.besseli(nu, a) * mpmath.exp(-a))
        if kind == "k":
            return float(mpmath.besselk(nu, a) * mpmath.exp(a))
        return float((mpmath.besselj if kind == "j" else mpmath.bessely)(nu, a))


def _exact(name: str, x: torch.Tensor) -> torch.Tensor:
    """The op's values at float64 x from mpmath (NaN where they are not real numbers)."""
    kind, nu = ("k" if name.startswith("scaled") else name.removeprefix("modified_")[0]), int(name.rstrip("e")[-1])
    values = []
    for v in x.tolist():
        if not math.isfinite(v) or (kind in "ky" and v <= 0):
            values.append(math.nan)
            continue
        value = _exact_at(kind, nu, abs(v)) * (-1 if v < 0 and nu == 1 else 1)
        if kind == "i" and not name.endswith("e"):
            value = value * math.exp(abs(v)) if abs(v) < 700 else math.nan
        if name in ("k0", "k1"):
            value *= math.exp(-v)
        values.append(value)
    return torch.tensor(values, dtype=torch.float64)


def _reference(name: str, x: torch.Tensor) -> torch.Tensor:
    """Near-exact values at float32 x: eager's in float64 for I and K (within 1.2e-15 of mpmath's on a
    dense grid) and for J and Y with |x| in [20, 1000] (3e-14); elsewhere mpmath's for J and Y: below 20
    eager's float64 errs by up to 2e-6 (x in [5, 8]), so every 4th point there (NaN, not compared, at the
    others), and beyond 1000 its phase x - pi/4 loses digits."""
    reference = OPS[name](x.double())
    if name in OSCILLATING:
        below, beyond = torch.nonzero(x.abs() < 20).flatten(), torch.nonzero(x.abs() > 1000).flatten()
        reference[below] = math.nan
        for at in (below[::4], beyond):
            reference[at] = _exact(name, x[at].double())
    return reference


def _errors(got: torch.Tensor, exact: torch.Tensor, x: torch.Tensor, floor: float) -> torch.Tensor:
    """|got - exact| / max(|exact|, floor) where the exact value and x are finite normal float32s."""
    measured = torch.isfinite(exact) & (exact.abs() >= 1.2e-38) & torch.isfinite(got) & (x.abs() >= 1.2e-38)
    return ((got.double() - exact).abs() / exact.abs().clamp_min(floor))[measured]


def _same_special_values(got: torch.Tensor, expected: torch.Tensor) -> None:
    """NaN, infinities and zeros exactly where eager has them, with eager's signs."""
    special = ~torch.isfinite(expected) | ~torch.isfinite(got) | (expected == 0)
    torch.testing.assert_close(got[special], expected[special], equal_nan=True, atol=0, rtol=0)
    zeros = special & (expected == 0)
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(expected[zeros]))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_bessel_functions_are_our_kernels_with_eagers_special_values_and_float32_rounding(backend):
    compiled = cc.compile(all_ops, backend=backend)
    results = compiled(POINTS)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    assert compiled.session.stats["kernel_count"] >= 1
    for (name, fn), got in zip(OPS.items(), results):
        expected = fn(POINTS)
        assert got.dtype == torch.float32, name
        _same_special_values(got, expected)
        # J and Y: a small absolute floor for the points next to a zero crossing
        reference, floor = _reference(name, POINTS), (1e-4 if name in OSCILLATING else 1.2e-38)
        ours, eagers = _errors(got, reference, POINTS, floor), _errors(expected, reference, POINTS, floor)
        # within float32's rounding (2^-24 relative) of the exact value, and at most twice eager's error
        assert ours.max() <= 2 ** -23, (name, ours.max())
        assert ours.max() <= 2 * eagers.max(), (name, ours.max(), eagers.max())


def test_bessel_functions_of_float64_halves_and_integers():
    """float64 inputs are computed to float64's precision (I and K within 2x eager's float64 error; J and Y
    to ~1e-12 absolute next to x = 12, where eager's float64 J and Y err by 1e-10, and by up to 2e-6 relative
    for x in [5, 8]); i0, i0e, i1 and i1e of float16 and bfloat16 round our float64 value once, as eager
    rounds its float32 one; integers become the default dtype. One op of each family per dtype (each op is
    ~150 primitives, and compile time grows with them); one compile for all."""
    doubles = ("i0", "scaled_k1", "k0", "j1", "y0")  # i0: no float32 overflow rule in float64
    halves, integers_of = ("i1e", "i0"), ("i1", "y1")

    def program(x64, x16, bf16, integers):
        return ([OPS[n](x64) for n in doubles], [OPS[n](x16) for n in halves], [OPS[n](bf16) for n in halves],
                [OPS[n](integers) for n in integers_of])

    x64 = torch.cat([torch.linspace(-40, 40, 53), torch.tensor([1e-300, 5.5, 6.0, 7.25, 11.99, 12.01, 600.5, 1e5]),
                     torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])]).double()
    x16 = torch.linspace(-12, 12, 241)
    integers = torch.arange(-10, 30)
    compiled = cc.compile(program, backend="cpp")
    from_doubles, halves16, halves_bf16, from_integers = compiled(x64, x16.half(), x16.bfloat16(), integers)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats
    for name, got in zip(doubles, from_doubles):
        expected = OPS[name](x64)
        assert got.dtype == torch.float64
        _same_special_values(got, expected)
        exact, floor = _exact(name, x64), (1e-4 if name in OSCILLATING else 1e-300)
        ours, eagers = _errors(got, exact, x64, floor), _errors(expected, exact, x64, floor)
        bound = 4e-11 if name in OSCILLATING else 2 * max(eagers.max().item(), 2 ** -52)
        assert ours.max() <= bound, (name, ours.max(), eagers.max())
    for name, got16, got_bf16 in zip(halves, halves16, halves_bf16):
        torch.testing.assert_close(got16, OPS[name](x16.half()), equal_nan=True)
        torch.testing.assert_close(got_bf16, OPS[name](x16.bfloat16()), equal_nan=True)
    for name, got in zip(integers_of, from_integers):
        assert got.dtype == OPS[name](integers).dtype == torch.get_default_dtype()
        _same_special_values(got, OPS[name](integers))
        assert _errors(got, _exact(name, integers.double()), integers, 1e-4).max() <= 2 ** -23, name


def test_bessel_of_half_stays_eagers_where_eager_has_no_half_kernel():
    """bessel_j0 has no float16 kernel in eager: the compiled call raises eager's error, not a result."""
    compiled = cc.compile(lambda x: S.bessel_j0(x) * 2, backend="cpp")
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        compiled(torch.ones(3, dtype=torch.float16))
